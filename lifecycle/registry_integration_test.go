package lifecycle_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lab/registry"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// TestImagesFromARealRegistry runs pods whose images come from a real
// registry (docker-registry with TLS and htpasswd, in crienv's network
// namespace; nothing else is reachable from there), pulled by the real
// containerd through nodeguard's CRI PullImage:
//
//   - the pod's kubernetes.io/dockerconfigjson Secret logs in, and the pull
//     is logged (start, done with size and duration) with the kubelet's
//     Pulling and Pulled events;
//   - with no Secret, or a wrong one, the container waits in ErrImagePull
//     and then ImagePullBackOff, with the registry's 401 in the message;
//   - the node's credentials file logs in for the images its keys match
//     (a registry path here), after the pod's Secrets;
//   - Always pulls again: after a new push of the tag, a new pod runs the
//     new digest;
//   - Never with the image absent is ErrImageNeverPull;
//   - with the registry stopped, an IfNotPresent pod of a pulled image
//     still starts, and an Always pod fails its pull.
func TestImagesFromARealRegistry(t *testing.T) {
	r := newRig(t)
	reg := registry.New(t, r.env)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	host := reg.Host()
	push := func(local, repo string) {
		t.Helper()
		if err := reg.Push(ctx, r.env.Socket(), local, host+"/"+repo); err != nil {
			t.Fatal(err)
		}
	}
	push(r.env.BusyboxImage(), "team/app:1")
	push(r.env.BusyboxImage(), "team/other:1")
	push(r.env.BusyboxImage(), "node-only/app:1")
	push(r.env.BusyboxImage(), "team/moving:1")

	login := func(user, password string) string {
		return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	}
	writeSecret := func(name, key, content string) {
		dir := filepath.Join(r.sources, "secrets", "default", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, key), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The good Secret's key is the registry host (every path); the wrong
	// one has a wrong password; the node's file knows only node-only/.
	writeSecret("regcred", ".dockerconfigjson", fmt.Sprintf(`{"auths":{"https://%s":{"auth":%q}}}`, host, login(reg.Username(), reg.Password())))
	writeSecret("wrongcred", ".dockercfg", fmt.Sprintf(`{%q:{"username":%q,"password":"wrong"}}`, host, reg.Username()))
	nodeFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(nodeFile, []byte(fmt.Sprintf(`{"auths":{"%s/node-only":{"auth":%q}}}`, host, login(reg.Username(), reg.Password()))), 0o600); err != nil {
		t.Fatal(err)
	}

	client, err := cri.Dial(ctx, r.env.Endpoint(), 10*time.Second, cri.WithImagePull())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	var logs syncbuf.Buffer
	r.logs = &logs
	r.runtime = func(lifecycle.Runtime) lifecycle.Runtime { return client }
	r.podOptions = podspec.Options{ImagePull: true}
	r.imageCredentialsFile = nodeFile
	r.backoffInitial, r.backoffMax = 2*time.Second, 4*time.Second
	m, _ := r.manager(t)

	apply := func(yaml string) {
		t.Helper()
		yaml = strings.ReplaceAll(yaml, "REGISTRY", host)
		if _, err := m.Apply(ctx, r.pods(t, yaml), lifecycle.SourceAPI); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(reason, inMessage string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			if len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w != nil && w.Reason == reason && strings.Contains(w.Message, inMessage)
		}
	}
	imageID := func(ref string) string {
		t.Helper()
		img, err := client.ImageStatus(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return img.GetId()
	}

	apply(`
apiVersion: v1
kind: Pod
metadata: {name: with-secret}
spec:
  terminationGracePeriodSeconds: 1
  imagePullSecrets: [{name: absent}, {name: regcred}]
  containers: [{name: app, image: REGISTRY/team/app:1, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: no-secret}
spec:
  containers: [{name: app, image: REGISTRY/team/other:1, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: wrong-secret}
spec:
  imagePullSecrets: [{name: wrongcred}]
  containers: [{name: app, image: REGISTRY/team/other:1, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: node-creds}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: REGISTRY/node-only/app:1, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: never-absent}
spec:
  containers: [{name: app, image: REGISTRY/team/absent:1, imagePullPolicy: Never, command: [sleep, "3600"]}]
`)
	t.Run("the pod's Secret logs in", func(t *testing.T) {
		waitPod(t, m, "with-secret", "ran", running)
		for _, want := range []string{
			`msg="pulling image" pod=default/with-secret container=app image=` + host + `/team/app:1`,
			`msg="pulled image" pod=default/with-secret container=app image=` + host + `/team/app:1`,
			`reason=Pulling message="Pulling image \"` + host + `/team/app:1\""`,
			`reason=Pulled message="Successfully pulled image \"` + host + `/team/app:1\" in `,
			`msg="image pull secret skipped" pod=default/with-secret secret=absent`,
			`reason=FailedToRetrieveImagePullSecret message="Unable to retrieve some image pull secrets (absent); attempting to pull the image may not succeed."`,
		} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log lacks %q", want)
			}
		}
	})
	t.Run("without credentials the pull fails with the registry's 401, then backs off", func(t *testing.T) {
		waitPod(t, m, "no-secret", "waited in ErrImagePull", waiting(lifecycle.ReasonErrImagePull, "401 Unauthorized"))
		p := waitPod(t, m, "no-secret", "waited in ImagePullBackOff", waiting(lifecycle.ReasonImagePullBackOff, "401 Unauthorized"))
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
		if !strings.Contains(logs.String(), `reason=Failed message="Failed to pull image \"`+host+`/team/other:1\"`) {
			t.Error("the log lacks the Failed event")
		}
	})
	t.Run("a wrong Secret fails with the registry's 401 and names the Secret", func(t *testing.T) {
		waitPod(t, m, "wrong-secret", "waited in ErrImagePull", waiting(lifecycle.ReasonErrImagePull, "from secret default/wrongcred"))
		waitPod(t, m, "wrong-secret", "waited in ImagePullBackOff", waiting(lifecycle.ReasonImagePullBackOff, "401 Unauthorized"))
	})
	t.Run("the node's credentials file logs in where its key matches", func(t *testing.T) {
		waitPod(t, m, "node-creds", "ran", running)
	})
	t.Run("Never with the image absent is ErrImageNeverPull", func(t *testing.T) {
		waitPod(t, m, "never-absent", "waited in ErrImageNeverPull", waiting(lifecycle.ReasonErrImageNeverPull, "is not present with pull policy of Never"))
	})
	t.Run("Always pulls the tag again after a new push", func(t *testing.T) {
		busybox, pause := imageID(r.env.BusyboxImage()), imageID(r.env.PauseImage())
		moving := host + "/team/moving:1"
		apply(`
apiVersion: v1
kind: Pod
metadata: {name: always-first}
spec:
  terminationGracePeriodSeconds: 1
  imagePullSecrets: [{name: regcred}]
  containers: [{name: app, image: REGISTRY/team/moving:1, imagePullPolicy: Always, command: [sleep, "3600"]}]
`)
		waitPod(t, m, "always-first", "ran", running)
		if got := imageID(moving); got != busybox {
			t.Fatalf("%s is %s after the first pull, want busybox's %s", moving, got, busybox)
		}
		push(r.env.PauseImage(), "team/moving:1") // the same tag, another digest
		apply(`
apiVersion: v1
kind: Pod
metadata: {name: always-second}
spec:
  terminationGracePeriodSeconds: 1
  imagePullSecrets: [{name: regcred}]
  containers: [{name: app, image: REGISTRY/team/moving:1, imagePullPolicy: Always}]
`)
		waitPod(t, m, "always-second", "ran", running)
		if got := imageID(moving); got != pause {
			t.Errorf("%s is %s after the pull of the new push, want pause's %s", moving, got, pause)
		}
	})
	t.Run("with the registry stopped a present image still runs", func(t *testing.T) {
		before := strings.Count(logs.String(), "already present on machine")
		if err := reg.Stop(); err != nil {
			t.Fatal(err)
		}
		apply(`
apiVersion: v1
kind: Pod
metadata: {name: present-after-stop}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: app, image: REGISTRY/team/app:1, imagePullPolicy: IfNotPresent, command: [sleep, "3600"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: always-after-stop}
spec:
  imagePullSecrets: [{name: regcred}]
  containers: [{name: app, image: REGISTRY/team/app:1, imagePullPolicy: Always, command: [sleep, "3600"]}]
`)
		waitPod(t, m, "present-after-stop", "ran", running)
		if !strings.Contains(logs.String(), `reason=Pulled message="Container image \"`+host+`/team/app:1\" already present on machine"`) ||
			strings.Count(logs.String(), "already present on machine") <= before {
			t.Error("the log lacks the Pulled event of an image already present")
		}
		waitPod(t, m, "always-after-stop", "waited in ErrImagePull", waiting(lifecycle.ReasonErrImagePull, "connection refused"))
	})
}
