package mounts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func configMapVol(name, cm string, items ...corev1.KeyToPath) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Items: items}}}
}

func TestConfigMapSecretProjectedDownward(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeSource(t, sourceConfigMaps, "default", "cfg", map[string]string{"app.conf": "port=80", "extra": "e"})
	env.writeSource(t, sourceSecrets, "default", "creds", map[string]string{"password": "hunter2"})
	pod := newPod("proj", []corev1.Volume{
		configMapVol("cfg", "cfg"),
		configMapVol("items", "cfg", corev1.KeyToPath{Key: "app.conf", Path: "conf/app.conf", Mode: ptr(int32(0o600))}),
		{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: ptr(int32(0o400))}}},
		{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"},
				Items: []corev1.KeyToPath{{Key: "extra", Path: "extra"}}, Optional: ptr(true)}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "meta/name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}},
		}}}},
		{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "app", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}},
			{Path: "uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}},
		}}}},
	}, mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "cfg", MountPath: "/cfg"}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	vd := func(plugin, name string) string { return env.m.VolumeDir("proj", plugin, name) }
	files := []struct {
		path, data string
		mode       os.FileMode
	}{
		{filepath.Join(vd(PluginConfigMap, "cfg"), "app.conf"), "port=80", 0o644},
		{filepath.Join(vd(PluginConfigMap, "cfg"), "extra"), "e", 0o644},
		{filepath.Join(vd(PluginConfigMap, "items"), "conf/app.conf"), "port=80", 0o600},
		{filepath.Join(vd(PluginSecret, "sec"), "password"), "hunter2", 0o400},
		{filepath.Join(vd(PluginProjected, "all"), "extra"), "e", 0o644},
		{filepath.Join(vd(PluginProjected, "all"), "password"), "hunter2", 0o644},
		{filepath.Join(vd(PluginProjected, "all"), "meta/name"), "p-proj", 0o644},
		{filepath.Join(vd(PluginDownwardAPI, "down"), "labels"), "app=\"web\"\ntier=\"a\\\"b\"", 0o644},
		{filepath.Join(vd(PluginDownwardAPI, "down"), "app"), "web", 0o644},
		{filepath.Join(vd(PluginDownwardAPI, "down"), "uid"), "proj", 0o644},
	}
	for _, f := range files {
		if got := mustRead(t, f.path); got != f.data {
			t.Errorf("%s = %q, want %q", f.path, got, f.data)
		}
		if fi, err := os.Stat(f.path); err != nil || fi.Mode().Perm() != f.mode {
			t.Errorf("%s mode = %v, %v; want %v", f.path, fi.Mode(), err, f.mode)
		}
	}
	if _, err := os.Stat(filepath.Join(vd(PluginConfigMap, "items"), "extra")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key not in items was written: %v", err)
	}
	if target, err := os.Readlink(filepath.Join(vd(PluginConfigMap, "cfg"), "app.conf")); err != nil || target != "..data/app.conf" {
		t.Errorf("app.conf links to %q, %v; want ..data/app.conf", target, err)
	}
	// Secret and projected volumes are on tmpfs, configMaps are not.
	onTmpfs := map[string]bool{}
	for _, mi := range mountsUnder(t, env.m.PodDir("proj")) {
		onTmpfs[mi.Mountpoint] = mi.FSType == "tmpfs"
	}
	if !onTmpfs[vd(PluginSecret, "sec")] || !onTmpfs[vd(PluginProjected, "all")] || len(onTmpfs) != 2 {
		t.Errorf("tmpfs mounts = %v, want the secret and projected volumes", onTmpfs)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if !ms[0].Readonly {
		t.Errorf("a configMap volume is mounted read-write: %v", ms[0])
	}

	// Setup again with the same content rewrites nothing.
	before, _ := os.Readlink(filepath.Join(vd(PluginConfigMap, "cfg"), dataDirName))
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Readlink(filepath.Join(vd(PluginConfigMap, "cfg"), dataDirName)); after != before {
		t.Errorf("unchanged content was rewritten: %s -> %s", before, after)
	}
	// A removed key disappears, a changed one changes; the previous
	// generation stays for readers that resolved "..data" just before the
	// switch, until the next update removes it.
	os.Remove(filepath.Join(env.source, sourceConfigMaps, "default", "cfg", "extra"))
	mustWrite(t, filepath.Join(env.source, sourceConfigMaps, "default", "cfg", "app.conf"), "port=81")
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	dir := vd(PluginConfigMap, "cfg")
	if got := mustRead(t, filepath.Join(dir, "app.conf")); got != "port=81" {
		t.Errorf("app.conf = %q after the update", got)
	}
	entries := func() []string {
		es, _ := os.ReadDir(dir)
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	second, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if names := entries(); len(names) != 4 || !slices.Contains(names, before) || !slices.Contains(names, second) { // 2 x ..<ts>, ..data, app.conf
		t.Errorf("volume entries after the update = %v, want the previous generation %s kept beside %s", names, before, second)
	}
	if _, err := env.m.Setup(ctx, pod); err != nil { // unchanged: nothing removed
		t.Fatal(err)
	}
	if names := entries(); len(names) != 4 {
		t.Errorf("volume entries after an unchanged resync = %v", names)
	}
	mustWrite(t, filepath.Join(env.source, sourceConfigMaps, "default", "cfg", "app.conf"), "port=82")
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if names := entries(); len(names) != 4 || slices.Contains(names, before) || !slices.Contains(names, second) {
		t.Errorf("volume entries after a second update = %v, want %s gone and %s kept", names, before, second)
	}
	for _, p := range []string{filepath.Join(dir, "extra"), filepath.Join(vd(PluginProjected, "all"), "extra")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the link of a removed key remains: %s: %v", p, err)
		}
	}

	if err := env.m.Teardown(ctx, "proj"); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Errorf("mounts after Teardown: %v", ms[0].Mountpoint)
	}
}

