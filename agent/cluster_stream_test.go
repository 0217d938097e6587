//go:build clusterlane

package agent

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lab/cluster"
)

// freeTCPPort is a loopback port nothing listens on.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	_, p, err := net.SplitHostPort(freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// nodeEndpointChecks runs kubectl logs (tail, timestamps, limit, since,
// follow), exec (output, stdin, the exit code, a terminal) and
// port-forward against a pod on the node, through the API server to
// nodeguard's HTTPS endpoint on 127.0.0.1:port, and checks who else may
// call that endpoint: nobody without a client certificate of the
// cluster's CA, and not the node itself (nodes/proxy is not a node's).
func nodeEndpointChecks(t *testing.T, ctx context.Context, cp *cluster.ControlPlane, kubectl func(...string) string, dir, node string, port int, nodeCert, nodeKey string) {
	manifest := filepath.Join(dir, "chatty.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Pod
metadata: {name: chatty, namespace: default}
spec:
  nodeName: `+node+`
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: registry.local/nodeguard/busybox:1.35
    imagePullPolicy: Never
    command: [sh, -c, "mkdir -p /www && echo served-through-kubectl > /www/index.html && httpd -p 8080 -h /www && i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	waitUntil(t, ctx, 60*time.Second, "pod chatty Running with 10 log lines", func() error {
		if ph := kubectl("get", "pod", "chatty", "-o", "jsonpath={.status.phase}"); ph != "Running" {
			return fmt.Errorf("phase %q", ph)
		}
		out, err := cp.Kubectl(ctx, "logs", "chatty")
		if err != nil {
			return err
		}
		if n := strings.Count(string(out), "\n"); n < 10 {
			return fmt.Errorf("%d lines", n)
		}
		return nil
	})
	lineRe := regexp.MustCompile(`^line \d+$`)
	// The kubelet's events of a container start, from the node.
	waitUntil(t, ctx, 30*time.Second, "Pulled, Created and Started events on chatty", func() error {
		out, err := cp.Kubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=chatty", "-o",
			`jsonpath={range .items[*]}{.reason}/{.source.component}/{.involvedObject.fieldPath}{"\n"}{end}`)
		if err != nil {
			return err
		}
		for _, want := range []string{"Pulled/kubelet/spec.containers{c}", "Created/kubelet/spec.containers{c}", "Started/kubelet/spec.containers{c}"} {
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("no %s in %q", want, out)
			}
		}
		return nil
	})

	// logs: --tail, --timestamps, --limit-bytes, --since.
	tail3 := strings.Split(kubectl("logs", "chatty", "--tail=3"), "\n")
	if len(tail3) != 3 || !lineRe.MatchString(tail3[0]) || !lineRe.MatchString(tail3[2]) {
		t.Errorf("kubectl logs --tail=3: %q", tail3)
	}
	if ts := kubectl("logs", "chatty", "--tail=1", "--timestamps"); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d) line \d+$`).MatchString(ts) {
		t.Errorf("kubectl logs --timestamps --tail=1: %q", ts)
	}
	if lim, err := cp.Kubectl(ctx, "logs", "chatty", "--limit-bytes=7"); err != nil || string(lim) != "line 0\n" {
		t.Errorf("kubectl logs --limit-bytes=7: %q, %v", lim, err)
	}
	if since := strings.Split(kubectl("logs", "chatty", "--since=1s"), "\n"); len(since) == 0 || len(since) > 8 || !lineRe.MatchString(since[0]) {
		t.Errorf("kubectl logs --since=1s: %d lines %q (5 a second are written)", len(since), since)
	}

	// logs -f: new lines as they are written, until kubectl is ended.
	{
		cmd := cp.KubectlCommand(ctx, "logs", "-f", "chatty", "--tail=1")
		out := &syncbuf.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		_ = cmd.Process.Kill() // our child, by its pid
		_ = cmd.Wait()
		lines := strings.Fields(strings.ReplaceAll(out.String(), "line ", "line_"))
		t.Logf("kubectl logs -f: %d lines in 2 s", len(lines))
		if len(lines) < 5 {
			t.Errorf("kubectl logs -f: %d lines in 2 s, want at least 5 (5 a second): %q", len(lines), out.String())
		}
	}

	// exec: output, stdin, the command's exit code.
	if got := kubectl("exec", "chatty", "--", "cat", "/www/index.html"); got != "served-through-kubectl" {
		t.Errorf("kubectl exec cat: %q", got)
	}
	{
		cmd := cp.KubectlCommand(ctx, "exec", "-i", "chatty", "--", "sh", "-c", "read x; echo got:$x")
		cmd.Stdin = strings.NewReader("hello\n")
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "got:hello" {
			t.Errorf("kubectl exec -i: %q, %v", out, err)
		}
	}
	{
		err := cp.KubectlCommand(ctx, "exec", "chatty", "--", "sh", "-c", "exit 3").Run()
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 3 {
			t.Errorf("kubectl exec of exit 3 ended with %v, want exit status 3", err)
		}
	}

	// exec -it: a terminal in the container, its size, the exit code.
	{
		master, slave := openPTY(t)
		setSize(t, master, 30, 100)
		cmd := cp.KubectlCommand(ctx, "exec", "-it", "chatty", "--", "sh")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		out := &syncbuf.Buffer{}
		go io.Copy(out, master)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		waitFor(t, out, regexp.MustCompile(`/ # `), "the shell's prompt through kubectl exec -it")
		io.WriteString(master, "tty; stty size\r")
		waitFor(t, out, regexp.MustCompile(`/dev/pts/\d+\r\n30 100\r\n`), "a pts and the terminal's size 30 100")
		io.WriteString(master, "exit 4\r")
		select {
		case err := <-done:
			if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 4 {
				t.Errorf("exit 4 in kubectl exec -it: kubectl ended with %v; output %q", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("kubectl exec -it did not end after exit; output %q", out.String())
		}
	}

	// port-forward: a local port to the pod's 8080, fetched over it.
	{
		cmd := cp.KubectlCommand(ctx, "port-forward", "pod/chatty", ":8080")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := &syncbuf.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		local := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			re := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`)
			for sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					local <- m[1]
				}
			}
		}()
		var addr string
		select {
		case addr = <-local:
		case <-time.After(30 * time.Second):
			t.Fatalf("kubectl port-forward said nothing in 30 s; stderr %q", stderr.String())
		}
		hc := &http.Client{Timeout: 10 * time.Second}
		for i := range 2 { // two connections through one forward
			resp, err := hc.Get("http://" + addr + "/")
			if err != nil {
				t.Fatalf("GET through kubectl port-forward (%d): %v; stderr %q", i, err, stderr.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.TrimSpace(string(body)) != "served-through-kubectl" {
				t.Errorf("GET through kubectl port-forward (%d): %d %q", i, resp.StatusCode, body)
			}
		}
	}

	// The endpoint itself: a caller without a client certificate is 401;
	// the node's own certificate is 403 (nodes/proxy is not a node's
	// right); a system:masters one reads /healthz. (The API server's
	// nodes/proxy refuses loopback nodes, so the test calls directly.)
	adminCert, adminKey, err := cp.IssueClientCert("x509-admin", "x509-admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	ca := x509.NewCertPool()
	pem, err := os.ReadFile(cp.CACert)
	if err != nil {
		t.Fatal(err)
	}
	ca.AppendCertsFromPEM(pem)
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	for _, c := range []struct {
		who, cert, key, path string
		want                 int
		body                 string
	}{
		{"no client certificate", "", "", "/containerLogs/default/chatty/c", http.StatusUnauthorized, ""},
		{"the node's own certificate", nodeCert, nodeKey, "/containerLogs/default/chatty/c", http.StatusForbidden, ""},
		{"a system:masters certificate", adminCert, adminKey, "/healthz", http.StatusOK, "ok"},
		{"a system:masters certificate", adminCert, adminKey, "/containerLogs/default/chatty/c?limitBytes=7", http.StatusOK, "line 0\n"},
	} {
		tc := &tls.Config{RootCAs: ca}
		if c.cert != "" {
			kp, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{kp}
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := hc.Get(base + c.path)
		if err != nil {
			t.Errorf("%s: GET %s: %v", c.who, c.path, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || (c.body != "" && string(body) != c.body) {
			t.Errorf("%s: GET %s: %d %q, want %d %q", c.who, c.path, resp.StatusCode, body, c.want, c.body)
		} else {
			t.Logf("%s: GET %s: %d %s", c.who, c.path, resp.StatusCode, strings.TrimSpace(string(body)))
		}
	}
	kubectl("delete", "pod", "chatty", "--wait=false")
}

// readinessGateCheck runs a pod with a readiness gate: Running, its
// containers ready, but not Ready (ReadinessGatesNotReady) until a
// controller, here the test, sets the gate's condition True in the API.
func readinessGateCheck(t *testing.T, ctx context.Context, kubectl func(...string) string, jp func(...string) (string, error), dir, node string) {
	manifest := filepath.Join(dir, "gated.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: default}
spec:
  nodeName: `+node+`
  terminationGracePeriodSeconds: 1
  readinessGates: [{conditionType: example.com/load-balancer}]
  containers:
  - name: c
    image: registry.local/nodeguard/busybox:1.35
    imagePullPolicy: Never
    command: [sleep, "3600"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	waitJSONPath(t, ctx, 60*time.Second, "gated Running, containers ready, held not Ready by its gate", "Running/True/False/ReadinessGatesNotReady", jp,
		"get", "pod", "gated", "-o", `jsonpath={.status.phase}/{.status.conditions[?(@.type=="ContainersReady")].status}/{.status.conditions[?(@.type=="Ready")].status}/{.status.conditions[?(@.type=="Ready")].reason}`)
	set := time.Now()
	kubectl("patch", "pod", "gated", "--subresource=status", "--type=strategic", "-p",
		`{"status":{"conditions":[{"type":"example.com/load-balancer","status":"True"}]}}`)
	waitJSONPath(t, ctx, 30*time.Second, "gated Ready once its gate is True", "True", jp,
		"get", "pod", "gated", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	t.Logf("readiness gate: Ready %.1f s after its condition was set True", time.Since(set).Seconds())
	kubectl("delete", "pod", "gated", "--wait=false")
}
