package loader

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func TestObjectsSHA256(t *testing.T) {
	files, err := filepath.Glob("*_bpfel.o")
	if err == nil && len(files) == 0 && os.Getenv("NODEGUARD_VM_KERNEL") != "" {
		// The VM lane's guest gets the package's testdata/ only; the host
		// lane compares the objects with the files.
		t.Skip("no *_bpfel.o in the VM lane's guest: the objects are compared on the host")
	}
	if err != nil || len(files) == 0 {
		t.Fatalf("no *_bpfel.o beside the loader: %v", err)
	}
	objs := embeddedObjects()
	t.Run("every object on disk is embedded and listed, in file-name order", func(t *testing.T) {
		if len(objs) != len(files) {
			t.Fatalf("%d objects listed, %d on disk (%v)", len(objs), len(files), files)
		}
		for i, f := range files {
			if objs[i].file != f {
				t.Fatalf("object %d is %s, disk has %s", i, objs[i].file, f)
			}
			disk, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(objs[i].bytes, disk) {
				t.Errorf("%s: the embedded bytes differ from the file", f)
			}
		}
	})
	t.Run("the digest is the one sha256sum gives for the files concatenated", func(t *testing.T) {
		h := sha256.New()
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			h.Write(b)
		}
		want := hex.EncodeToString(h.Sum(nil))
		if got := ObjectsSHA256(); got != want {
			t.Fatalf("ObjectsSHA256() = %s, want %s", got, want)
		}
	})
}