func TestMissingSources(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeSource(t, sourceConfigMaps, "default", "cfg", map[string]string{"a": "1"})
	tests := []struct {
		name    string
		vol     corev1.Volume
		wantErr string
	}{
		{"a missing configMap is an error naming it", configMapVol("v", "nope"), "configmap default/nope"},
		{"a missing item key is an error naming it", configMapVol("v", "cfg", corev1.KeyToPath{Key: "b", Path: "b"}), `key "b"`},
		{"a missing secret is an error naming it", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gone"}}}, "secret default/gone"},
		{"an optional missing configMap is empty", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Optional: ptr(true)}}}, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			uid := fmt.Sprintf("missing%d", i)
			_, err := env.m.Setup(ctx, newPod(uid, []corev1.Volume{tt.vol}))
			defer func() {
				if err := env.m.Teardown(ctx, newPod(uid, nil).UID); err != nil {
					t.Error(err)
				}
			}()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrSourceNotFound) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), `volume "v"`) {
				t.Fatalf("Setup = %v, want ErrSourceNotFound naming %s and the volume", err, tt.wantErr)
			}
		})
	}
}

// TestAtomicUpdateUnderConcurrentReads changes a configMap 200 times while
// a reader reads the key through the volume in a loop: every read must be
// one complete generation.
func TestAtomicUpdateUnderConcurrentReads(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	src := filepath.Join(env.source, sourceConfigMaps, "default", "cfg")
	// Values of varying length whose every line names the generation, so a
	// torn read shows as lines of two generations or a short value.
	value := func(gen int) string {
		var b strings.Builder
		for i := range 50 + gen%7*40 {
			fmt.Fprintf(&b, "generation %04d line %03d\n", gen, i)
		}
		return b.String()
	}
	check := func(s string) error {
		if s == "" {
			return errors.New("empty value")
		}
		var gen int
		if _, err := fmt.Sscanf(s, "generation %04d", &gen); err != nil {
			return fmt.Errorf("unparsable value %.40q", s)
		}
		if s != value(gen) {
			return fmt.Errorf("mixed or partial value of generation %d (%d bytes)", gen, len(s))
		}
		return nil
	}
	pod, dir := env.setupConfigMapPod(t, ctx, "atomic", map[string]string{"key": value(0)})
	key := filepath.Join(dir, "key")

	var stop atomic.Bool
	var reads, vanished atomic.Int64
	var wg sync.WaitGroup
	readErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() && ctx.Err() == nil {
			b, err := os.ReadFile(key)
			if errors.Is(err, os.ErrNotExist) {
				// The open raced the removal of the generation it had
				// resolved: no content was seen, the next read succeeds.
				vanished.Add(1)
				continue
			}
			if err == nil {
				err = check(string(b))
			}
			if err != nil {
				readErr <- err
				return
			}
			reads.Add(1)
		}
	}()
	for gen := 1; gen <= 200; gen++ {
		tmp := filepath.Join(src, ".tmp")
		mustWrite(t, tmp, value(gen))
		if err := os.Rename(tmp, filepath.Join(src, "key")); err != nil {
			t.Fatal(err)
		}
		env.m.now = func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, gen, time.UTC) }
		if _, err := env.m.Setup(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if len(readErr) > 0 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	select {
	case err := <-readErr:
		t.Fatalf("after %d good reads: %v", reads.Load(), err)
	default:
	}
	if got := mustRead(t, key); got != value(200) {
		t.Errorf("final value is not generation 200")
	}
	t.Logf("%d complete reads, %d opens raced a generation's removal", reads.Load(), vanished.Load())
	if reads.Load() == 0 {
		t.Error("the reader never read")
	}
	if err := env.m.Teardown(ctx, "atomic"); err != nil {
		t.Fatal(err)
	}
}

