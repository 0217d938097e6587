package loader

import (
	"crypto/sha256"
	"encoding/hex"
)

// embeddedObject is one BPF object bpf2go compiled and embedded: its file
// name beside the generated Go and the bytes the loader loads.
type embeddedObject struct {
	file  string
	bytes []byte
}

// embeddedObjects lists every BPF object of the package, sorted by file
// name. A family added to gen.go must be added here; the test compares this
// list with the *_bpfel.o files on disk.
func embeddedObjects() []embeddedObject {
	return []embeddedObject{
		{"bench_bpfel.o", _BenchBytes},
		{"cgroup_bpfel.o", _CgroupBytes},
		{"exit_bpfel.o", _ExitBytes},
		{"oom_bpfel.o", _OomBytes},
		{"reclaim_bpfel.o", _ReclaimBytes},
	}
}

// ObjectsSHA256 returns the hex SHA-256 of the embedded BPF objects,
// concatenated in file-name order: what `cat loader/*_bpfel.o | sha256sum`
// prints for the tree the binary was built from. Two binaries with the same
// digest load the same kernel programs, whatever their version strings
// say, so a report from a node can be matched to the BPF code it ran.
func ObjectsSHA256() string {
	h := sha256.New()
	for _, o := range embeddedObjects() {
		h.Write(o.bytes)
	}
	return hex.EncodeToString(h.Sum(nil))
}
