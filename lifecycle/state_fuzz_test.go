package lifecycle

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// testStore is a state store of its own for a Manager made by hand.
func testStore(t testing.TB) *statestore.Store {
	t.Helper()
	s, err := statestore.Open(t.TempDir(), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// storedRecord is the file a store writes for v as record key of kind k.
func storedRecord(t testing.TB, k statestore.Kind, key string, v any) []byte {
	t.Helper()
	s := testStore(t)
	if err := s.Put(k, key, v); err != nil {
		t.Fatal(err)
	}
	keys, err := s.Keys(k)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	entries, err := os.ReadDir(filepath.Join(s.Dir(), k.Name))
	if err != nil || len(entries) != 1 {
		t.Fatalf("record files %v, %v", entries, err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir(), k.Name, entries[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzAPIPodRecord drives what loading does with a persisted API pod's
// record file: the envelope (statestore.Parse), then decodeAPIPod. What
// decodes is a pod that can be run and recognised, filed under its own
// name, and decodes the same once written again.
func FuzzAPIPodRecord(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	f.Add(storedRecord(f, KindAPIPod, "default/web", apiPodRecord{Pod: pod}), "default/web")
	f.Add(storedRecord(f, KindAPIPod, "default/web", apiPodRecord{}), "default/web")
	f.Add(storedRecord(f, KindAPIPod, "other/web", apiPodRecord{Pod: pod}), "other/web")
	f.Add([]byte(`{"format":1,"kind":"api-pod","key":"default/web","version":1,"crc32c":0,"data":null}`), "default/web")
	f.Add([]byte(`{"format":1,"kind":"api`), "default/web")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		r, err := statestore.Parse(b, KindAPIPod, key)
		if err != nil {
			return
		}
		p, err := decodeAPIPod(r)
		if err != nil {
			return
		}
		if p.Name == "" || p.UID == "" || apiPodKey(p.Namespace, p.Name) != key {
			t.Fatalf("decoded pod %s/%s uid %q from the record of %q", p.Namespace, p.Name, p.UID, key)
		}
		data, err := json.Marshal(apiPodRecord{Pod: p})
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeAPIPod(statestore.Record{Key: key, Data: data})
		if err != nil {
			t.Fatalf("a decoded pod written again does not decode: %v", err)
		}
		if d2, _ := json.Marshal(apiPodRecord{Pod: again}); !bytes.Equal(data, d2) {
			t.Fatalf("written again the pod changed:\n%s\n%s", data, d2)
		}
	})
}

// FuzzEvictionRecord drives what loadEviction does with an eviction
// record file: the envelope, then decodeEviction.
func FuzzEvictionRecord(f *testing.F) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Add(storedRecord(f, KindEviction, "u1", &evictionRecord{Message: "The node was low on resource: memory.", At: at}), "u1")
	f.Add(storedRecord(f, KindEviction, "u1", &evictionRecord{Reason: ReasonDeadlineExceeded, Message: MessageDeadlineExceeded, Grace: time.Second, At: at}), "u1")
	f.Add(storedRecord(f, KindEviction, "u1", &evictionRecord{Grace: -1, At: at}), "u1")
	f.Add([]byte(`{"format":1,"kind":"eviction","key":"u1","version":2,"crc32c":0,"data":{}}`), "u1")
	f.Add([]byte(`{"format":1,"kind":"evic`), "u1")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		r, err := statestore.Parse(b, KindEviction, key)
		if err != nil {
			return
		}
		ev, err := decodeEviction(r)
		if err != nil {
			return
		}
		if ev.Grace < 0 || ev.At.IsZero() || ev.rejected {
			t.Fatalf("decoded eviction %+v", ev)
		}
		data, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeEviction(statestore.Record{Key: key, Data: data}); err != nil {
			t.Fatalf("a decoded eviction written again does not decode: %v", err)
		}
	})
}

// FuzzStaticPodsRecord drives what restoreStatic does with a manifest
// file's record: the envelope, then decodeStaticPods. What decodes is a
// non-empty list of named pods that decodes the same once written again.
func FuzzStaticPodsRecord(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
	const src = "file:/etc/nodeguard/manifests/web.yaml"
	f.Add(storedRecord(f, KindStaticPods, src, staticPodsRecord{Pods: []*corev1.Pod{pod}}), src)
	f.Add(storedRecord(f, KindStaticPods, src, staticPodsRecord{Pods: []*corev1.Pod{pod, nil}}), src)
	f.Add(storedRecord(f, KindStaticPods, src, staticPodsRecord{}), src)
	f.Add([]byte(`{"format":1,"kind":"static-pods","key":"file:/x","version":1,"crc32c":0,"data":{"pods":[{}]}}`), "file:/x")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		r, err := statestore.Parse(b, KindStaticPods, key)
		if err != nil {
			return
		}
		pods, err := decodeStaticPods(r)
		if err != nil {
			return
		}
		if len(pods) == 0 {
			t.Fatal("decoded no pods")
		}
		for _, p := range pods {
			if p == nil || p.Name == "" {
				t.Fatalf("decoded a pod without a name: %+v", p)
			}
		}
		data, err := json.Marshal(staticPodsRecord{Pods: pods})
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeStaticPods(statestore.Record{Key: key, Data: data})
		if err != nil {
			t.Fatalf("decoded pods written again do not decode: %v", err)
		}
		if d2, _ := json.Marshal(staticPodsRecord{Pods: again}); !bytes.Equal(data, d2) {
			t.Fatalf("written again the pods changed:\n%s\n%s", data, d2)
		}
	})
}
