package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/internal/strictyaml"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/configuration.md from the configuration types")

// configurationDoc is the generated reference of every key, kept in sync
// by TestConfigurationDocIsCurrent.
const configurationDoc = "../docs/configuration.md"

// kubeletLine starts the line of a field's doc comment that names the
// kubelet's equivalent: a KubeletConfiguration field, a flag (--x), or
// "none", each optionally followed by a remark in parentheses.
const kubeletLine = "Kubelet: "

// fieldDocs reads the doc comments of the package's struct fields from
// its source: "Type.Field" to the comment's text.
func fieldDocs() (map[string]string, error) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	docs := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fl := range st.Fields.List {
				for _, id := range fl.Names {
					docs[ts.Name.Name+"."+id.Name] = fl.Doc.Text()
				}
			}
			return false
		})
	}
	return docs, nil
}

// docKey is one key of a configuration file as the reference shows it.
type docKey struct {
	path, typ, def, kubelet, text string
	section                       bool
}

// keyDocs lists the keys of t, in declaration order, sections before
// their keys, with v's values as the defaults. Every key must have a doc
// comment, and every key that is not a section a Kubelet line.
func keyDocs(t reflect.Type, v reflect.Value, prefix string, docs map[string]string) ([]docKey, []error) {
	var out []docKey
	var errs []error
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			k, e := keyDocs(f.Type, fv, prefix, docs)
			out, errs = append(out, k...), append(errs, e...)
			continue
		}
		if !f.IsExported() || name == "-" {
			continue
		}
		path := prefix + name
		text, kubelet := splitDoc(docs[t.Name()+"."+f.Name])
		// The comment speaks of the Go field; the reader knows the key.
		if rest, ok := strings.CutPrefix(text, f.Name); ok && (rest == "" || rest[0] == ' ' || rest[0] == ':') {
			text = "`" + name + "`" + rest
		}
		if text == "" {
			errs = append(errs, fmt.Errorf("%s (%s.%s): no doc comment", path, t.Name(), f.Name))
		}
		if f.Type.Kind() == reflect.Struct && !strictyaml.DecodesItself(f.Type) {
			out = append(out, docKey{path: path, text: text, section: true})
			k, e := keyDocs(f.Type, fv, path+".", docs)
			out, errs = append(out, k...), append(errs, e...)
			continue
		}
		if kubelet == "" {
			errs = append(errs, fmt.Errorf("%s (%s.%s): no %q line in its doc comment", path, t.Name(), f.Name, strings.TrimSpace(kubeletLine)))
		}
		def, err := describeDefault(fv)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
		}
		out = append(out, docKey{path: path, typ: describeDocType(f.Type), def: def, kubelet: kubelet, text: text})
	}
	return out, errs
}

// splitDoc parts a doc comment into its text, on one line, and its
// Kubelet line's value.
func splitDoc(doc string) (text, kubelet string) {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(doc), "\n") {
		if v, ok := strings.CutPrefix(l, kubeletLine); ok {
			kubelet = strings.TrimSuffix(strings.TrimSpace(v), ".")
			continue
		}
		lines = append(lines, strings.TrimSpace(l))
	}
	return strings.TrimSpace(strings.Join(lines, " ")), kubelet
}

// describeDocType names a key's type for a reader of the reference.
func describeDocType(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[metav1.Duration]():
		return "duration (1m30s)"
	case reflect.TypeFor[resource.Quantity]():
		return "quantity (10Mi)"
	case reflect.TypeFor[corev1.ResourceList]():
		return "mapping of resource to quantity"
	case reflect.TypeFor[corev1.Taint]():
		return "taint ({key, value, effect})"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list of " + describeDocType(t.Elem())
	case reflect.Map:
		return "mapping of " + describeDocType(t.Key()) + " to " + describeDocType(t.Elem())
	}
	return strictyaml.DescribeType(t)
}

