package lifecycle

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestManagedHostsFile(t *testing.T) {
	aliases := []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"db", "db.example.com"}}, {IP: "fd00::1", Hostnames: []string{"v6"}}}
	const base = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
	tests := []struct {
		name    string
		ips     []string
		domain  string
		aliases []corev1.HostAlias
		want    string
	}{
		{"a pod gets localhost and its IP under its hostname", []string{"10.88.0.3"}, "", nil, base + "10.88.0.3\tbox\n"},
		{"a pod with a domain gets its FQDN first", []string{"10.88.0.3"}, "web.default.svc.cluster.local", nil,
			base + "10.88.0.3\tbox.web.default.svc.cluster.local\tbox\n"},
		{"hostAliases follow, one line per hostname", []string{"10.88.0.3"}, "", aliases,
			base + "10.88.0.3\tbox\n\n# Entries added by HostAliases.\n10.1.2.3\tdb\n10.1.2.3\tdb.example.com\nfd00::1\tv6\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(managedHostsFile(tt.ips, "box", tt.domain, tt.aliases)); got != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	t.Run("a host-network pod gets the node's file and its hostAliases", func(t *testing.T) {
		got := string(nodeHostsFile([]byte("127.0.0.1 localhost node1\n"), aliases[:1]))
		want := "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost node1\n\n# Entries added by HostAliases.\n10.1.2.3\tdb\n10.1.2.3\tdb.example.com\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
}

func TestPodDomain(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: corev1.PodSpec{Subdomain: "web"}}
	if got := podDomain(p, "cluster.local"); got != "web.ns.svc.cluster.local" {
		t.Errorf("with a cluster domain: %q", got)
	}
	if got := podDomain(p, ""); got != "" {
		t.Errorf("without a cluster domain: %q, want none", got)
	}
	p.Spec.Subdomain = ""
	if got := podDomain(p, "cluster.local"); got != "" {
		t.Errorf("without a subdomain: %q, want none", got)
	}
}

func TestHostsMount(t *testing.T) {
	root := t.TempDir()
	nodeHosts := filepath.Join(root, "node-hosts")
	if err := os.WriteFile(nodeHosts, []byte("127.0.0.1 localhost node1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{RootDir: root, NodeHostsFile: nodeHosts}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"}}
	c := &corev1.Container{Name: "c"}
	t.Run("a pod without an IP keeps the runtime's file", func(t *testing.T) {
		if mnt, err := m.hostsMount(&podState{pod: pod}, c); mnt != nil || err != nil {
			t.Fatalf("hostsMount = %v, %v; want none", mnt, err)
		}
	})
	t.Run("a pod with an IP gets its file mounted at /etc/hosts", func(t *testing.T) {
		mnt, err := m.hostsMount(&podState{pod: pod, ip: "10.0.0.9"}, c)
		if err != nil || mnt == nil || mnt.ContainerPath != "/etc/hosts" || mnt.Readonly {
			t.Fatalf("hostsMount = %v, %v", mnt, err)
		}
		b, err := os.ReadFile(mnt.HostPath)
		if err != nil || !strings.HasSuffix(string(b), "10.0.0.9\tp\n") {
			t.Fatalf("hosts file %q, %v", b, err)
		}
		if fi, err := os.Stat(mnt.HostPath); err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("hosts file mode %v, %v; want 0644 (readable by any container user)", fi.Mode(), err)
		}
	})
	t.Run("a host-network pod gets the node's file", func(t *testing.T) {
		hp := pod.DeepCopy()
		hp.Spec.HostNetwork = true
		mnt, err := m.hostsMount(&podState{pod: hp}, c)
		if err != nil || mnt == nil {
			t.Fatalf("hostsMount = %v, %v", mnt, err)
		}
		if b, _ := os.ReadFile(mnt.HostPath); !strings.Contains(string(b), "node1") {
			t.Fatalf("hosts file %q lacks the node's entries", b)
		}
	})
	t.Run("a container mounting a volume at /etc/hosts keeps it", func(t *testing.T) {
		own := &corev1.Container{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/hosts"}}}
		if mnt, err := m.hostsMount(&podState{pod: pod, ip: "10.0.0.9"}, own); mnt != nil || err != nil {
			t.Fatalf("hostsMount = %v, %v; want none", mnt, err)
		}
	})
}

