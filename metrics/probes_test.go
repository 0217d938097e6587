package metrics_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/metrics"
)

func TestProbeResults(t *testing.T) {
	e := metrics.New(metrics.Options{Snapshots: fixedSnapshots{}})
	e.ProbeResults(func() []metrics.ProbeSeries {
		return []metrics.ProbeSeries{
			{ProbeType: "Liveness", Result: "failed", Container: "app", Pod: "web", Namespace: "default", Value: 2},
			{ProbeType: "Readiness", Result: "successful", Container: "app", Pod: "web", Namespace: "default", Value: 7},
		}
	})
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "prober_probe_total" {
			continue
		}
		if mf.GetType().String() != "COUNTER" {
			t.Errorf("type %s, want COUNTER", mf.GetType())
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			got = append(got, fmt.Sprintf("%s %g", strings.Join(ls, ","), m.GetCounter().GetValue()))
		}
	}
	want := []string{
		"container=app,namespace=default,pod=web,probe_type=Liveness,result=failed 2",
		"container=app,namespace=default,pod=web,probe_type=Readiness,result=successful 7",
	}
	if !slices.Equal(got, want) {
		t.Errorf("prober_probe_total:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
