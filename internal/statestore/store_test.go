package statestore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var kindPod = Kind{Name: "api-pod", Version: 2}

type payload struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func (p *payload) Validate() error {
	if p.Name == "" {
		return errors.New("no name")
	}
	return nil
}

func open(t *testing.T) (*Store, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	s, err := Open(filepath.Join(t.TempDir(), "state"), Options{
		Log: slog.New(slog.NewTextHandler(&log, nil)),
		Now: func() time.Time { return time.Unix(1700000000, 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, &log
}

func TestPutGetDeleteRoundTrip(t *testing.T) {
	s, _ := open(t)
	keys := []string{"default/web", "kube-system/a.b", "..", ".", "x/../../etc", "%2F", "ünï"}
	for i, k := range keys {
		if err := s.Put(kindPod, k, payload{Name: k, Count: i}); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
	}
	for i, k := range keys {
		got, ok, err := GetOf[payload](s, kindPod, k)
		if err != nil || !ok || got.Name != k || got.Count != i {
			t.Fatalf("get %q: %+v %v %v", k, got, ok, err)
		}
	}
	// Every record stays inside its kind's directory, whatever its key.
	filepath.WalkDir(s.Dir(), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() && filepath.Dir(path) != filepath.Join(s.Dir(), kindPod.Name) {
			t.Errorf("record file outside its kind's directory: %s", path)
		}
		return nil
	})
	all, err := ListOf[payload](s, kindPod)
	if err != nil || len(all) != len(keys) {
		t.Fatalf("list: %d records, %v", len(all), err)
	}
	for i := 1; i < len(all); i++ {
		if all[i-1].Key >= all[i].Key {
			t.Fatalf("list not sorted by key: %q before %q", all[i-1].Key, all[i].Key)
		}
	}
	if err := s.Put(kindPod, "default/web", payload{Name: "v2"}); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := GetOf[payload](s, kindPod, "default/web"); got.Name != "v2" {
		t.Fatalf("a second put does not replace the record: %+v", got)
	}
	for _, k := range keys {
		if err := s.Delete(kindPod, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(kindPod, "never-written"); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	if all, err := s.List(kindPod); err != nil || len(all) != 0 {
		t.Fatalf("after delete: %d records, %v", len(all), err)
	}
}

func TestBadRecordsAreQuarantinedAndCounted(t *testing.T) {
	good := func(s *Store, key string) string {
		if err := s.Put(kindPod, key, payload{Name: "n"}); err != nil {
			t.Fatal(err)
		}
		name, _ := fileName(key)
		return filepath.Join(s.Dir(), kindPod.Name, name)
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string // in the log line
	}{
		{"a truncated record", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o600)
		}, "envelope"},
		{"an empty file", func(t *testing.T, p string) { os.WriteFile(p, nil, 0o600) }, "envelope"},
		{"a flipped byte in the payload", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"name":"n"`), []byte(`"name":"m"`), 1), 0o600)
		}, "checksum"},
		{"a record of null", func(t *testing.T, p string) { os.WriteFile(p, []byte("null\n"), 0o600) }, "format 0"},
		{"a record under another key", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"key":"default/bad"`), []byte(`"key":"default/other"`), 1), 0o600)
		}, "key"},
		{"a payload that does not validate", func(t *testing.T, p string) {
			s, _ := Open(filepath.Dir(filepath.Dir(p)), Options{})
			s.Put(kindPod, "default/bad", payload{Count: 3})
		}, "no name"},
		{"a payload with an unknown field", func(t *testing.T, p string) {
			s, _ := Open(filepath.Dir(filepath.Dir(p)), Options{})
			s.Put(kindPod, "default/bad", map[string]any{"name": "n", "extra": 1})
		}, "unknown field"},
		{"a file that is too large", func(t *testing.T, p string) {
			os.WriteFile(p, bytes.Repeat([]byte{' '}, maxRecord+1), 0o600)
		}, "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name+" is quarantined, counted and logged; the others are read", func(t *testing.T) {
			s, log := open(t)
			good(s, "default/ok")
			bad := good(s, "default/bad")
			c.damage(t, bad)
			all, err := ListOf[payload](s, kindPod)
			if err != nil {
				t.Fatalf("a bad record failed the listing: %v", err)
			}
			if len(all) != 1 || all[0].Key != "default/ok" {
				t.Fatalf("listed %+v, want only default/ok", all)
			}
			if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the bad record is still in place: %v", err)
			}
			q, _ := filepath.Glob(filepath.Join(s.Dir(), QuarantineDir, kindPod.Name, "*"))
			if len(q) != 1 {
				t.Fatalf("quarantine holds %v", q)
			}
			if n := s.Quarantined(kindPod.Name); n != 1 {
				t.Fatalf("quarantined counter %d, want 1", n)
			}
			if !strings.Contains(log.String(), "quarantined") || !strings.Contains(log.String(), c.want) {
				t.Fatalf("log does not name the quarantine and %q:\n%s", c.want, log.String())
			}
			// Read again: nothing more is logged or counted.
			log.Reset()
			ListOf[payload](s, kindPod)
			if log.Len() != 0 || s.Quarantined(kindPod.Name) != 1 {
				t.Fatalf("a second listing logged or counted again: %q", log.String())
			}
		})
	}
}

