#!/usr/bin/env python3
"""Builds the corpus: real public pod specs, as Pods, with local images.

For each source (repository, commit, path) it takes every workload in the
file (Pod, Deployment, DaemonSet, StatefulSet, ReplicaSet,
ReplicationController, Job, CronJob), makes its pod template a Pod (every
field of the template kept; the Pod is named after the workload), and swaps
what cannot run on a machine without a registry or the internet:

  - every image becomes BUSYBOX (the harness puts the local busybox image's
    name there);
  - a container whose command busybox cannot run gets one that behaves like
    the workload where it matters: busybox's nc answering 200 on every port a
    probe dials, then a sleep that TERM ends; a
    container of a pod that runs to completion (restartPolicy Never or
    OnFailure) or an init container exits 0 instead;
  - an exec probe whose command busybox cannot run becomes [sh, -c, "true"];
  - a hostPath's path is put beneath HOSTROOT (the harness's own directory),
    so that no pod of the corpus touches the machine's files;
  - a name two specs share gets a suffix, so that the corpus can run at once.

Every swap is written in the Pod's header comment, with the source. Run from
this directory: python3 convert.py SRC_WEBSITE_DIR (the kubernetes/website
examples read through the search tools, see README.md); the other sources
are read from the git mirrors in MIRROR.
"""
import os
import re
import shlex
import subprocess
import sys

import yaml

MIRROR = "/work/.mirror"
APPLETS = set(subprocess.run(["busybox", "--list"], capture_output=True, text=True).stdout.split())
SHELL_WORDS = {"while", "for", "if", "until", "set", "cd", "exec", "[", "[[", "true", "echo", "touch", "mkdir"}
OK_RESPONDER = 'while read -r l; do case "$l" in "$(printf "\\r")"|"") break;; esac; done; printf "HTTP/1.0 200 OK\\r\\nContent-Length: 3\\r\\n\\r\\nok\\n"'
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job", "CronJob"}

LICENCE = {
    "kubernetes/website": "CC-BY-4.0",
}

# (repo, path, production workload name or "") per source read from a mirror.
MIRRORED = [
    ("prometheus-operator/kube-prometheus", "manifests/nodeExporter-daemonset.yaml", "node-exporter"),
    ("prometheus-operator/kube-prometheus", "manifests/grafana-deployment.yaml", "grafana"),
    ("prometheus-operator/kube-prometheus", "manifests/kubeStateMetrics-deployment.yaml", "kube-state-metrics"),
    ("prometheus-operator/kube-prometheus", "manifests/blackboxExporter-deployment.yaml", "blackbox-exporter"),
    ("prometheus-operator/kube-prometheus", "manifests/prometheusAdapter-deployment.yaml", "prometheus-adapter"),
    ("prometheus-operator/kube-prometheus", "manifests/prometheusOperator-deployment.yaml", "prometheus-operator"),
    ("kubernetes-sigs/metrics-server", "manifests/base/deployment.yaml", "metrics-server"),
    ("kubernetes/ingress-nginx", "deploy/static/provider/cloud/deploy.yaml", "ingress-nginx"),
    ("coredns/deployment", "kubernetes/coredns.yaml.sed", "coredns"),
    ("flannel-io/flannel", "Documentation/kube-flannel.yml", "flannel"),
    ("kubernetes-sigs/external-dns", "docs/tutorials/cloudflare.md", "external-dns"),
    ("kubernetes/examples", "web/guestbook/frontend-deployment.yaml", ""),
    ("kubernetes/examples", "web/guestbook/redis-master-deployment.yaml", ""),
    ("kubernetes/examples", "web/guestbook/redis-replica-deployment.yaml", ""),
    ("kubernetes/examples", "web/guestbook-go/guestbook-controller.yaml", ""),
    ("kubernetes/examples", "databases/cassandra/cassandra-statefulset.yaml", ""),
    ("kubernetes/examples", "databases/mysql-cinder-pd/mysql.yaml", ""),
    ("kubernetes/examples", "AI/model-serving-tensorflow/deployment.yaml", ""),
    ("kubernetes/examples", "_archived/cluster-dns/dns-frontend-pod.yaml", ""),
    ("kubernetes/examples", "_archived/cluster-dns/dns-backend-rc.yaml", ""),
    ("kubernetes/examples", "_archived/storage/redis/redis-master.yaml", ""),
    ("kubernetes/examples", "_archived/javaweb-tomcat-sidecar/javaweb.yaml", ""),
    ("kubernetes/examples", "_archived/storage/minio/minio-standalone-deployment.yaml", ""),
    ("kubernetes/examples", "_archived/selenium/selenium-hub-deployment.yaml", ""),
    ("kubernetes/examples", "_archived/volumes/nfs/nfs-busybox-deployment.yaml", ""),
    ("kubernetes/examples", "_archived/volumes/nfs/nfs-server-deployment.yaml", ""),
    ("kubernetes/examples", "_archived/volumes/iscsi/iscsi.yaml", ""),
    ("kubernetes/examples", "_archived/volumes/azure_file/azure.yaml", ""),
    ("kubernetes/examples", "_archived/newrelic-infrastructure/newrelic-infra-daemonset.yaml", ""),
    ("kubernetes/examples", "_archived/spark/spark-master-controller.yaml", ""),
    ("kubernetes/examples", "_archived/storage/rethinkdb/admin-pod.yaml", ""),
    ("kubernetes/examples", "_archived/explorer/pod.yaml", ""),
    ("kubernetes/examples", "_archived/podsecuritypolicy/rbac/pod_priv.yaml", ""),
    ("kubernetes/examples", "_archived/elasticsearch/es-rc.yaml", ""),
    ("kubernetes/examples", "_archived/storage/hazelcast/hazelcast-deployment.yaml", ""),
    ("kubernetes/examples", "_archived/cpu-manager/exclusive-1.yaml", ""),
]


