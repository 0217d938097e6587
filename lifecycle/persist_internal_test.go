package lifecycle

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestARefusedApplyLeavesTheRecordsAsTheyWere: an apply of two pods whose
// second record cannot be written writes neither, and puts back the first
// name's earlier record, so that the next start runs nothing of the
// refused apply.
func TestARefusedApplyLeavesTheRecordsAsTheyWere(t *testing.T) {
	st := testStore(t)
	m := &Manager{state: st, log: slog.New(slog.DiscardHandler), apiRecords: map[string]types.UID{}}
	pod := func(name, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)}}
	}
	if err := m.persist(pod("a", "a-1")); err != nil {
		t.Fatal(err)
	}
	// b's record cannot be written: a directory stands where its file
	// would be renamed to.
	if err := os.MkdirAll(filepath.Join(st.Dir(), KindAPIPod.Name, "default%2Fb.rec", "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.persistAll([]*corev1.Pod{pod("c", "c-1"), pod("a", "a-2"), pod("b", "b-1")}); err == nil {
		t.Fatal("the apply was not refused")
	}
	keys, err := st.Keys(KindAPIPod)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || keys[0] != "default/a" {
		t.Fatalf("records after the refused apply: %q, want only default/a", keys)
	}
	p, err := m.readAPIPod("default/a")
	if err != nil || p == nil || p.UID != "a-1" {
		t.Fatalf("default/a after the refused apply: %+v %v, want its earlier record (a-1)", p, err)
	}
	if m.apiRecords["default/a"] != "a-1" || m.apiRecords["default/c"] != "" {
		t.Fatalf("the manager's view of the records: %v", m.apiRecords)
	}
}