func TestDanglingDataLinkIsRepaired(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	pod, dir := env.setupConfigMapPod(t, ctx, "dangle", map[string]string{"k": "v"})
	gen, err := os.Readlink(filepath.Join(dir, dataDirName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, gen)); err != nil {
		t.Fatal(err)
	}
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(dir, "k")); got != "v" {
		t.Errorf("k = %q after repair", got)
	}
	if err := env.m.Teardown(ctx, "dangle"); err != nil {
		t.Fatal(err)
	}
}

// A reader whose path walk resolved "..data" just before an update (the
// walk is preempted between the link and the file) still opens the file:
// the previous generation outlives the switch until the next update. The
// kubelet removes it at once; there such a reader gets ENOENT.
func TestAReaderOfThePreviousGenerationStillOpensIt(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	pod, dir := env.setupConfigMapPod(t, ctx, "walk", map[string]string{"key": "v1"})
	update := func(v string) {
		t.Helper()
		env.writeSource(t, sourceConfigMaps, "default", "cfg", map[string]string{"key": v})
		if _, err := env.m.Setup(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	resolved, err := os.Readlink(filepath.Join(dir, dataDirName)) // the walk passes "..data"
	if err != nil {
		t.Fatal(err)
	}
	update("v2") // the switch, in the middle of the walk
	if b, err := os.ReadFile(filepath.Join(dir, resolved, "key")); err != nil || string(b) != "v1" {
		t.Errorf("the walk's file after one update: %q, %v; want v1", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "key")); err != nil || string(b) != "v2" {
		t.Errorf("a new read after the update: %q, %v; want v2", b, err)
	}
	update("v3") // two updates: that generation is gone
	if _, err := os.Stat(filepath.Join(dir, resolved)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the generation before the previous one is still there: %v", err)
	}
	if err := env.m.Teardown(ctx, "walk"); err != nil {
		t.Fatal(err)
	}
}

// setupConfigMapPod writes configMap default/cfg with data and sets up a
// pod (uid = name) with it as volume "cfg"; it returns the pod and the
// volume's directory.
func (e *testEnv) setupConfigMapPod(t *testing.T, ctx context.Context, name string, data map[string]string) (*corev1.Pod, string) {
	t.Helper()
	e.writeSource(t, sourceConfigMaps, "default", "cfg", data)
	pod := newPod(name, []corev1.Volume{configMapVol("cfg", "cfg")})
	if _, err := e.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	return pod, e.m.VolumeDir(pod.UID, PluginConfigMap, "cfg")
}