def git(repo, *args):
    d = os.path.join(MIRROR, repo.replace("/", "+"), "repo")
    return subprocess.run(["git", "-C", d, *args], capture_output=True, text=True, check=True).stdout


def documents(text, path):
    if path.endswith(".md"):
        # The first block with a Deployment that parses: tutorials show
        # variants of one manifest (with and without RBAC).
        for b in re.findall(r"```ya?ml\n(.*?)```", text, re.S):
            if "kind: Deployment" not in b:
                continue
            try:
                docs = [d for d in yaml.safe_load_all(b) if isinstance(d, dict) and d.get("kind") == "Deployment"]
            except yaml.YAMLError:
                continue
            return docs[:1]
        return []
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def pods_of(doc):
    kind = doc.get("kind")
    if kind == "Pod":
        return [(kind, doc)]
    if kind not in WORKLOADS:
        return []
    spec = doc.get("spec") or {}
    tmpl = spec["jobTemplate"]["spec"]["template"] if kind == "CronJob" else spec.get("template")
    meta = dict(tmpl.get("metadata") or {})
    wmeta = doc.get("metadata") or {}
    meta["name"] = wmeta["name"]
    if "namespace" in wmeta:
        meta["namespace"] = wmeta["namespace"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]}
    # The StatefulSet controller adds a claim per volumeClaimTemplate,
    # named <template>-<set>-<ordinal>; this is its pod 0.
    for t in spec.get("volumeClaimTemplates") or []:
        name = t["metadata"]["name"]
        pod["spec"].setdefault("volumes", []).append(
            {"name": name, "persistentVolumeClaim": {"claimName": "%s-%s-0" % (name, wmeta["name"])}})
    return [(kind, pod)]


def runnable(argv):
    """Whether busybox runs argv as the original image would: an applet,
    not copying the original image's files (cp), not reaching out of the
    machine (a URL). No argv is the original image's own entrypoint."""
    if not argv:
        return False  # the original image's entrypoint: its daemon
    if any("://" in str(a) for a in argv):
        return False
    exe = os.path.basename(str(argv[0]))
    if exe not in APPLETS or exe == "cp":
        return False
    if exe == "sh" and len(argv) >= 3 and argv[1] == "-c":
        words = str(argv[2]).split()
        return not words or (words[0].rstrip(";") in APPLETS | SHELL_WORDS and words[0] != "cp")
    return True