func TestGetOfACorruptRecordIsErrCorrupt(t *testing.T) {
	s, _ := open(t)
	s.Put(kindPod, "k", payload{Name: "n"})
	name, _ := fileName("k")
	os.WriteFile(filepath.Join(s.Dir(), kindPod.Name, name), []byte("{"), 0o600)
	if _, ok, err := GetOf[payload](s, kindPod, "k"); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got ok=%v err=%v, want ErrCorrupt", ok, err)
	}
	if _, ok, err := GetOf[payload](s, kindPod, "k"); ok || err != nil {
		t.Fatalf("after quarantine: ok=%v err=%v, want no record", ok, err)
	}
}

func TestARecordOfANewerVersionIsLeftInPlace(t *testing.T) {
	s, log := open(t)
	newer := Kind{Name: kindPod.Name, Version: kindPod.Version + 1}
	if err := s.Put(newer, "default/web", payload{Name: "n"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, ok, err := s.Get(kindPod, "default/web"); ok || !errors.Is(err, ErrUnsupported) {
			t.Fatalf("got ok=%v err=%v, want ErrUnsupported", ok, err)
		}
		if all, err := s.List(kindPod); err != nil || len(all) != 0 {
			t.Fatalf("list: %v %v", all, err)
		}
	}
	if _, ok, err := s.Get(newer, "default/web"); !ok || err != nil {
		t.Fatalf("the newer agent no longer finds its record: %v %v", ok, err)
	}
	if s.Quarantined(kindPod.Name) != 0 {
		t.Fatal("a newer record was quarantined")
	}
	if n := strings.Count(log.String(), "level=WARN"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, log.String())
	}
}

func TestInterruptedWritesLeaveTheOldRecord(t *testing.T) {
	s, _ := open(t)
	s.Put(kindPod, "k", payload{Name: "old"})
	// A crash between the temporary file's write and the rename leaves
	// the temporary file beside the record.
	dir := filepath.Join(s.Dir(), kindPod.Name)
	tmp := filepath.Join(dir, tmpPrefix+"k.rec-123")
	os.WriteFile(tmp, []byte(`{"format":1,"kind":"api-pod","key":"k","ver`), 0o600)
	got, ok, err := GetOf[payload](s, kindPod, "k")
	if !ok || err != nil || got.Name != "old" {
		t.Fatalf("got %+v %v %v", got, ok, err)
	}
	if all, _ := s.List(kindPod); len(all) != 1 {
		t.Fatalf("list: %v", all)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file of the interrupted write is still there: %v", err)
	}
	if s.Quarantined(kindPod.Name) != 0 {
		t.Fatal("a temporary file was quarantined")
	}
}

func TestInvalidKindsAndKeysAreRefused(t *testing.T) {
	s, _ := open(t)
	for _, k := range []Kind{{Name: "", Version: 1}, {Name: "pods", Version: 0}, {Name: "Pods", Version: 1}, {Name: "a/b", Version: 1}, {Name: QuarantineDir, Version: 1}} {
		if err := s.Put(k, "x", 1); err == nil {
			t.Errorf("kind %+v accepted", k)
		}
	}
	if err := s.Put(kindPod, "", 1); err == nil {
		t.Error("an empty key was accepted")
	}
}

