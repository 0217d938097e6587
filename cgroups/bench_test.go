package cgroups

import "testing"

// PathOf and Rel run once per cgroup event (cgroup_mkdir, OOM attribution),
// so they must stay allocation-light.
func BenchmarkPathOf(b *testing.B) {
	l, err := DiscoverFS(fixtureFS("hybrid"))
	if err != nil {
		b.Fatal(err)
	}
	rel := hybridOwn + "/kubepods/burstable/pod0123/ctr"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.PathOf(4, rel); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRel(b *testing.B) {
	l, err := DiscoverFS(fixtureFS("hybrid"))
	if err != nil {
		b.Fatal(err)
	}
	p := "/sys/fs/cgroup/memory" + hybridOwn + "/kubepods/burstable/pod0123/ctr"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Rel(p); err != nil {
			b.Fatal(err)
		}
	}
}