def with_dirs(argv):
    """A `sh -c` script that writes a file (`> /dir/file`) into a directory
    the original image has and busybox may lack (nginx's /usr/share): the
    script with `mkdir -p /dir && ` before it, or None if it writes none."""
    if len(argv) < 3 or os.path.basename(str(argv[0])) != "sh" or argv[1] != "-c":
        return None
    dirs = sorted({os.path.dirname(m) for m in re.findall(r">\s*(/[^\s;&|]+)", str(argv[2]))} - {"", "/", "/tmp", "/dev"})
    if not dirs:
        return None
    return list(argv[:2]) + ["mkdir -p %s && %s" % (" ".join(dirs), argv[2])] + list(argv[3:])


def short(argv, n):
    """argv as one header line: line breaks shown as \\n, cut at n."""
    return shlex.join(map(str, argv)).replace("\n", "\\n")[:n]


def argv_of(c):
    return list(c.get("command") or []) + list(c.get("args") or [])


def entrypoint_args(c):
    """Args without a command are the original image's entrypoint's (only
    an absolute path or a shell names a program of its own)."""
    args = c.get("args") or []
    return not c.get("command") and args and not (str(args[0]).startswith("/") or args[0] == "sh")


def port_number(c, port):
    if isinstance(port, int):
        return port
    for p in c.get("ports") or []:
        if p.get("name") == port:
            return p["containerPort"]
    return None


def serving_command(c, completes):
    """A busybox command that answers the container's probes, or exits 0."""
    if completes:
        return ["sh", "-c", "echo corpus: the original command exits here; exit 0"]
    ports = []
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        p = c.get(probe) or {}
        for action in ("httpGet", "tcpSocket"):
            a = p.get(action)
            n = port_number(c, a.get("port")) if a else None
            if n and n not in ports:
                ports.append(n)
    # nc answers every request with 200 and writes nothing, so it works
    # with readOnlyRootFilesystem and any user; it reads the request's
    # head first so that closing does not reset the connection.
    # TERM ends it at once, as it ends the daemons it stands for (a sleep
    # as PID 1 would ignore it and wait out the grace period).
    script = ["trap 'exit 0' TERM;"]
    script += ["nc -ll -p %d -e sh -c %s &" % (n, shlex.quote(OK_RESPONDER)) for n in ports]
    script.append("sleep 2147483647 & wait")
    return ["sh", "-c", " ".join(script)]


def swap(pod, swaps, production):
    spec = pod["spec"]
    completes = spec.get("restartPolicy") in ("Never", "OnFailure")
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            where = "%s %s" % ("init container" if kind == "initContainers" else "container", c["name"])
            swaps.append("%s: image %s -> BUSYBOX" % (where, c.get("image")))
            c["image"] = "BUSYBOX"
            sidecar = kind == "initContainers" and c.get("restartPolicy") == "Always"
            ends = (kind == "initContainers" and not sidecar) or (kind == "containers" and completes)
            if entrypoint_args(c) or not runnable(argv_of(c)):
                cmd = serving_command(c, ends)
                orig = short(argv_of(c), 120) if argv_of(c) else "(the image's entrypoint)"
                swaps.append("%s: command %s -> %s" % (where, orig, shlex.join(cmd)))
                c["command"] = cmd
                c.pop("args", None)
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                p = c.get(probe) or {}
                if "exec" in p and not runnable(p["exec"].get("command")):
                    swaps.append("%s: %s exec %s -> sh -c true" % (where, probe, short(p["exec"]["command"], 80)))
                    p["exec"]["command"] = ["sh", "-c", "true"]
                if (p.get("httpGet") or {}).get("scheme") == "HTTPS":
                    swaps.append("%s: %s httpGet scheme HTTPS -> HTTP (busybox serves no TLS)" % (where, probe))
                    p["httpGet"]["scheme"] = "HTTP"
            for hook in ("postStart", "preStop"):
                h = (c.get("lifecycle") or {}).get(hook) or {}
                if "exec" in h and not runnable(h["exec"].get("command")):
                    swaps.append("%s: %s exec %s -> sh -c true" % (where, hook, short(h["exec"]["command"], 80)))
                    h["exec"]["command"] = ["sh", "-c", "true"]
                elif "exec" in h and with_dirs(h["exec"]["command"]):
                    cmd = with_dirs(h["exec"]["command"])
                    swaps.append("%s: %s exec %s -> %s (the original image has the directory, busybox's may not)" % (where, hook, short(h["exec"]["command"], 80), short(cmd, 120)))
                    h["exec"]["command"] = cmd
    # runAsNonRoot is checked against the image's user, as the kubelet
    # does: the original images run as a non-root USER, busybox's is root.
    psc = spec.get("securityContext") or {}
    for kind in ("initContainers", "containers"):
        for c in spec.get(kind) or []:
            sc = c.get("securityContext") or {}
            nonroot = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            if nonroot and sc.get("runAsUser", psc.get("runAsUser")) is None:
                c.setdefault("securityContext", {})["runAsUser"] = 65534
                swaps.append("container %s: securityContext.runAsUser 65534 added: runAsNonRoot without runAsUser, the original image's USER is not root, busybox's is" % c["name"])
    for v in spec.get("volumes") or []:
        hp = v.get("hostPath")
        if hp:
            swaps.append("volume %s: hostPath %s -> HOSTROOT%s" % (v["name"], hp["path"], hp["path"]))
            hp["path"] = "HOSTROOT" + hp["path"]


