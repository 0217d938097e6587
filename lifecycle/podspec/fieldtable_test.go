package podspec

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/pod-fields.md from the support table")

// fieldTableDoc is the generated table of every field nodeguard accepts
// or refuses, kept in sync by TestPodFieldsDocIsCurrent.
const fieldTableDoc = "../../docs/pod-fields.md"

// useText says in the table what nodeguard does with a listed field.
var useText = map[use]string{
	honoured:   "honoured",
	scheduling: "ignored with a warning: nodeguard does no scheduling, it runs every pod it is given",
	serverSet:  "ignored with a warning: set by an API server, not read from manifests",
	noEffect:   "accepted; no effect",
}

// writeFieldTable renders fieldUse and refusedWhy as Markdown: per API
// type, every field of the type (those of an inlined struct as the
// type's own, as walkFields checks them) with what nodeguard does with it.
func writeFieldTable(w *bytes.Buffer) {
	types := make([]reflect.Type, 0, len(fieldUse))
	for t := range fieldUse {
		types = append(types, t)
	}
	// The pod first, then its parts in the order a manifest nests them;
	// the rest by name.
	order := map[string]int{"Pod": 0, "ObjectMeta": 1, "PodSpec": 2, "PodSecurityContext": 3, "Container": 4, "SecurityContext": 5, "Volume": 6}
	sort.Slice(types, func(i, j int) bool {
		oi, iok := order[types[i].Name()]
		oj, jok := order[types[j].Name()]
		switch {
		case iok && jok:
			return oi < oj
		case iok != jok:
			return iok
		}
		return types[i].Name() < types[j].Name()
	})
	w.WriteString("# Pod fields: what nodeguard honours and refuses\n\n")
	w.WriteString("Generated from lifecycle/podspec/support.go (fieldUse and refusedWhy) by\n")
	w.WriteString("`go test ./lifecycle/podspec -run TestPodFieldsDocIsCurrent -update-docs`; do not edit.\n")
	w.WriteString("A field that is set and listed as refused makes the pod's admission fail with\n")
	w.WriteString("`Forbidden: not supported by nodeguard` and the reason shown. Honoured fields are\n")
	w.WriteString("validated as the API server validates them; some accept only some values (see\n")
	w.WriteString("the package documentation of lifecycle/podspec).\n")
	for _, t := range types {
		fmt.Fprintf(w, "\n## %s\n\n| field | nodeguard |\n|---|---|\n", t.Name())
		writeTypeFields(w, t, t, fieldUse[t])
	}
}

func writeTypeFields(w *bytes.Buffer, t, outer reflect.Type, uses map[string]use) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			writeTypeFields(w, f.Type, outer, uses)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		text := "refused"
		if u, ok := uses[name]; ok {
			text = useText[u]
		} else if why, ok := refusedWhy[t][name]; ok {
			text = "refused: " + why
		}
		fmt.Fprintf(w, "| `%s` | %s |\n", name, strings.ReplaceAll(text, "|", `\|`))
	}
}

// TestPodFieldsDocIsCurrent checks that docs/pod-fields.md is what the
// support table renders: a field whose treatment changes in support.go
// changes the document in the same commit (run with -update-docs).
func TestPodFieldsDocIsCurrent(t *testing.T) {
	var b bytes.Buffer
	writeFieldTable(&b)
	if *updateDocs {
		if err := os.WriteFile(fieldTableDoc, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(fieldTableDoc)
	if err != nil {
		t.Fatalf("read the field table: %v (write it with -update-docs)", err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("%s is not what support.go renders: run go test ./lifecycle/podspec -run TestPodFieldsDocIsCurrent -update-docs and review the diff", fieldTableDoc)
	}
}

// TestFieldTableListsEveryRefusal checks that the table shows each reason
// of refusedWhy: a reason for a field the rendering cannot reach (a type
// fieldUse does not list, a misspelt field) would never reach a user.
func TestFieldTableListsEveryRefusal(t *testing.T) {
	var b bytes.Buffer
	writeFieldTable(&b)
	doc := b.String()
	for typ, fields := range refusedWhy {
		for name, why := range fields {
			row := fmt.Sprintf("| `%s` | refused: %s |", name, strings.ReplaceAll(why, "|", `\|`))
			if !strings.Contains(doc, row) {
				t.Errorf("%s.%s: its reason is not in the table", typ.Name(), name)
			}
		}
	}
	if !strings.Contains(doc, "## "+reflect.TypeFor[corev1.Pod]().Name()+"\n") {
		t.Error("the table has no section for the Pod")
	}
}
