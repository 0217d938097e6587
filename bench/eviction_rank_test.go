package bench

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestRankMemory(t *testing.T) {
	const mi = 1 << 20
	pod := func(name string, prio int32, req, use int64) EvictionCandidate {
		return EvictionCandidate{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Priority: prio, MemoryRequest: req * mi, MemoryUsage: use * mi}
	}
	for _, tc := range []struct {
		name string
		pods []EvictionCandidate
		want []string
	}{
		{
			name: "a pod over its request goes before a larger one within it",
			pods: []EvictionCandidate{pod("guaranteed", 0, 48, 40), pod("besteffort", 0, 0, 5)},
			want: []string{"besteffort", "guaranteed"},
		},
		{
			name: "among pods over their requests, lower priority goes first",
			pods: []EvictionCandidate{pod("low-usage-prio-0", 0, 0, 5), pod("hog-prio-1000", 1000, 0, 900)},
			want: []string{"low-usage-prio-0", "hog-prio-1000"},
		},
		{
			name: "at equal priority, the larger usage above request goes first",
			pods: []EvictionCandidate{pod("burstable-busy", 0, 16, 40), pod("hog", 0, 0, 300), pod("besteffort-idle", 0, 0, 1)},
			want: []string{"hog", "burstable-busy", "besteffort-idle"},
		},
		{
			name: "usage above request, not usage, decides",
			pods: []EvictionCandidate{pod("big-request", 0, 100, 120), pod("small-request", 0, 10, 40)},
			want: []string{"small-request", "big-request"},
		},
		{
			name: "ties fall to the name, so the order is total",
			pods: []EvictionCandidate{pod("b", 0, 0, 5), pod("a", 0, 0, 5)},
			want: []string{"a", "b"},
		},
		{
			name: "the benchmark's background and hog: the hog first, pods within their requests last",
			pods: []EvictionCandidate{
				pod("g-idle", 0, 48, 1), pod("g-busy", 0, 48, 34), pod("b-idle", 0, 16, 1), pod("b-busy", 0, 16, 42),
				pod("be-idle-1", 0, 0, 1), pod("be-idle-2", 0, 0, 1), pod("hog", 0, 0, 700),
			},
			want: []string{"hog", "b-busy", "be-idle-1", "be-idle-2", "g-busy", "b-idle", "g-idle"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range RankMemory(slices.Clone(tc.pods)) {
				got = append(got, p.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}
