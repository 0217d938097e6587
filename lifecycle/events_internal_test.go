package lifecycle

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

func TestEventFilterIsTheKubeletsSpamFilter(t *testing.T) {
	var f eventFilter
	t0 := time.Unix(1000, 0)
	allowed := 0
	for range 40 {
		if f.allow("a", t0) {
			allowed++
		}
	}
	if allowed != eventBurst || f.dropped != 40-eventBurst {
		t.Fatalf("a burst of 40: %d allowed, %d dropped; want %d allowed", allowed, f.dropped, eventBurst)
	}
	if !f.allow("b", t0) {
		t.Fatal("another pod's event was dropped: the filter is per pod")
	}
	if f.allow("a", t0.Add(eventRefill-time.Second)) {
		t.Fatal("allowed before a token came back")
	}
	if !f.allow("a", t0.Add(eventRefill)) {
		t.Fatal("dropped after a refill period")
	}
	f.forget("a")
	if !f.allow("a", t0.Add(eventRefill)) {
		t.Fatal("a forgotten pod does not start over with a full burst")
	}
}

func TestKillingMessage(t *testing.T) {
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		kind   prober.Kind
		want   string
	}{
		{"liveness, restarted", corev1.RestartPolicyAlways, prober.Liveness, "Container app failed liveness probe, will be restarted"},
		{"startup, restarted on failure", corev1.RestartPolicyOnFailure, prober.Startup, "Container app failed startup probe, will be restarted"},
		{"liveness, never restarted", corev1.RestartPolicyNever, prober.Liveness, "Container app failed liveness probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: tt.policy}}
			if got := killingMessage(pod, "app", tt.kind); got != tt.want {
				t.Fatalf("%q, want %q", got, tt.want)
			}
		})
	}
}

func TestProbeDialerWithoutANetwork(t *testing.T) {
	dial, closeDial, err := probeDialer(nil, "")
	if err != nil || dial != nil {
		t.Fatalf("no Network, no ProbeNetNS: dial %v, err %v; want no dialer", dial != nil, err)
	}
	closeDial()
	if _, _, err := probeDialer(nil, "/nonexistent/netns"); err == nil || !strings.Contains(err.Error(), "/nonexistent/netns") {
		t.Fatalf("a ProbeNetNS that does not exist: %v, want an error naming it", err)
	}
	dial, closeDial, err = probeDialer(nil, "/proc/self/ns/net")
	if err != nil || dial == nil {
		t.Fatalf("ProbeNetNS of this process: dial %v, err %v", dial != nil, err)
	}
	closeDial()
}
