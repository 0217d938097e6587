package podspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/internal/strictyaml"
)

// MaxManifestBytes bounds one manifest source. The API server refuses
// request bodies above 3 MiB; a file of many pods may be larger, but a
// manifest of several megabytes is a mistake, not a pod list, and it must
// not make the agent allocate without bound.
const MaxManifestBytes = 8 << 20

// ErrTooLarge is wrapped by the error for a source above MaxManifestBytes.
var ErrTooLarge = errors.New("manifest too large")

// UnknownFieldError reports a field that the Pod type does not have, like
// the API server's strict field validation, but with the field path first.
type UnknownFieldError struct {
	// Field is the path of the unknown field, e.g. spec.containers[0].imagee.
	Field string
}

func (e *UnknownFieldError) Error() string { return e.Field + ": unknown field" }

// DecodeError reports why one document of a manifest source could not be
// turned into pods. Errs holds one entry per problem: *field.Error (wrong
// type, bad quantity, unsupported kind, duplicate key), *UnknownFieldError,
// or a plain error for YAML and JSON syntax.
type DecodeError struct {
	// Source names the manifest: the path given to Load or the source given
	// to Parse.
	Source string
	// Document is the 1-based index of the document within Source; 0 when
	// the error concerns the whole source.
	Document int
	// Errs are the problems found, in document order.
	Errs []error
}

// Error renders one line per problem, each prefixed with the source and the
// document number.
func (e *DecodeError) Error() string {
	prefix := e.Source + ": "
	if e.Document > 0 {
		prefix += "document " + strconv.Itoa(e.Document) + ": "
	}
	lines := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		lines[i] = prefix + err.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual problems for errors.Is and errors.As.
func (e *DecodeError) Unwrap() []error { return e.Errs }

// Parse reads Pod manifests from r: YAML or JSON, one or more documents
// separated by "---" lines, each a v1 Pod, a v1 PodList or a v1 List of
// Pods. Decoding is strict: unknown fields, duplicate keys, values of the
// wrong type and unparsable quantities are errors naming the field path.
// Every pod returned has the Kubernetes defaults applied (see Default).
// source names r in errors and enters generated UIDs; use the file path.
//
// Parse reports every broken document (errors.Join of *DecodeError) and
// returns no pods when any document is broken: a manifest is applied whole
// or not at all. Empty documents are skipped. Parse does not validate; call
// Validate on each pod.
func Parse(r io.Reader, source string) ([]*corev1.Pod, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", source, err)
	}
	if len(data) > MaxManifestBytes {
		return nil, &DecodeError{Source: source, Errs: []error{fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxManifestBytes)}}
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, &DecodeError{Source: source, Errs: []error{err}}
	}
	var pods []*corev1.Pod
	var errs []error
	for i, d := range docs {
		got, derrs := decodeDocument(d)
		if len(derrs) > 0 {
			errs = append(errs, &DecodeError{Source: source, Document: i + 1, Errs: derrs})
			continue
		}
		for _, p := range got {
			Default(p, source)
		}
		pods = append(pods, got...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pods, nil
}

// Load parses the manifest file at path, or every *.yaml, *.yml and *.json
// file directly in the directory at path, in lexical order (subdirectories
// and other files are skipped). Errors name the file. Like Parse, Load
// returns no pods when any file is broken.
func Load(path string) ([]*corev1.Pod, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load manifests: %w", err)
	}
	files := []string{path}
	if info.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("load manifests: %w", err)
		}
		files = files[:0]
		for _, e := range entries {
			switch filepath.Ext(e.Name()) {
			case ".yaml", ".yml", ".json":
				if e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0 {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
		}
		slices.Sort(files)
	}
	var pods []*corev1.Pod
	var errs []error
	for _, f := range files {
		got, err := loadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pods = append(pods, got...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return pods, nil
}

func loadFile(path string) ([]*corev1.Pod, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load manifest: %w", err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && !info.Mode().IsRegular() {
		return nil, fmt.Errorf("load manifest %s: not a regular file", path)
	}
	return Parse(f, path)
}

// document is one YAML document and the line it starts on.
type document struct {
	data []byte
	line int
}

// splitDocuments splits a YAML stream at "---" lines as the API machinery's
// YAMLReader does (k8s.io/apimachinery/pkg/util/yaml): only whitespace or a
// comment may follow the separator. Documents that are empty or hold only
// comments are dropped.
func splitDocuments(data []byte) ([]document, error) {
	var docs []document
	start, startLine := 0, 1
	line := 1
	flush := func(end int) {
		if d := data[start:end]; !blank(d) {
			docs = append(docs, document{data: d, line: startLine})
		}
	}
	for pos := 0; pos < len(data); {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		l := data[pos:next]
		if rest, ok := bytes.CutPrefix(l, []byte("---")); ok {
			trimmed := bytes.TrimSpace(rest)
			if len(trimmed) > 0 && trimmed[0] != '#' {
				return nil, fmt.Errorf("line %d: invalid YAML document separator: %q", line, string(bytes.TrimRight(l, "\r\n")))
			}
			flush(pos)
			start, startLine = next, line+1
		}
		pos = next
		line++
	}
	flush(len(data))
	return docs, nil
}

// blank reports whether a document has nothing but whitespace and comments.
func blank(d []byte) bool {
	for _, l := range bytes.Split(d, []byte("\n")) {
		t := bytes.TrimSpace(l)
		if len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// decodeDocument decodes one document into pods, or returns every problem.
func decodeDocument(d document) ([]*corev1.Pod, []error) {
	var jsonData []byte
	trimmed := bytes.TrimSpace(d.data)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		jsonData = trimmed
	} else {
		j, err := yaml.YAMLToJSONStrict(d.data)
		if err != nil {
			// Report lines of the whole source, not of the document.
			msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
				n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
				return "line " + strconv.Itoa(n+d.line-1)
			})
			return nil, []error{errors.New(msg)}
		}
		jsonData = j
	}
	var generic any
	strict, err := kjson.UnmarshalStrict(jsonData, &generic, kjson.DisallowDuplicateFields)
	if err != nil {
		return nil, []error{fmt.Errorf("invalid JSON: %w", err)}
	}
	if len(strict) > 0 {
		errs := make([]error, len(strict))
		for i, s := range strict {
			errs[i] = s
			var fe kjson.FieldError
			if errors.As(s, &fe) {
				errs[i] = field.Duplicate(pathOf(fe.FieldPath()), field.OmitValueType{})
			}
		}
		return nil, errs
	}
	if generic == nil {
		return nil, nil
	}
	obj, ok := generic.(map[string]any)
	if !ok {
		return nil, []error{fmt.Errorf("a manifest document must be an object, got %s", strictyaml.DescribeValue(generic))}
	}
	kind, _ := obj["kind"].(string)
	var errs []error
	switch kind {
	case "Pod":
		errs = append(errs, checkAPIVersion(obj, nil)...)
		errs = append(errs, checkShape(obj, podType, nil)...)
		if len(errs) > 0 {
			return nil, errs
		}
		p, err := decodePod(obj)
		if err != nil {
			return nil, []error{err}
		}
		return []*corev1.Pod{p}, nil
	case "List", "PodList":
		return decodeList(obj, kind)
	case "":
		if _, present := obj["kind"]; present {
			return nil, []error{field.Invalid(field.NewPath("kind"), display(obj["kind"]), "must be a string")}
		}
		return nil, []error{field.Required(field.NewPath("kind"), "")}
	default:
		return nil, []error{field.NotSupported(field.NewPath("kind"), kind, []string{"List", "Pod", "PodList"})}
	}
}

