// Package strictyaml checks a decoded YAML or JSON document against the Go
// type it is about to be decoded into, and names every key the type does
// not have and every value it would refuse by its full field path
// (eviction.evictionHardd, spec.containers[0].imagee).
//
// It exists because the decoders name neither: sigs.k8s.io/yaml's strict
// mode says "unknown field" without the section it is in, and
// encoding/json's type errors name a Go type, not a key. The configuration
// (package config) and the pod manifests (lifecycle/podspec) both check
// with it first and decode afterwards.
//
// The walk is shared; the words are not. What a type is walked into, and
// how each problem is phrased, belong to the caller (a Checker's
// functions), so that each keeps its own error values and messages: the
// pod decoder reports every problem as a *field.Error, the configuration
// its first one in its own words.
//
// Invariants: keys are visited in sorted order, depth first, so the same
// document gives the same errors in the same order every time; a null
// value is never a problem (it leaves the zero value, for every type); the
// input is only read.
package strictyaml

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A Checker walks a decoded document (map[string]any, []any, string,
// bool, float64 or int64, nil) beside a Go type. All four functions are
// required.
type Checker struct {
	// Enter reports whether values of type t are walked into: a struct
	// key by key against its fields, a map key by key, a slice item by
	// item, a pointer through to its element. A type not entered is
	// given whole to Leaf.
	Enter func(t reflect.Type) bool
	// Leaf checks a value of a type that is not entered; nil: it decodes.
	Leaf func(p *field.Path, v any, t reflect.Type) error
	// Unknown is the problem of key, which names no field of the struct
	// at parent (nil: the document's top level). The key comes apart
	// from the path so that a caller can render it as it always has,
	// an empty key included.
	Unknown func(parent *field.Path, key string) error
	// Shape is the problem of v at p where the entered type t wants a
	// mapping (a struct or a map) or a list (a slice).
	Shape func(p *field.Path, v any, t reflect.Type) error
}

// Check walks v against t from the path p (nil: the document) and returns
// every problem, in the walk's order.
func (c Checker) Check(v any, t reflect.Type, p *field.Path) []error {
	var errs []error
	c.walk(v, t, p, &errs)
	return errs
}

func (c Checker) walk(v any, t reflect.Type, p *field.Path, errs *[]error) {
	add := func(err error) {
		if err != nil {
			*errs = append(*errs, err)
		}
	}
	if v == nil {
		return // null leaves the zero value, for every type
	}
	if !c.Enter(t) {
		add(c.Leaf(p, v, t))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		c.walk(v, t.Elem(), p, errs)
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			add(c.Shape(p, v, t))
			return
		}
		fields := Fields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			f, ok := fields[k]
			if !ok {
				add(c.Unknown(p, k))
				continue
			}
			c.walk(m[k], f.Type, Child(p, k), errs)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			add(c.Shape(p, v, t))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			c.walk(m[k], t.Elem(), p.Key(k), errs)
		}
	case reflect.Slice:
		a, ok := v.([]any)
		if !ok {
			add(c.Shape(p, v, t))
			return
		}
		for i, e := range a {
			c.walk(e, t.Elem(), p.Index(i), errs)
		}
	default:
		// Entered, but nothing to walk into: the value is a leaf.
		add(c.Leaf(p, v, t))
	}
}

// Fields maps the JSON names of a struct's fields to the fields, as
// encoding/json sees them: the fields of an embedded struct (or pointer to
// one) without a name of its own are the outer struct's, a field tagged
// "-" is left out, and unexported fields are not fields.
func Fields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	fields(t, out)
	return out
}

func fields(t reflect.Type, out map[string]reflect.StructField) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				fields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
}

// DecodesItself reports whether values of t decode through their own
// UnmarshalJSON (resource.Quantity, metav1.Duration): such a struct is a
// value, not a section of keys.
func DecodesItself(t reflect.Type) bool {
	return reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]())
}

// Child is p's field name, or the top-level field name when p is nil.
func Child(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

// DescribeValue names the kind of a decoded value, in YAML's words: "a
// list", "a string", "a number", "a boolean"; a mapping or null, which a
// caller has already told apart, is "a value".
func DescribeValue(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64, json.Number:
		return "a number"
	}
	return "a value"
}

// DescribeType names what a field of type t takes, in YAML's words: "an
// integer", "a list of string", "true or false". A type it has no words
// for is named by its Go name.
func DescribeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(DescribeType(t.Elem()), "a ")
	case reflect.Map:
		return "a mapping"
	}
	return t.String()
}
