package loader

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestSignatureCheck(t *testing.T) {
	cgtest.RequirePrivileged(t)
	cache := btf.NewCache()
	if _, err := cache.Kernel(); err != nil {
		cgtest.Need(t, false, "no kernel BTF: "+err.Error())
	}
	for _, f := range families() {
		for _, h := range f.hooks {
			if h.btfProg == "" {
				continue
			}
			t.Run("the "+h.name+" prototype matches what its program reads", func(t *testing.T) {
				if err := checkSignature(cache, h.name, h.args); err != nil {
					// Only an older kernel may differ, and then the
					// error must say how.
					if !strings.Contains(err.Error(), "on this kernel, program expects") {
						t.Fatal(err)
					}
					t.Logf("this kernel differs (the fallback will be taken): %v", err)
				}
			})
		}
	}
	t.Run("a wrong expectation is refused with both types named", func(t *testing.T) {
		err := checkSignature(cache, "mark_victim", []string{"int"})
		if err == nil || !strings.Contains(err.Error(), "program expects int") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a tracepoint the kernel lacks is refused", func(t *testing.T) {
		if err := checkSignature(cache, "no_such_tracepoint", []string{"int"}); err == nil {
			t.Fatal("no error")
		}
	})
}