// checkAPIVersion requires apiVersion v1 at p (nil for the document).
func checkAPIVersion(obj map[string]any, p *field.Path) []error {
	fp := child(p, "apiVersion")
	v, present := obj["apiVersion"]
	if !present || v == "" {
		return []error{field.Required(fp, "")}
	}
	if v != "v1" {
		return []error{field.NotSupported(fp, display(v), []string{"v1"})}
	}
	return nil
}

// decodeList decodes a v1 List or PodList of Pods.
func decodeList(obj map[string]any, kind string) ([]*corev1.Pod, []error) {
	errs := checkAPIVersion(obj, nil)
	for _, k := range sortedKeys(obj) {
		switch k {
		case "apiVersion", "kind", "metadata", "items":
		default:
			errs = append(errs, &UnknownFieldError{Field: k})
		}
	}
	errs = append(errs, checkShape(obj["metadata"], reflect.TypeFor[metav1.ListMeta](), field.NewPath("metadata"))...)
	items, ok := obj["items"].([]any)
	if obj["items"] != nil && !ok {
		errs = append(errs, field.Invalid(field.NewPath("items"), display(obj["items"]), "must be a list"))
	}
	for i, it := range items {
		ip := field.NewPath("items").Index(i)
		m, ok := it.(map[string]any)
		if !ok {
			errs = append(errs, field.Invalid(ip, display(it), "must be an object"))
			continue
		}
		itemKind, _ := m["kind"].(string)
		_, hasAPIVersion := m["apiVersion"]
		switch {
		case kind == "List" || itemKind != "" || hasAPIVersion:
			// A List holds any kind, so each item says what it is; a
			// PodList item may, and must then be right.
			if itemKind != "Pod" {
				errs = append(errs, field.NotSupported(ip.Child("kind"), display(m["kind"]), []string{"Pod"}))
			}
			errs = append(errs, checkAPIVersion(m, ip)...)
		}
		errs = append(errs, checkShape(m, podType, ip)...)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	pods := make([]*corev1.Pod, 0, len(items))
	for i, it := range items {
		p, err := decodePod(it.(map[string]any))
		if err != nil {
			return nil, []error{fmt.Errorf("items[%d]: %w", i, err)}
		}
		p.APIVersion, p.Kind = "v1", "Pod"
		pods = append(pods, p)
	}
	return pods, nil
}

func decodePod(obj map[string]any) (*corev1.Pod, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("re-encode pod: %w", err)
	}
	var p corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &p); err != nil {
		// checkShape accepted what the decoder refuses: report it rather
		// than lose it.
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	return &p, nil
}