// describeDefault renders a default value as it would be written in the
// file (JSON being YAML's flow style); none for an empty one.
func describeDefault(v reflect.Value) (string, error) {
	switch {
	case v.Kind() == reflect.String && v.String() == "":
		return "empty", nil
	case v.Kind() == reflect.String:
		return "`" + v.String() + "`", nil
	case (v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.Len() == 0:
		return "none", nil
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return "", fmt.Errorf("render the default: %w", err)
	}
	var str string
	if json.Unmarshal(b, &str) == nil {
		return "`" + str + "`", nil // a duration or a quantity
	}
	return "`" + strings.ReplaceAll(strings.ReplaceAll(string(b), `":`, `": `), `","`, `", "`) + "`", nil
}

// writeConfigurationDoc renders the reference of Run's and Guard's keys.
func writeConfigurationDoc(w *bytes.Buffer) error {
	docs, err := fieldDocs()
	if err != nil {
		return err
	}
	run, errs := keyDocs(reflect.TypeFor[Run](), reflect.ValueOf(Default().Effective()), "", docs)
	guardKeys, gerrs := keyDocs(reflect.TypeFor[Guard](), reflect.ValueOf(DefaultGuard()), "", docs)
	if errs = append(errs, gerrs...); len(errs) > 0 {
		return errors.Join(errs...)
	}
	w.WriteString(`# Configuration reference

Generated from the configuration types (package config: the doc comments of
the fields, Default and DefaultGuard) by
` + "`go test ./config -run TestConfigurationDocIsCurrent -update-docs`" + `; do not edit.

Keys are the kubelet's wherever the kubelet has one, with its syntax and
defaults; the kubelet column names its KubeletConfiguration field or flag.
Decoding is strict: an unknown key, a section that is not a mapping or a
value of the wrong type is refused, named by its full path.
` + "`nodeguard config check FILE`" + ` checks a file as the agent would;
` + "`nodeguard config defaults`" + ` prints every default.

## nodeguard run

` + "`nodeguard run`" + ` reads ` + "`" + DefaultPath + "`" + ` when it exists, or the file
given with ` + "`--config`" + `; flags override it. ` + "`deploy/config.example.yaml`" + `
is every default written out. On SIGHUP the agent reads the file again:
keys marked "applied" take effect at once, without touching pods; a change
to any other key is logged as needing a restart and the running value
stays. A file that does not load or validate changes nothing.
`)
	writeKeyTables(w, run, func(path string) string {
		top, _, _ := strings.Cut(path, ".")
		if reloadable[path] || reloadable[top] {
			return "applied"
		}
		return "restart"
	})
	w.WriteString(`
## nodeguard guard

` + "`nodeguard guard`" + ` reads ` + "`" + DefaultGuardPath + "`" + ` when it exists, or the file
given with ` + "`--config`" + `; flags override it. Its keys are those of
` + "`nodeguard run`" + ` that make sense beside a kubelet, with the same meanings;
its eviction thresholds may name memory signals only. It reads the file
once, at start: a change needs a restart. ` + "`deploy/guard.example.yaml`" + ` is an
example.
`)
	writeKeyTables(w, guardKeys, nil)
	return nil
}

// writeKeyTables writes one table per section, the top-level keys
// first, then each section in declaration order under its heading and
// doc (a section without keys of its own has no table); reload, when not
// nil, fills a SIGHUP column.
func writeKeyTables(w *bytes.Buffer, keys []docKey, reload func(string) string) {
	type section struct {
		title, text string
		keys        []docKey
	}
	sections := []*section{{title: "Top-level keys"}}
	byPath := map[string]*section{"": sections[0]}
	for _, k := range keys {
		parent := ""
		if i := strings.LastIndex(k.path, "."); i >= 0 {
			parent = k.path[:i]
		}
		if k.section {
			sec := &section{title: "`" + k.path + "`", text: k.text}
			sections = append(sections, sec)
			byPath[k.path] = sec
			continue
		}
		byPath[parent].keys = append(byPath[parent].keys, k)
	}
	for _, sec := range sections {
		fmt.Fprintf(w, "\n### %s\n", sec.title)
		if sec.text != "" {
			w.WriteString("\n" + cell(sec.text) + "\n")
		}
		if len(sec.keys) == 0 {
			continue
		}
		w.WriteString("\n| key | type | default | kubelet |")
		if reload != nil {
			w.WriteString(" SIGHUP |")
		}
		w.WriteString(" what it does |\n|---|---|---|---|")
		if reload != nil {
			w.WriteString("---|")
		}
		w.WriteString("---|\n")
		for _, k := range sec.keys {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |", k.path, k.typ, cell(k.def), kubeletCell(k.kubelet))
			if reload != nil {
				fmt.Fprintf(w, " %s |", reload(k.path))
			}
			fmt.Fprintf(w, " %s |\n", cell(k.text))
		}
	}
}

// cell escapes text for a Markdown table cell: pipes, and angle brackets
// outside code spans (<rootDir> would be taken for an HTML tag).
func cell(s string) string {
	var b strings.Builder
	code := false
	for _, r := range s {
		switch {
		case r == '`':
			code = !code
			b.WriteRune(r)
		case r == '|':
			b.WriteString(`\|`)
		case r == '<' && !code:
			b.WriteString("&lt;")
		case r == '>' && !code:
			b.WriteString("&gt;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// kubeletCell sets the field or flag of a Kubelet line in code, and its
// remark after it.
func kubeletCell(k string) string {
	name, remark, _ := strings.Cut(k, " ")
	if name != "none" {
		name = "`" + name + "`"
	}
	if remark != "" {
		return name + " " + cell(remark)
	}
	return name
}

// TestConfigurationDocIsCurrent checks that docs/configuration.md is what
// the configuration types render: a key added, renamed, documented
// differently or given another default changes the reference in the same
// commit (run with -update-docs and review the diff). It fails too when a
// key has no doc comment or no Kubelet line.
func TestConfigurationDocIsCurrent(t *testing.T) {
	var b bytes.Buffer
	if err := writeConfigurationDoc(&b); err != nil {
		t.Fatalf("the configuration types cannot be documented:\n%v", err)
	}
	if *updateDocs {
		if err := os.WriteFile(configurationDoc, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatalf("read the reference: %v (write it with -update-docs)", err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("%s is not what the configuration types render: run go test ./config -run TestConfigurationDocIsCurrent -update-docs and review the diff", configurationDoc)
	}
}

// TestTheReferenceListsEveryKey checks the rendering against the strict
// decoder's view of the types: every key the decoder accepts is in the
// reference, with its full path, so that no key can be accepted and
// undocumented.
func TestTheReferenceListsEveryKey(t *testing.T) {
	var b bytes.Buffer
	if err := writeConfigurationDoc(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	var walk func(t reflect.Type, prefix string) []string
	walk = func(t reflect.Type, prefix string) []string {
		var keys []string
		for name, f := range strictyaml.Fields(t) {
			if f.Type.Kind() == reflect.Struct && !strictyaml.DecodesItself(f.Type) {
				keys = append(keys, walk(f.Type, prefix+name+".")...)
				continue
			}
			keys = append(keys, prefix+name)
		}
		return keys
	}
	keys := append(walk(reflect.TypeFor[Run](), ""), walk(reflect.TypeFor[Guard](), "")...)
	if len(keys) < 60 {
		t.Fatalf("only %d keys found: the walk is wrong", len(keys))
	}
	for _, k := range keys {
		if !strings.Contains(doc, "| `"+k+"` |") {
			t.Errorf("%s: not in the reference", k)
		}
	}
}
