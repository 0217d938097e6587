package lifecycle

import (
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// TestOnProbeWakesThePodAsTheKubeletsSyncLoop: readiness and startup
// changes and liveness failures wake the pod's worker; a liveness success
// does not (no status shows it, nothing acts on it).
func TestOnProbeWakesThePodAsTheKubeletsSyncLoop(t *testing.T) {
	for _, tc := range []struct {
		kind   prober.Kind
		result prober.Result
		wake   bool
	}{
		{prober.Readiness, prober.Success, true},
		{prober.Readiness, prober.Failure, true},
		{prober.Startup, prober.Success, true},
		{prober.Startup, prober.Failure, true},
		{prober.Liveness, prober.Failure, true},
		{prober.Liveness, prober.Success, false},
	} {
		st := &podState{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u"}}, kick: make(chan struct{}, 1)}
		m := &Manager{log: slog.New(slog.DiscardHandler), pods: map[types.UID]*podState{"u": st}}
		m.onProbe(prober.Update{PodUID: "u", Container: "c", ContainerID: "id", Kind: tc.kind, Result: tc.result})
		woken := len(st.kick) == 1
		if woken != tc.wake {
			t.Errorf("%s %s: woke the pod's worker %v, want %v", tc.kind, tc.result, woken, tc.wake)
		}
	}
}