var podType = reflect.TypeFor[corev1.Pod]()

// shape checks a generic JSON value against the Go type it will be
// decoded into and reports, with full field paths, what encoding/json
// would refuse (wrong JSON types, out-of-range integers, values that a
// custom UnmarshalJSON such as resource.Quantity's refuses) and what
// strict decoding refuses (unknown fields). The walk is strictyaml's,
// shared with the configuration; the error values are this package's.
var shape = strictyaml.Checker{
	Enter: func(t reflect.Type) bool {
		switch {
		case t.Kind() == reflect.Pointer:
			return true
		case strictyaml.DecodesItself(t):
			return false
		case t.Kind() == reflect.Slice:
			return t.Elem().Kind() != reflect.Uint8 // []byte is a base64 string
		}
		return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
	},
	Leaf: checkLeaf,
	Unknown: func(parent *field.Path, key string) error {
		return &UnknownFieldError{Field: child(parent, key).String()}
	},
	Shape: func(p *field.Path, v any, t reflect.Type) error {
		if t.Kind() == reflect.Slice {
			return field.Invalid(p, display(v), "must be a list")
		}
		return field.Invalid(p, display(v), "must be an object")
	},
}

// checkShape is shape's walk of v from p, every problem in sorted key
// order, so that the errors are deterministic.
func checkShape(v any, t reflect.Type, p *field.Path) []error {
	return shape.Check(v, t, p)
}

// checkLeaf checks a value the walk does not enter: a type with its own
// UnmarshalJSON, a base64 string, or a scalar.
func checkLeaf(p *field.Path, v any, t reflect.Type) error {
	if t.Kind() != reflect.Pointer && strictyaml.DecodesItself(t) {
		raw, err := json.Marshal(v)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw)
		}
		if err != nil {
			return field.Invalid(p, display(v), err.Error())
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Slice: // []byte
		if _, ok := v.(string); !ok {
			return field.Invalid(p, display(v), "must be a base64 string")
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return field.Invalid(p, display(v), "must be a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return field.Invalid(p, display(v), "must be a boolean")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(int64)
		lo, hi := int64(-1)<<(t.Bits()-1), int64(1)<<(t.Bits()-1)-1
		if t.Bits() == 64 {
			lo, hi = math.MinInt64, math.MaxInt64
		}
		if !ok || n < lo || n > hi {
			return field.Invalid(p, display(v), fmt.Sprintf("must be an integer between %d and %d", lo, hi))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, ok := v.(int64)
		hi := uint64(1)<<t.Bits() - 1
		if t.Bits() == 64 {
			hi = math.MaxUint64
		}
		if !ok || n < 0 || uint64(n) > hi {
			return field.Invalid(p, display(v), fmt.Sprintf("must be an integer between 0 and %d", hi))
		}
	case reflect.Float32, reflect.Float64:
		switch v.(type) {
		case int64, float64:
		default:
			return field.Invalid(p, display(v), "must be a number")
		}
	case reflect.Interface:
		// Anything decodes into an interface.
	default:
		return field.InternalError(p, fmt.Errorf("cannot check a value of Go type %s", t))
	}
	return nil
}

// display returns a value for field.Error's BadValue: scalars as they are,
// composites omitted (they can be large and say little).
func display(v any) any {
	switch v.(type) {
	case string, int64, float64, bool:
		return v
	case nil:
		return "null"
	}
	return field.OmitValueType{}
}

func child(p *field.Path, name string) *field.Path { return strictyaml.Child(p, name) }

// pathOf wraps an already rendered path such as "spec.containers[0].name"
// (from sigs.k8s.io/json's strict errors) in a *field.Path that renders it
// unchanged.
func pathOf(s string) *field.Path {
	return field.NewPath(s)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
