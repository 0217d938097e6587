package mounts

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkUsageDiskEmptyDir measures a disk emptyDir of 10,000 small
// files in 100 directories: what the lifecycle's local-storage pass pays
// for such a volume every 10 s (about one statx per entry, warm).
func BenchmarkUsageDiskEmptyDir(b *testing.B) {
	m, err := New(Config{RootDir: b.TempDir(), NodeMemory: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	pod := newPod("bench", nil)
	pod.Spec.Volumes = append(pod.Spec.Volumes, emptyDirVol("scratch", "", ""))
	if _, err := m.Setup(b.Context(), pod); err != nil {
		b.Fatal(err)
	}
	dir := m.VolumeDir("bench", PluginEmptyDir, "scratch")
	for d := range 100 {
		sub := filepath.Join(dir, fmt.Sprint(d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprint(f)), []byte("x"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		us, err := m.Usage("bench", pod)
		if err != nil || len(us) != 1 || us[0].Inodes != 10_101 {
			b.Fatalf("Usage = %+v, %v; want one volume of 10,101 inodes", us, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10_101, "ns/entry")
}