def slug(s):
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def write(out, name, header, pod):
    with open(os.path.join(out, name + ".yaml"), "w") as f:
        for line in header:
            f.write("# " + line + "\n")
        yaml.safe_dump(pod, f, sort_keys=False, default_flow_style=False, width=1000)


def convert(repo, commit, path, text, production, out, names, index):
    docs = documents(text, path)
    for doc in docs:
        for kind, pod in pods_of(doc):
            meta = pod["metadata"]
            ns = meta.get("namespace", "default")
            orig = meta["name"]
            if (ns, meta["name"]) in names:
                n = 2
                while (ns, "%s-%d" % (orig, n)) in names:
                    n += 1
                meta["name"] = "%s-%d" % (orig, n)
            names.add((ns, meta["name"]))
            swaps = []
            if meta["name"] != orig:
                swaps.append("metadata.name %s -> %s (another corpus spec is %s)" % (orig, meta["name"], orig))
            swap(pod, swaps, production)
            base = repo.split("/")[1]
            file = slug("%s-%s-%s" % (base, os.path.splitext(os.path.basename(path))[0], meta["name"]))
            header = [
                "source: https://github.com/%s/blob/%s/%s" % (repo, commit, path),
                "repo: %s  path: %s  commit: %s" % (repo, path, commit),
                "licence: %s" % LICENCE.get(repo, "Apache-2.0"),
                "converted: %s %s -> Pod (the pod template, every field kept)" % (kind, orig) if kind != "Pod" else "converted: a Pod as published",
            ]
            if kind == "StatefulSet":
                header.append("converted: volumeClaimTemplates -> persistentVolumeClaim volumes <template>-<set>-0, as the StatefulSet controller adds them")
            if production:
                header.append("production: %s" % production)
            # A header is one line a swap: scripts are cut at their first
            # line break.
            header += ["swap: " + s for s in swaps]
            write(out, file, header, pod)
            index.append((file, repo, path, commit, kind, production))


def main():
    out = os.path.dirname(os.path.abspath(__file__))
    website = sys.argv[1]
    names, index = set(), []
    for line in open(os.path.join(website, "index.tsv")):
        path, commit = line.rstrip("\n").split("\t")
        with open(os.path.join(website, path)) as f:
            convert("kubernetes/website", commit, "content/en/examples/" + path, f.read(), "", out, names, index)
    for repo, path, production in MIRRORED:
        commit = git(repo, "rev-parse", "HEAD").strip()
        convert(repo, commit, path, git(repo, "show", "HEAD:" + path), production, out, names, index)
    with open(os.path.join(out, "sources.tsv"), "w") as f:
        f.write("spec\trepo\tpath\tcommit\tkind\tproduction\n")
        for row in index:
            f.write("\t".join(row) + "\n")
    print(len(index), "specs")


main()
