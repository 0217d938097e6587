package netplumb

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDirectAddDel measures one pod's whole network lifetime: netns
// creation, ADD of bridge + host-local + portmap + bandwidth in the node
// namespace, DEL, netns removal.
func BenchmarkDirectAddDel(b *testing.B) {
	n := newTestNode(b, nil)
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	i := 0
	for b.Loop() {
		a, err := n.d.Add(ctx, "bench-"+strconv.Itoa(i), AddOptions{PodName: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if err := n.d.Del(ctx, a); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
