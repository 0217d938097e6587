package strictyaml

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

type inner struct {
	Size  int             `json:"size"`
	Every metav1.Duration `json:"every"`
}

type Embedded struct {
	Shared string `json:"shared"`
}

type doc struct {
	Embedded `json:",inline"`
	Name     string            `json:"name"`
	Inner    inner             `json:"inner"`
	Items    []inner           `json:"items"`
	Labels   map[string]string `json:"labels"`
	Skipped  string            `json:"-"`
	hidden   string
}

// recorder is a Checker that writes each problem as "kind path".
var recorder = Checker{
	Enter: func(t reflect.Type) bool {
		return t.Kind() != reflect.Struct || !DecodesItself(t)
	},
	Leaf: func(p *field.Path, v any, t reflect.Type) error {
		if t.Kind() == reflect.Int {
			if _, ok := v.(float64); !ok {
				return fmt.Errorf("leaf %s: %s, want %s", p, DescribeValue(v), DescribeType(t))
			}
		}
		return nil
	},
	Unknown: func(parent *field.Path, key string) error {
		if parent == nil {
			return errors.New("unknown " + key)
		}
		return fmt.Errorf("unknown %s.%s", parent, key)
	},
	Shape: func(p *field.Path, v any, t reflect.Type) error {
		return fmt.Errorf("shape %s: %s", p, DescribeValue(v))
	},
}

func TestCheckNamesEveryProblemByItsPathInSortedOrder(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"a document of known keys has no problem", "name: a\nshared: b\ninner: {size: 1, every: 1s}\nlabels: {a: b}\n", nil},
		{"null is never a problem", "name: null\ninner: null\nitems: [null]\n", nil},
		{"an unknown top-level key is named alone", "nmae: a\n", []string{"unknown nmae"}},
		{"an unknown nested key is named with its section", "inner: {sise: 1}\n", []string{"unknown inner.sise"}},
		{"list items are named by index", "items: [{size: 1}, {size: x}]\n", []string{"leaf items[1].size: a string, want an integer"}},
		{"map values are named by key", "labels: [a]\n", []string{"shape labels: a list"}},
		{"a section that is not a mapping is a shape problem", "inner: 3\n", []string{"shape inner: a number"}},
		{"keys tagged - and unexported fields are not fields", "Skipped: a\nhidden: b\n", []string{"unknown Skipped", "unknown hidden"}},
		{"every problem is reported, in sorted order", "zz: 1\ninner: {b: 1, a: 2}\n", []string{"unknown inner.a", "unknown inner.b", "unknown zz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw map[string]any
			if err := yaml.Unmarshal([]byte(tc.yaml), &raw); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, err := range recorder.Check(raw, reflect.TypeFor[doc](), nil) {
				got = append(got, err.Error())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFieldsAreEncodingJSONs(t *testing.T) {
	got := Fields(reflect.TypeFor[doc]())
	want := []string{"inner", "items", "labels", "name", "shared"}
	var names []string
	for k := range got {
		names = append(names, k)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("fields %q, want %q", names, want)
	}
}

func TestDescriptions(t *testing.T) {
	for v, want := range map[any]string{"s": "a string", 1.5: "a number", int64(2): "a number", true: "a boolean"} {
		if got := DescribeValue(v); got != want {
			t.Errorf("DescribeValue(%#v) = %q, want %q", v, got, want)
		}
	}
	if got := DescribeValue([]any{1}); got != "a list" {
		t.Errorf("a list is %q", got)
	}
	for typ, want := range map[reflect.Type]string{
		reflect.TypeFor[int32]():             "an integer",
		reflect.TypeFor[bool]():              "true or false",
		reflect.TypeFor[[]string]():          "a list of string",
		reflect.TypeFor[map[string]string](): "a mapping",
		reflect.TypeFor[metav1.Duration]():   "v1.Duration",
	} {
		if got := DescribeType(typ); got != want {
			t.Errorf("DescribeType(%s) = %q, want %q", typ, got, want)
		}
	}
}