func TestKeysTooLongForAFileNameAreNamedByTheirHash(t *testing.T) {
	s, _ := open(t)
	long := "file:/" + strings.Repeat("manifests.d/", 30) + "web.yaml"
	if err := s.Put(kindPod, long, payload{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := GetOf[payload](s, kindPod, long)
	if !ok || err != nil || got.Name != "web" {
		t.Fatalf("get: %+v %v %v", got, ok, err)
	}
	if keys, err := s.Keys(kindPod); err != nil || len(keys) != 1 || keys[0] != long {
		t.Fatalf("keys: %q %v", keys, err)
	}
	if all, err := s.List(kindPod); err != nil || len(all) != 1 || all[0].Key != long {
		t.Fatalf("list: %v %v", all, err)
	}
	if err := s.Delete(kindPod, long); err != nil {
		t.Fatal(err)
	}
	if keys, _ := s.Keys(kindPod); len(keys) != 0 {
		t.Fatalf("keys after delete: %q", keys)
	}
	// A hashed file whose envelope names another key is not its record.
	s.Put(kindPod, long, payload{Name: "web"})
	name, _ := fileName(long)
	path := filepath.Join(s.Dir(), kindPod.Name, name)
	b, _ := os.ReadFile(path)
	os.WriteFile(path, bytes.Replace(b, []byte("web.yaml"), []byte("wex.yaml"), 1), 0o600)
	if all, _ := s.List(kindPod); len(all) != 0 || s.Quarantined(kindPod.Name) != 1 {
		t.Fatalf("a hashed file of another key was read: %v", all)
	}
}

func TestAnotherSpellingOfAKeyIsNotItsRecord(t *testing.T) {
	s, _ := open(t)
	s.Put(kindPod, "a.b", payload{Name: "n"})
	dir := filepath.Join(s.Dir(), kindPod.Name)
	b, _ := os.ReadFile(filepath.Join(dir, "a%2Eb.rec"))
	os.WriteFile(filepath.Join(dir, "a.b.rec"), b, 0o600) // what url escaping alone would name it
	if keys, _ := s.Keys(kindPod); len(keys) != 1 || keys[0] != "a.b" {
		t.Fatalf("keys: %q", keys)
	}
	if all, _ := s.List(kindPod); len(all) != 1 || s.Quarantined(kindPod.Name) != 1 {
		t.Fatalf("list %v, %d quarantined; want the record once and the other spelling quarantined", all, s.Quarantined(kindPod.Name))
	}
}

func TestStrayFilesAreQuarantined(t *testing.T) {
	s, _ := open(t)
	s.Put(kindPod, "k", payload{Name: "n"})
	dir := filepath.Join(s.Dir(), kindPod.Name)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o600)
	all, err := s.List(kindPod)
	if err != nil || len(all) != 1 {
		t.Fatalf("list: %v %v", all, err)
	}
	if s.Quarantined(kindPod.Name) != 1 {
		t.Fatal("a stray file was not quarantined")
	}
}

func TestStagedRecordsReadBackBeforeAndAfterTheyAreDurable(t *testing.T) {
	s, _ := open(t)
	durable, err := s.Stage(kindPod, "default/web", payload{Name: "staged"})
	if err != nil {
		t.Fatal(err)
	}
	// What a restarted agent reads before the sync: the record.
	got, ok, err := GetOf[payload](s, kindPod, "default/web")
	if !ok || err != nil || got.Name != "staged" {
		t.Fatalf("staged record read back as %+v %v %v", got, ok, err)
	}
	if err := durable(); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(kindPod, "default/web"); err != nil {
		t.Fatal(err)
	}
	durable2, err := s.Stage(kindPod, "default/web", payload{Name: "again"})
	if err != nil {
		t.Fatal(err)
	}
	s.Delete(kindPod, "default/web")
	if err := durable2(); err != nil {
		t.Fatalf("making a record removed since durable: %v", err)
	}
	if all, _ := s.List(kindPod); len(all) != 0 {
		t.Fatalf("records left: %v", all)
	}
	// durable prepared the next Stage's file; Close removes it.
	if spare, _ := filepath.Glob(filepath.Join(s.Dir(), kindPod.Name, sparePrefix+"*")); len(spare) != 1 {
		t.Fatalf("prepared files: %v", spare)
	}
	s.Close()
	if left, _ := filepath.Glob(filepath.Join(s.Dir(), kindPod.Name, ".*")); len(left) != 0 {
		t.Fatalf("files left after Close: %v", left)
	}
}

// BenchmarkStage is what a staged write costs before the act it precedes
// (BenchmarkPut: a durable one).
func BenchmarkStage(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		b.StopTimer()
		s.Prepare(kindPod) // what durable does after the act
		b.StartTimer()
		if _, err := s.Stage(kindPod, fmt.Sprint(i), payload{Name: "n", Count: i}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		if err := s.Put(kindPod, fmt.Sprint(i%16), payload{Name: "n", Count: i}); err != nil {
			b.Fatal(err)
		}
	}
}
