package corpus

import (
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Counts are the totals docs/benchmarks.md reports.
type Counts struct {
	Specs, Accepted, Ran        int
	RefusedControlPlane         int
	RefusedPlugin, RefusedOther int
	NotRunning                  int
	Production, ProductionRan   int
	ByField                     map[string]int
}

// Count totals results. ByField counts, per refused (Forbidden) field (the
// path's last element without indexes), how many specs named it.
func Count(results []Result) Counts {
	c := Counts{Specs: len(results), ByField: map[string]int{}}
	for _, r := range results {
		if r.Spec.Production != "" {
			c.Production++
		}
		switch r.Outcome {
		case Running, Succeeded:
			c.Accepted++
			c.Ran++
			if r.Spec.Production != "" {
				c.ProductionRan++
			}
		case NotRunning:
			c.Accepted++
			c.NotRunning++
		case RefusedControlPlane:
			c.RefusedControlPlane++
		case RefusedPlugin:
			c.RefusedPlugin++
		case RefusedOther:
			c.RefusedOther++
		}
		// Refused fields are Forbidden; other errors of a refused spec
		// follow from them (an unknown volume type is also an unsupported
		// source).
		named := map[string]bool{}
		for _, f := range r.Refusals {
			if strings.HasPrefix(f.Detail, "Forbidden") {
				named[fieldName(f.Field)] = true
			}
		}
		for n := range named {
			c.ByField[n]++
		}
	}
	return c
}

// fieldName is a path's last element without its index or key:
// "spec.containers[0].lifecycle" is "lifecycle".
func fieldName(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	return path
}

// Summary is one line of counts.
func (c Counts) Summary() string {
	return fmt.Sprintf("%d specs: %d accepted, %d running (or succeeded), %d accepted but not running; refused: %d need a control plane, %d need a plugin, %d other; production workloads running: %d of %d",
		c.Specs, c.Accepted, c.Ran, c.NotRunning, c.RefusedControlPlane, c.RefusedPlugin, c.RefusedOther, c.ProductionRan, c.Production)
}

// Markdown writes the counts and a table of every spec.
func Markdown(w io.Writer, results []Result) error {
	c := Count(results)
	var b strings.Builder
	fmt.Fprintf(&b, "%s.\n\n", c.Summary())
	if len(c.ByField) > 0 {
		fields := make([]string, 0, len(c.ByField))
		for f := range c.ByField {
			fields = append(fields, f)
		}
		sort.Slice(fields, func(i, j int) bool {
			if c.ByField[fields[i]] != c.ByField[fields[j]] {
				return c.ByField[fields[i]] > c.ByField[fields[j]]
			}
			return fields[i] < fields[j]
		})
		b.WriteString("Refused fields, by the number of specs naming them:")
		for i, f := range fields {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s %d", f, c.ByField[f])
		}
		b.WriteString(".\n\n")
	}
	b.WriteString("| spec | production | outcome | why |\n|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| [%s](%s) | %s | %s | %s |\n", r.Spec.Name, r.Spec.Source, r.Spec.Production, r.Outcome, mdEscape(r.Why()))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// CSV writes one row per spec: spec, source, production, outcome, why.
func CSV(w io.Writer, results []Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"spec", "source", "production", "outcome", "why"}); err != nil {
		return err
	}
	for _, r := range results {
		if err := cw.Write([]string{r.Spec.Name, r.Spec.Source, r.Spec.Production, string(r.Outcome), r.Why()}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
