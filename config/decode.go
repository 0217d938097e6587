package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/internal/strictyaml"
)

// Load reads the file at path over the defaults (no path: the defaults).
// Keys it does not know and values that do not parse are errors that name
// them; Validate checks the rest.
func Load(path string) (Run, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	return Parse(b, path)
}

// Parse decodes the configuration file b over the defaults; path names the
// file in errors. It reads nothing else: FuzzConfig runs it.
func Parse(b []byte, path string) (Run, error) {
	cfg := Default()
	// Quantities first, so that a bad one is named with its field (the
	// decoder's own error names neither).
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	for _, key := range []string{"systemReserved", "kubeReserved"} {
		m, ok := raw[key].(map[string]any)
		if !ok {
			continue
		}
		for _, r := range slices.Sorted(maps.Keys(m)) {
			v := m[r]
			if _, err := resource.ParseQuantity(fmt.Sprint(v)); err != nil {
				return cfg, fmt.Errorf("config %s: %s.%s: invalid quantity %q: %w", path, key, r, fmt.Sprint(v), err)
			}
		}
	}
	if err := decodeStrict(b, raw, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// decodeStrict decodes b, whose YAML decoding is raw, into out (which
// holds the defaults): every key and value is checked against its field
// first, so that an unknown key or a bad value is named with its full path
// (the decoder names neither a nested key's section nor a duration's
// field), then the file is decoded strictly.
func decodeStrict[T any](b []byte, raw map[string]any, out *T) error {
	if errs := fieldCheck.Check(raw, reflect.TypeFor[T](), nil); len(errs) > 0 {
		// The first in sorted, depth-first order: the same every time.
		return errs[0]
	}
	return yaml.UnmarshalStrict(b, out)
}

// fieldCheck is the strict check of a configuration file: sections (a
// struct without a decoder of its own) are walked key by key; any other
// value is decoded whole into its field's type.
var fieldCheck = strictyaml.Checker{
	Enter: func(t reflect.Type) bool {
		return t.Kind() == reflect.Struct && !strictyaml.DecodesItself(t)
	},
	Leaf: func(p *field.Path, v any, t reflect.Type) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := json.Unmarshal(b, reflect.New(t).Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return fmt.Errorf("%s: invalid value %s: want %s", p, b, strictyaml.DescribeType(t))
			}
			return fmt.Errorf("%s: invalid value %s: %w", p, b, err)
		}
		return nil
	},
	Unknown: func(parent *field.Path, key string) error {
		if parent == nil {
			return fmt.Errorf("%s: unknown field", key)
		}
		return fmt.Errorf("%s.%s: unknown field", parent, key)
	},
	Shape: func(p *field.Path, v any, _ reflect.Type) error {
		return fmt.Errorf("%s: want a mapping of its fields, got %s", p, strictyaml.DescribeValue(v))
	},
}

// CheckFile loads and validates path as `nodeguard run --config path`
// would: the error names the file, the field and its value.
func CheckFile(path string) error {
	cfg, err := Load(path)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Path is the file to read: flag when the flag was given, else def when
// it exists, else none (the defaults and flags).
func Path(flag string, given bool, def string) (string, error) {
	if given {
		if flag == "" {
			return "", errors.New("--config: empty path")
		}
		return flag, nil
	}
	if _, err := os.Stat(def); err == nil {
		return def, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("default config %s: %w", def, err)
	}
	return "", nil
}
