package loader

import (
	"fmt"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// A tp_btf program receives the tracepoint's raw arguments, typed by the
// kernel's BTF. When a kernel changes a tracepoint's prototype (mark_victim
// took an int pid before 6.8 and a task_struct pointer after), a program
// written for the other prototype may still pass the verifier, because
// probe reads accept any scalar as an address, and then report garbage.
// checkSignature compares the kernel's btf_trace_<name> prototype with the
// arguments a program expects before it is loaded, so such a hook takes the
// classic-tracepoint path instead of attaching wrongly.
func checkSignature(cache *btf.Cache, tracepoint string, want []string) error {
	if len(want) == 0 {
		return nil
	}
	spec, err := cache.Kernel()
	if err != nil {
		return fmt.Errorf("check %s arguments: kernel BTF: %w", tracepoint, err)
	}
	typ, err := spec.AnyTypeByName("btf_trace_" + tracepoint)
	if err != nil {
		return fmt.Errorf("check %s arguments: %w", tracepoint, err)
	}
	proto, ok := btf.UnderlyingType(typ).(*btf.Pointer)
	if !ok {
		return fmt.Errorf("check %s arguments: btf_trace_%s is %T, not a function pointer", tracepoint, tracepoint, typ)
	}
	fp, ok := btf.UnderlyingType(proto.Target).(*btf.FuncProto)
	if !ok {
		return fmt.Errorf("check %s arguments: btf_trace_%s points to %T, not a function", tracepoint, tracepoint, proto.Target)
	}
	// The first parameter is the tracepoint's void *__data.
	params := fp.Params[1:]
	if len(params) < len(want) {
		return fmt.Errorf("check %s arguments: kernel passes %d, program reads %d", tracepoint, len(params), len(want))
	}
	for i, w := range want {
		if got := typeName(params[i].Type); got != w {
			return fmt.Errorf("check %s arguments: argument %d is %s on this kernel, program expects %s", tracepoint, i+1, got, w)
		}
	}
	return nil
}

// typeName renders a parameter type the way hookSpec.args spells it:
// "*task_struct", "int", "gfp_t", "*char", "unsigned long".
func typeName(t btf.Type) string {
	var b strings.Builder
	for {
		switch v := t.(type) {
		case *btf.Pointer:
			b.WriteByte('*')
			t = v.Target
			continue
		case *btf.Const:
			t = v.Type
			continue
		case *btf.Volatile:
			t = v.Type
			continue
		case *btf.Typedef:
			b.WriteString(v.Name)
		case *btf.Struct:
			b.WriteString(v.Name)
		case *btf.Int:
			b.WriteString(strings.TrimPrefix(strings.ReplaceAll(v.Name, "long unsigned int", "unsigned long"), " "))
		case *btf.Enum:
			b.WriteString(v.Name)
		default:
			fmt.Fprintf(&b, "%T", v)
		}
		return b.String()
	}
}