func TestMatchNodeSelector(t *testing.T) {
	labels := StandaloneNodeLabels("Node1")
	tests := []struct {
		name     string
		selector map[string]string
		wantErr  string
	}{
		{"no selector matches", nil, ""},
		{"the node's hostname (lower case), os and arch match",
			map[string]string{"kubernetes.io/hostname": "node1", "kubernetes.io/os": runtime.GOOS, "kubernetes.io/arch": runtime.GOARCH}, ""},
		{"another value is rejected, naming the label", map[string]string{"kubernetes.io/arch": "s390x-not"},
			`NodeAffinity: Predicate NodeAffinity failed: spec.nodeSelector[kubernetes.io/arch] wants "s390x-not", and the node's label is "` + runtime.GOARCH + `"`},
		{"a label the node lacks is rejected", map[string]string{"disk": "ssd"},
			`NodeAffinity: Predicate NodeAffinity failed: spec.nodeSelector[disk] wants "ssd", and the node has no label disk`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := matchNodeSelector(&corev1.Pod{Spec: corev1.PodSpec{NodeSelector: tt.selector}}, labels)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("got %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestEndPastDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	secs := int64(2)
	grace := int64(3)
	newManager := func(t *testing.T) *Manager {
		return &Manager{cfg: Config{RootDir: t.TempDir()}, log: slog.New(slog.DiscardHandler), now: func() time.Time { return now },
			state: testStore(t)}
	}
	newState := func() *podState {
		return &podState{
			pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"},
				Spec: corev1.PodSpec{ActiveDeadlineSeconds: &secs, TerminationGracePeriodSeconds: &grace}},
			created: start, status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	t.Run("a pod within its deadline runs on, and the worker wakes at the deadline", func(t *testing.T) {
		m, st := newManager(t), newState()
		now = start.Add(1500 * time.Millisecond)
		if m.endPastDeadline(st) {
			t.Fatal("ended before its deadline")
		}
		if left, ok := untilDeadline(st, now); !ok || left != 500*time.Millisecond {
			t.Fatalf("untilDeadline = %v, %v; want 500ms", left, ok)
		}
	})
	t.Run("a pod past its deadline fails with DeadlineExceeded, recorded", func(t *testing.T) {
		m, st := newManager(t), newState()
		now = start.Add(2 * time.Second)
		if !m.endPastDeadline(st) {
			t.Fatal("not ended at its deadline")
		}
		if st.status.Phase != corev1.PodFailed || st.status.Reason != ReasonDeadlineExceeded || st.status.Message != MessageDeadlineExceeded {
			t.Fatalf("status %+v", st.status)
		}
		if st.evicted == nil || st.evicted.Grace != 3*time.Second {
			t.Fatalf("end %+v, want the pod's grace period", st.evicted)
		}
		rec := m.loadEviction("u1")
		if rec == nil || rec.reason() != ReasonDeadlineExceeded {
			t.Fatalf("record %+v, want DeadlineExceeded kept across restarts", rec)
		}
		if m.endPastDeadline(st) {
			t.Fatal("ended twice")
		}
	})
	t.Run("a finished pod and a pod without a deadline are left alone", func(t *testing.T) {
		m := newManager(t)
		now = start.Add(time.Hour)
		done := newState()
		done.status.Phase = corev1.PodSucceeded
		none := newState()
		none.pod.Spec.ActiveDeadlineSeconds = nil
		if m.endPastDeadline(done) || m.endPastDeadline(none) {
			t.Fatal("ended a finished pod or one without a deadline")
		}
		if _, ok := untilDeadline(none, now); ok {
			t.Fatal("a pod without a deadline has one")
		}
	})
	t.Run("an eviction record from before reasons reads as Evicted", func(t *testing.T) {
		if got := (&evictionRecord{Message: "m"}).reason(); got != ReasonEvicted {
			t.Fatalf("reason %q", got)
		}
	})
}
