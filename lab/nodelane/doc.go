// Package nodelane holds the node lane's checks: nodeguard installed with
// `make install` and run as the systemd service it is on a production node
// (systemd as PID 1, pure cgroup v2, containerd as its own service with
// SystemdCgroup = true: Debian's 1.6.20, or containerd 2.x with
// NODEGUARD_NODE_CONTAINERD, see "Two containerds" below), inside a qemu VM
// that boots a real Debian 12 root filesystem. It is the node lane of
// `make test` (after the VM lane), which runs it on both containerds:
// Debian's with the quick race, then containerd 2.4.2 without it;
// package lab/nodevm builds and boots the VM, and its command
// cmd/nodevm is the lane's driver and go test's runner.
//
// The checks are tests behind the build tag "nodelane" (TestNode and its
// subtests, in node_test.go), so the host lane's `go test ./...` never
// compiles them; `make lint` vets them with the tag. They skip outside the
// lane's guest (NODEGUARD_NODE_LANE=1, hostname nodelane, systemd as PID
// 1): they start and kill services and write /etc. The readers they use
// (nodeconfig.go, parse.go) are plain functions, tested by the host lane
// against files taken from the guest.
//
// # How it works
//
// `make test-node` builds bin/nodevm, runs `make install DESTDIR=<a
// temporary stage>`, and runs `nodevm -lane` with the stage in
// NODEGUARD_NODE_STAGE. The driver:
//
//  1. Prepares, printing progress, the kernel, the root filesystem with its
//     initrd, crictl and the test images, each built once and cached (see
//     Cache below).
//
//  2. Runs `CGO_ENABLED=0 go test -tags nodelane -json -count=1 -timeout
//     22m -exec <abs>/bin/nodevm ./lab/nodelane` (12m, plus the race
//     mode's allowance: 10m quick, 35m full, none off). go test builds the
//     static test binary and starts `nodevm <binary> <flags>`, which puts
//     on a payload disk (an ext4 image made per run with mkfs.ext4 -d in
//     a temporary directory): the test binary and a script with its
//     environment and flags, the package's testdata/, the make install
//     stage, the three image archives and crictl (and, for containerd
//     2.x, its binaries, config and installer); and makes an empty
//     output disk (64 MiB, sparse, ext4 without a journal, label
//     nodelane-out). It then boots
//
//     timeout -k 5 1440 qemu-system-x86_64 -M microvm,... -accel tcg,thread=single
//     -m 2G -smp 2 -nic none -kernel vmlinux -initrd initrd.cpio
//     -drive file=rootfs.img,snapshot=on (vda) -drive file=payload.img,readonly=on (vdb)
//     -drive file=out.img (vdc)
//
//     with the kernel command line `root=/dev/vda
//     systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all
//     systemd.unit=nodelane.target` plus the VM lane's (console=ttyS0, the
//     microvm TSC settings, panic=-1). snapshot=on sends the guest's writes
//     to a temporary file, so the cached image stays clean; the guest has
//     no network device at all: the pods' CNI bridge lives inside it.
//
//  3. In the guest, a busybox initrd insmods virtio_mmio, virtio_blk,
//     crc32c_generic, crc16, mbcache, jbd2 and ext4 (ordered by the
//     image's modules.dep), mounts /dev/vda and switch_roots to
//     /lib/systemd/systemd. nodelane.target pulls in multi-user.target and
//     nodelane.service, which runs once the node is up: it mounts the
//     payload (LABEL=nodelane-payload) read-only and the output disk
//     (LABEL=nodelane-out) read-write at /run/nodelane/out, exported to
//     the tests as NODEGUARD_NODE_OUT_DIR; copies the stage into / (that
//     is "installed with make install"), installs crictl, runs systemctl
//     daemon-reload, installs the payload's containerd when it has one
//     (see "Two containerds"), imports the images with `ctr -n k8s.io
//     images import`, runs the test binary as root with its output on ttyS1,
//     unmounts the output disk, prints
//     "NODEGUARD-VM-EXIT-<nonce>=<status>" there and reboots (-no-reboot
//     makes that qemu's exit). ttyS0, the console, goes to a
//     file: its "nodelane:" lines and systemd's status lines about
//     multi-user.target and containerd are printed as progress while the
//     guest runs, the lines reporting a kernel bug after it, and its tail
//     when the guest ends without the marker. A kernel that panics while
//     booting is booted again, twice at most.
//
//  4. Once qemu has exited (checks passed or not, guest finished or
//     killed), copies the output disk's files to NODEGUARD_NODE_OUT
//     (make test-node: out/node, git-ignored) and prints where: debugfs
//     `rdump /` of the image file into a fresh directory, then only
//     directories and regular files beneath the target through os.Root
//     (the guest's symbolic links and devices are left out and reported);
//     nothing is mounted on the host. Files of the same name are
//     replaced, others kept, so each race mode keeps its own race-<mode>/.
//
//  5. Prints the checks' output as it arrives (a go test "--- PASS/FAIL"
//     line per check and the lines they log), then one summary line:
//
//     node <uname -r>, containerd <version>: checks N, passed P, failed F, skipped S; FAILED: ...
//
//     (the header line before the checks names the containerd too:
//     "debian 1.6.20~ds1-1+deb12u3 (the root filesystem's)", read from the
//     image's dpkg status with debugfs, or "v2.4.2 (cached, on the
//     payload)"), so that the two runs are told apart
//
//     and exits non-zero when a check or the package failed.
//
// # Cache
//
// In /var/cache/nodeguard-vm (NODEGUARD_VM_CACHE), each piece under its
// own flock, so that concurrent runs build it once:
//
//   - the kernel: Debian's 6.12 (linux-image-6.12-amd64), as the VM lane
//     resolves and caches it (lab/vmtest), with the VM lane's host
//     tools (qemu, busybox-static, xz, zstd), plus mmdebstrap, e2fsprogs and
//     coreutils through apt-get;
//   - node/rootfs-<key>.img and node/initrd-<key>.cpio: `mmdebstrap
//     --mode=root --variant=essential --include=systemd,systemd-sysv,udev,
//     dbus,kmod,containerd,runc,iproute2,containernetworking-plugins,
//     util-linux,mount,procps,iptables,nfs-common,nfs-kernel-server,
//     apparmor,e2fsprogs bookworm DIR
//     /etc/apt/sources.list.d/debian.sources` (the host's deb822 sources
//     file is the MIRROR, so no archive host is named anywhere; docs, man
//     pages and locales are left out); the kernel's modules for file
//     systems, networking, crypto and the virtio, block and char drivers,
//     extracted from the kernel package with dpkg-deb and depmod'ed in the
//     chroot; the baked-in files of nodevm's files.go: containerd's
//     config.toml (runc SystemdCgroup = true, sandbox_image the local
//     pause image, CNI bin_dir /usr/lib/cni and conf_dir /etc/cni/net.d,
//     no registry), a fixed machine-id, a volatile journal, masks of the
//     units that only cost time (systemd-logind, serial-getty@ttyS0,
//     systemd-journal-flush and the rest of nodevm.Masked, each with
//     why), the lane's unit and target; then `mkfs.ext4 -d`. The key
//     hashes everything that goes in: the package list, mmdebstrap's
//     arguments and version, the sources file, the kernel's package,
//     version and release, the module selection, every baked-in file, the
//     initrd's script, modules and busybox. A change rebuilds; the three
//     most recently used images are kept;
//   - crictl/v1.37.0/crictl: a static crictl
//     (sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0, the demo's), built with
//     CGO_ENABLED=0 go install into the cache, never into the clone;
//   - containerd/v2.4.2-<recipe hash>/{containerd,containerd-shim-runc-v2,
//     ctr}, only when a run asks for containerd 2.x: `CGO_ENABLED=0
//     GOTOOLCHAIN=local go install -tags no_btrfs -ldflags "-s -w -X
//     .../version.Version=v2.4.2" github.com/containerd/containerd/v2/cmd/
//     {containerd,containerd-shim-runc-v2,ctr}@v2.4.2` outside any module
//     (no replace directives: the module proxy's release as it is), into
//     a temporary directory under containerd/lock, checked static and
//     published by renaming the directory; the hash covers the module,
//     version, commands, tags and linker flags. Modules and build
//     artefacts go to the go command's own caches;
//   - the pause, busybox and hog images of lab/images, in their own
//     cache (/var/cache/nodeguard-images).
//
// # The checks
//
// In order, each on the node the previous ones left (a check that needs
// what an earlier one failed to make fails at once, saying so); every wait
// is bounded (the constants of node_test.go, each with why):
//
//   - systemd reached multi-user.target;
//   - containerd.service is active and is the run's containerd (`crictl
//     version`'s RuntimeVersion: the root filesystem's package version
//     as dpkg-query says it, or v2.4.2; the unit's main process
//     /usr/bin/containerd or /usr/local/bin/containerd); `crictl
//     runtime-config` (CRI RuntimeConfig) reports the systemd cgroup
//     driver, or answers Unimplemented (containerd 1.6), which fails the
//     check on containerd 2.x; `crictl info` shows the runc runtime's
//     options.SystemdCgroup = true; the sandbox image is the local pause
//     image (1.6: `crictl info`'s config.sandboxImage; 2.x, whose info does
//     not show it: the one image `crictl images` marks pinned); and the
//     three images are imported. What RuntimeConfig reported decides how
//     the driver checks below go; crictl info and images are kept on the
//     output disk (containerd-debian/ or containerd-v2.4.2/);
//   - `systemctl start nodeguard` returns with the unit active (Type=notify:
//     only READY=1 from the main process does that) within 60 s, with a
//     STATUS= text. Before it, the node's configuration is written: the
//     INSTALLED /etc/nodeguard/config.yaml (the shipped example) with only
//     the node's values changed (NodeConfig): runtimeEndpoint
//     unix:///run/containerd/containerd.sock, cgroupDriver systemd,
//     cgroupRoot /, podManifestPath /etc/nodeguard/manifests (with a static
//     pod in it), and systemReserved memory such that node allocatable is
//     640 MiB. The journal then has the agent's line of what it read of
//     the runtime's driver at start: "cgroup driver matches the runtime's"
//     with cgroup_driver=systemd where RuntimeConfig reported it, "the
//     runtime does not report its cgroup driver" where it did not;
//   - `journalctl -u nodeguard -o json`: every line of nodeguard's has a
//     PRIORITY, "nodeguard running" is 6 (info), and the warning a reload
//     with a restart-only change (eviction.tick) provokes is 4; no syslog
//     prefix is left in a message;
//   - `systemctl reload nodeguard` with evictionHard memory.available
//     changed to 150Mi: the journal says the thresholds were reloaded with
//     it, and the main pid is the same;
//   - `systemctl daemon-reload`, which re-applies kubepods.slice's own
//     MemoryHigh= (infinity): the tripwire's memory.high on it is set
//     again within 5 s (measured: reset to max, armed again 548 ms later);
//   - the manifest directory's pod (BestEffort) and one applied with
//     `nodeguard pod apply -f` (Burstable) are Running in `nodeguard pod
//     ls -o json`;
//   - each of their containers' processes is in
//     /kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid_>.slice/
//     cri-containerd-<id>.scope (/proc/<pid>/cgroup), a scope unit that
//     systemd runs in that slice;
//   - `crictl pods/ps` show one ready sandbox per pod and their containers
//     with io.kubernetes.pod.name/namespace/uid and
//     io.kubernetes.container.name;
//   - SIGSTOP of the main pid: the watchdog (WatchdogSec=30 of the shipped
//     unit) kills it ("Watchdog timeout" in the journal) and systemd starts
//     a new one, after at least 20 s (the last ping may have come up to 7.5 s before the SIGSTOP) and within 100 s;
//   - kill -9 of the main pid: systemd starts a new agent, which adopts
//     every pod: the same pods Running, the same sandbox and container ids
//     10 s later, no other sandbox, the pod slices' memory.max and
//     MemoryMax and kubepods.slice's memory.max and memory.high unchanged;
//   - a runaway pod (the hog image growing 48 MiB/s to 1 GiB) is evicted
//     (phase Failed, reason Evicted) with no oom_kill in kubepods.slice's
//     memory.events and no OOM kill in the kernel log, and the other pods
//     keep their sandboxes, containers and restart counts;
//   - after every pod is deleted (pod rm, the static pod's file removed):
//     no pod slice, no cri-containerd scope, no cgroup named after a pod,
//     no mount beneath <rootDir>/pods, no veth, no IP lease under
//     nodeguard's IPAM directory (<rootDir>/cni/networks), and nothing in
//     containerd, each a subtest;
//   - node mode (cluster_test.go), only in make test-cluster's run of the
//     lane (NODEGUARD_NODE_CLUSTER; elsewhere it skips saying so): the
//     runner starts a control plane on the host's loopback for the guest
//     and gives the guest qemu's user network with restrict=on, through
//     which the guest reaches only the API server (10.0.2.100:443,
//     relayed to the host's loopback) and the API server reaches only
//     the node endpoint (the host's 127.0.0.1:<port> forwarded to the
//     guest's); the payload's cluster/ has the node's and an admin's
//     kubeconfig, the CA, the endpoint's serving certificate and kubectl.
//     nodeguard is restarted with kubeconfig, nodeName nodelane, nodeIP
//     127.0.0.1 and the endpoint's keys; its Node goes Ready with
//     containerd's version and the endpoint's port; a Deployment of two
//     Burstable replicas is bound to it by the scheduler and Running, each
//     pod in its slice beneath kubepods.slice with cri-containerd scopes;
//     kubectl logs and exec reach them through the API server; the hog,
//     applied through the API, ends Failed/Evicted with the kubelet's
//     message, DisruptionTarget TerminationByKubelet and an Evicted event,
//     with no OOM kill in kubepods.slice or the kernel log; every pod
//     goes; nodeguard stopped, the Node goes NotReady
//     (node-monitor-grace-period 40 s). nodeguard is restarted standalone
//     after;
//   - the real kubelet (kubelet_test.go), in the same run as node mode
//     only: the payload's cluster/ also has the control plane's kubelet
//     (v1.37.2, scripts/controlplane.sh). withKubelet, which the later
//     checks beside the kubelet use too, takes the node from nodeguard
//     (its pods deleted, its manifests moved aside, the unit stopped, any
//     sandbox and kubepods.slice left removed: the two never own the node
//     at once), makes sure containerd's runc has SystemdCgroup = true,
//     deletes the Node and Lease node mode left (the node's name is fixed
//     by its certificates; a fresh registration inherits nothing of
//     nodeguard's), and runs the kubelet as the transient unit
//     kubelet.service: cgroupDriver systemd, cgroupRoot /, containerd's
//     socket, the kubelet's default evictionHard written out
//     (memory.available 100Mi, nodefs 10%/5%, imagefs 15%/5%), an empty
//     staticPodPath, registerNode, the node's kubeconfig, the endpoint's
//     serving certificate on the forwarded port, x509 and webhook
//     authentication without anonymous access and Webhook authorization
//     (AlwaysAllow would give exec in every pod to whoever reaches the
//     port). The kubelet refuses a loopback --node-ip and any other
//     address would be dialled from the host, so it runs with
//     --cloud-provider=external and the check plays the cloud
//     controller: InternalIP 127.0.0.1 and the uninitialized taint
//     removed. The Node goes Ready; a Guaranteed, a Burstable and a
//     BestEffort pod (testdata/kubelet-qos.yaml, imagePullPolicy Never)
//     applied with kubectl run, each in the kubelet's slice for its class
//     (kubepods-pod<uid_>.slice, kubepods-burstable.slice/...,
//     kubepods-besteffort.slice/...) with the pod-level memory.max it
//     sets (32Mi, 64Mi, max) and its container in a cri-containerd scope;
//     each sandbox has the kubelet's labels, kubernetes.io/config.source
//     api and not nodeguard.io/managed; the kubelet's /configz answers the
//     admin with the configuration above, refuses system:node:nodelane
//     (403, the API server's SubjectAccessReview) and anonymous requests
//     (401); kubectl logs comes through the API server. After: the pods
//     are deleted through the API, the kubelet stops, the NOTREADY
//     sandboxes and the kubepods, burstable and besteffort slices it
//     leaves (it removes the pod slices itself) are removed with its
//     directories, the Node and the Lease; nodeguard starts again as it
//     was;
//   - the three-way OOM race (kuberace_test.go), on the same run, in the
//     race mode (EnvRace: make bench-kube-race, full for docs/benchmarks.md, or
//     make test-cluster-node CLUSTER_NODE_RACE=quick; off in make test):
//     withKubelet's kubelet restarted
//     with systemReserved = MemTotal - 256Mi and its default evictionHard
//     memory.available 100Mi (kubepods.slice memory.max 256Mi, allocatable
//     156Mi, both checked), then `nodeguard bench eviction --kubeconfig`:
//     the kubelet alone, the kubelet with nodeguard guard started beside
//     it, then nodeguard in node mode from the node-mode check's
//     configuration (the kubelet stopped), the hog a Deployment whose
//     replacement is waited for; report, CSV, plot and logs to
//     kube-race-<mode>/ on the output disk. A nodeguard trial lost to the
//     kernel OOM killer or with a collateral eviction fails it;
//   - nfs volumes (nfs_test.go): the check loads nfsd and nfs, makes a
//     network namespace (ngnfs) linked to the guest's own by a veth pair
//     (10.251.0.1/29 on the node, .2 in the namespace: the guest has no
//     network device, nothing leaves it), and runs the kernel's NFSv4
//     server there (the namespace's own nfsd file system, lease and grace
//     10 s, exportfs of /srv/nfs-lane, rpc.mountd -N 2 -N 3, rpc.nfsd -N 3
//     --no-udp: no rpcbind or statd, their units are masked). A pod with
//     a writable and a readOnly nfs volume of it runs; the volume is an
//     nfs mount at <rootDir>/pods/<uid>/volumes/kubernetes.io~nfs/data
//     from 10.251.0.2:/srv/nfs-lane, the container's file is in the
//     export and its write to the readOnly one failed; deleted, its
//     mounts and directory go. A static pod with an nfs volume runs,
//     nodeguard is killed with -9 and the manifest removed before systemd
//     restarts it: the new agent unmounts the volume and removes the
//     directory. A pod whose server does not answer (10.251.0.3) stays
//     Pending, ContainerCreating, with reason FailedMount naming the
//     server and no sandbox; deleted, its directory goes once no mount(8)
//     runs for it (nodeguard mounts with retry=0: one attempt, seconds,
//     where mount.nfs's default retries for 2 minutes). With -run
//     TestNode/nfs the check starts the agent itself;
//   - supplementalGroupsPolicy Strict (features_test.go), on containerd
//     2.x only, whose CRI Status reports the supplemental_groups_policy
//     feature (1.6 reports none: the check skips saying so, the host
//     lane's TestSupplementalGroupsPolicyIsDecidedByTheRuntime checks the
//     refusal there): a pod with runAsUser 1000, runAsGroup 3000,
//     supplementalGroups [4000] and Strict runs, `crictl exec <id> id`
//     says groups=3000,4000, and its status.containerStatuses[].user.linux
//     is uid 1000, gid 3000, groups 3000 and 4000; it is deleted after. It
//     starts the agent itself under -run;
//   - appArmorProfile (apparmor_test.go), on both containerds: Debian's
//     kernel has AppArmor built in and enabled by default (its CONFIG_LSM
//     list; the command line adds nothing), systemd mounts securityfs,
//     and the image's apparmor package gives containerd the
//     /sbin/apparmor_parser without which it applies no profile at all
//     (its apparmor.hostSupports); its apparmor.service loads the
//     package's two profiles at boot, as on a production node. The check
//     fails, rather than skips, when the kernel does not enforce AppArmor
//     or the parser is missing. It loads nodelane-deny-write
//     (testdata/apparmor: the base abstraction, every file, no write
//     beneath /tmp) with apparmor_parser --replace --skip-cache and runs
//     a pod whose containers name Localhost nodelane-deny-write,
//     RuntimeDefault and Unconfined in their fields, the same Localhost
//     profile through the deprecated annotation
//     container.apparmor.security.beta.kubernetes.io/<name>, and nothing:
//     each container's process runs under the label the kernel reports in
//     /proc/<pid>/attr/apparmor/current (nodelane-deny-write,
//     cri-containerd.apparmor.d, unconfined, nodelane-deny-write,
//     cri-containerd.apparmor.d), in enforce mode, and `crictl exec <id>
//     touch /tmp/...` fails with EACCES and the kernel's apparmor="DENIED"
//     record of nodelane-deny-write in the two confined by it, and
//     succeeds in the others. Then a pod whose pod-level Localhost profile
//     (nodelane-late) is not loaded is admitted, as the kubelet admits
//     it, and waits Pending with its container in CreateContainerError
//     and containerd's "apparmor profile not found nodelane-late", with
//     no container running; once the check loads the profile, the next
//     attempt of the back-off runs it under nodelane-late. The pods are
//     deleted and the profiles removed after. It starts the agent itself
//     under -run;
//   - the pods people write (workloads_test.go, with lifecycle_test.go,
//     block_test.go and stream_test.go), on both containerds: their
//     features go through the runtime (CRI ExecSync for exec hooks and
//     probes, StopContainer in waves, CRI Devices, the streaming server),
//     which differs between 1.6 and 2.x. Five Burstable pods of testdata/
//     in namespace lane, each applied by its subtest and deleted before
//     the next (a TCG guest on a loaded host is slow enough as it is;
//     five sandboxes at once once outran the agent's former 30 s bound on
//     a CRI call, now the kubelet's 4 min for RunPodSandbox: see
//     workloads).
//     gRPC probes: the pod runs /bin/grpchealth, is Running but not Ready
//     while NOT_SERVING, Ready once /tmp/ready exists (`nodeguard pod
//     exec` touches it), restarted once the liveness service is
//     NOT_SERVING (restart count 1, a new container id, not ready until
//     told again), and `nodeguard events --agent --json` has the
//     Unhealthy readiness and liveness events and the Killing one. Hooks:
//     the main process sees the file postStart exec wrote; on pod rm the
//     TERM handlers of app (preStop exec) and web (preStop httpGet, whose
//     CGI notes the request's header) find the hook's file there first,
//     and sleeper's TERM comes at least 2 s after pod rm (preStop sleep 3
//     s). Sidecars: logger (restartPolicy Always, gated by its startup
//     probe) starts before the init container setup and the app; made to
//     exit 3 it is restarted under restartPolicy Never, the app left
//     alone; on pod rm its TERM comes after the app has stopped (which
//     waits 2 s before it writes). The pods write into an emptyDir that
//     the check reads from the node while they terminate: the last TERM
//     handler waits for the check's ack file. Block volumes: two sparse
//     64 MiB files on loop devices, a local PersistentVolume and claim
//     for each in volumes.sourceDir; the Filesystem one is formatted ext4
//     and mounted from its device at
//     <rootDir>/pods/<uid>/volumes/kubernetes.io~local-volume/lane-disk,
//     the pod's /data is ext4 and its file is on the device after the pod
//     is gone (debugfs), the Block one is the pod's /dev/xvda and what the
//     pod wrote there starts the device. Streaming, through the installed
//     CLI: `pod exec -i` pipes stdin through and exits with the command's
//     code, `pod exec -it` on a pseudo-terminal the check opens (45x123)
//     runs on a /dev/pts of that size, `pod port-forward stream 0:8080`
//     serves two GETs from the guest's 127.0.0.1 and ends cleanly on ^C,
//     `pod attach -i` to a stdinOnce container echoes its input and the
//     container ends with exit 0. Each pod's directory goes on deletion,
//     and nothing of the five is left (cgroups, mounts, sandboxes,
//     containers). It starts the agent itself under -run;
//   - where RuntimeConfig reports the driver (containerd 2.x), nodeguard
//     restarted with cgroupDriver unset, as make install ships it: the
//     journal says "cgroup driver: the runtime's" systemd, and an applied
//     pod's containers run in
//     /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope;
//     skipped on 1.6, whose fallback the next check covers;
//   - nodeguard restarted with cgroupDriver: cgroupfs on containerd's
//     systemd driver. Where RuntimeConfig reports the driver (containerd
//     2.x), the start is refused: `systemctl restart nodeguard` fails
//     before READY, the unit is not active (Restart=always tries again
//     every 2 s), the journal has "cgroup driver mismatch: cgroupDriver
//     is cgroupfs but the runtime reports systemd; ... set cgroupDriver:
//     systemd", no sandbox runs; then the agent is started again with the
//     node's values. Where it does not (1.6), cgroupDriver is left unset:
//     the journal warns that the agent takes cgroupfs, it starts, and an
//     applied pod gets no sandbox, its status says "set cgroupDriver:
//     systemd" (runc's refusal of a cgroupfs parent, explained), and no
//     cgroup of it is left once it is deleted;
//   - containerd switched to SystemdCgroup = false (restarted; its CRI
//     reporting it, RuntimeConfig too where it reports), then, where
//     RuntimeConfig reports the driver, the reverse mismatch refused at
//     start the same way (cgroupDriver is systemd but the runtime reports
//     cgroupfs), and nodeguard switched to cgroupfs: the pod runs with its
//     container in
//     /kubepods/burstable/pod<uid>/<id>, its pod cgroup's memory.max is its
//     limit, and the cgroup goes with the pod;
//   - the OOM race (docs/benchmarks.md, "The OOM race inside the node lane"), unless
//     NODEGUARD_NODE_RACE=off: nodeguard.service stopped, containerd back
//     to SystemdCgroup = true (restarted, its CRI reporting it), every
//     sandbox removed, MemAvailable at least twice the budget, then
//     `nodeguard bench eviction --runtime-endpoint
//     unix:///run/containerd/containerd.sock --cgroup-driver systemd
//     --cgroup-root / --budget 256Mi --threshold 10% --rates R --trials N
//     --out /run/nodelane/out/race-<mode> --log-level warn`, with R and N
//     of the mode (nodevm.Race: quick 200Mi/s,1Gi/s and 1
//     trial, full 50Mi/s,200Mi/s,1Gi/s and 3 trials), all four v2
//     strategies (nodeguard, kubelet's 10 s poll, poll1s, psi), bounded by
//     the mode's Bound (SIGTERM, its own cleanup, SIGKILL 4 min later).
//     Each trial's progress line, the race's table and nodeguard's targets
//     and one summary line per strategy (read from eviction.csv by its
//     header's names: caught before the kernel OOM killer, lost to it,
//     missed, collateral, errors) go into the check's log; its report,
//     progress, eviction.csv, eviction.png and the agent's log stay on the
//     output disk. It fails when the race errs, or when one of
//     nodeguard's trials failed, was lost to the kernel OOM killer or
//     evicted a pod other than the hog, or there are fewer than R x N of
//     them. Latencies are printed, never asserted (benchmarks print
//     figures; TCG makes them 10-100x the hardware's anyway).
//
// # Two containerds
//
// NODEGUARD_NODE_CONTAINERD (make test-node NODE_CONTAINERD=) picks the
// guest's containerd: unset or "debian", the root filesystem's 1.6.20,
// whose CRI answers RuntimeConfig with Unimplemented; "v2.4.2" (or "2"),
// containerd 2.4.2 built into the cache (see Cache) and put on the
// payload disk: the lane script runs its installer before the image
// import, which stops Debian's containerd (started by the boot, nothing
// run on it), removes its state (/var/lib/containerd, /run/containerd),
// installs containerd, containerd-shim-runc-v2 and ctr into
// /usr/local/bin (before /usr/bin in every PATH of the guest; the config
// names the shim by path as well), writes the version 3 config of
// nodevm.ContainerdV2Config to /etc/containerd/config.toml (the CRI's
// runtime settings in io.containerd.cri.v1.runtime: runc with SystemdCgroup
// = true on a line of its own, as in the 1.6 config, so the checks switch
// it the same way; CNI bin_dirs /usr/lib/cni; the images plugin with the
// pause image pinned as sandbox; NRI disabled; containerd 2.4 migrates it
// to version 4 at start with a warning) and a containerd.service drop-in
// whose ExecStart is /usr/local/bin/containerd, reloads systemd and starts
// containerd. The cached image is never changed; Debian's runc 1.1.5 runs
// the containers. On that run the race defaults to off
// (NODEGUARD_NODE_RACE=quick or full still runs it): the race measures
// nodeguard's eviction, not the runtime.
//
// # Knobs
//
//	NODEGUARD_NODE_STAGE    the make install DESTDIR (make test-node sets it)
//	NODEGUARD_VM_CACHE      the cache directory, shared with the VM lane
//	NODEGUARD_NODE_TIMEOUT  per guest run, seconds or a duration; default 14m plus the
//	                        race mode's allowance (24m quick, 49m full, 14m off)
//	NODEGUARD_NODE_MEMORY   qemu -m; default 2G
//	NODEGUARD_NODE_CPUS     vCPUs; default 2
//	NODEGUARD_NODE_TCG      single (default) or multi (one host thread per vCPU)
//	NODEGUARD_NODE_CONSOLE  1 copies the whole console to stderr after the run
//	NODEGUARD_NODE_SOURCES  the apt sources file; default the host's debian.sources
//	NODEGUARD_NODE_RACE     the race check: quick (default), full (docs/benchmarks.md's set, for
//	                        its figures) or off; make test-node NODE_RACE=full; off by
//	                        default with containerd 2.x
//	NODEGUARD_NODE_CONTAINERD
//	                        debian (default: the root filesystem's 1.6.20) or v2.4.2 (2):
//	                        containerd 2.x from the cache, on the payload disk; make
//	                        test-node NODE_CONTAINERD=v2.4.2
//	NODEGUARD_NODE_OUT      the host directory the output disk is copied to (absolute, or
//	                        relative to where nodevm -lane runs); make test-node sets
//	                        out/node (NODE_OUT=); unset, the disk is thrown away
//
// `make test-node NODE_FLAGS="-run 'TestNode/systemd' -v"` narrows the
// checks and prints go test's === RUN lines too. Subtest names are the
// sentences of TestNode with spaces as underscores.
//
// # Costs (2-core development machine, measured)
//
//   - Cold (no cache): the kernel package 1.5-2.5 s (shared with the VM
//     lane), installing mmdebstrap ~5 s, the root filesystem 26-51 s
//     (mmdebstrap 21-44 s, modules 4-6 s, mkfs 0.7-0.9 s; 340 MB allocated
//     of a 2 GiB sparse image, a 5 MB initrd), crictl in parallel with it
//     (79 s with empty Go caches, 42 s with the standard library built,
//     4-6 s with a warm build cache). The
//     whole lane ran in 1m50s cold against today's agent, module downloads
//     included.
//   - Every run: the payload disk 0.4-1 s (92 MB: the test binary, the
//     agent, crictl, the images); under single-threaded TCG the node
//     reaches multi-user.target 15-19 s after qemu starts (containerd is
//     the slowest unit, 5-11 s), the payload is set up by ~26-30 s (stage
//     copy 1.5 s, daemon-reload 2 s, imports 4-6 s), and shutdown is
//     immediate (reboot -ff: the disks are throwaway). Multi-threaded TCG
//     starts the checks ~8 s sooner (see nodevm.DefaultTCG for why it is
//     not the default).
//   - The checks, all passing: starting the agent 3-5 s, the journal and
//     reload checks ~3 s, the two pods Running 7 s after the apply, the
//     watchdog check 31 s (WatchdogSec=30 is the shipped unit's), kill -9
//     to every pod adopted 16 s, the runaway pod evicted 18 s after its
//     apply (its ramp, not nodeguard, sets that), deleting every pod and
//     checking for leftovers 13 s, the two driver checks ~20 s, the quick
//     race 3m56s (8 trials) and the full one 15m43s (36). Warm, `make
//     test-node` took 2m16s without the race (the guest 2m13s, the checks
//     1m42s of it); with the quick race 6m33s-6m50s (7m11s in a CI run),
//     with NODE_RACE=full 16m30s.
//   - On containerd 2.4.2 (NODEGUARD_NODE_CONTAINERD=v2.4.2): the first
//     build 3m44s with empty Go caches (the module downloads included;
//     the environment notes measured about 6 min), 6 s with a warm build
//     cache, nothing once cached; in the guest the installer takes 6 s
//     (Debian's containerd stopped, 2.4.2 started), the checks start ~33
//     s after boot; the refusals at start come 0.7 s after systemctl
//     restart. Warm, with the race off: 3m2s (the guest 2m57s, the checks
//     2m22s of it), against 6m33s for Debian's containerd with the quick
//     race; with the quick race on containerd 2.4.2 (NODE_RACE=quick)
//     8m12s, every nodeguard trial caught before the kernel OOM killer.
//   - qemu's RSS is about 1.1 GiB of the guest's 2 GiB.
package nodelane
