package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// buildTimeout bounds a build: go build of the pause program takes ~0.5 s
// with a warm build cache and ~10 s cold.
const buildTimeout = 3 * time.Minute

// needBusybox skips (or fails, see cgtest.Need) without a static busybox.
func needBusybox(t *testing.T) {
	t.Helper()
	cgtest.Need(t, CheckStatic(BusyboxBinary) == nil, BusyboxBinary+" is not a static busybox (apt-get install busybox-static)")
}

// tarFile is one entry of a tar archive read back.
type tarFile struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, r io.Reader) ([]string, map[string]tarFile) {
	t.Helper()
	var names []string
	files := map[string]tarFile{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		names = append(names, name)
		files[name] = tarFile{h, b}
	}
}

// checkTarOrder fails t unless every entry is dated Epoch, owned by 0:0,
// and comes after its parent directory.
func checkTarOrder(t *testing.T, what string, names []string, files map[string]tarFile) {
	t.Helper()
	seen := map[string]bool{}
	for _, n := range names {
		h := files[n].hdr
		if !h.ModTime.Equal(Epoch) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: %s has mtime %v, owner %d:%d; want %v, 0:0", what, n, h.ModTime, h.Uid, h.Gid, Epoch)
		}
		if d := path.Dir(n); d != "." && !seen[d] {
			t.Errorf("%s: %s comes before its directory %s", what, n, d)
		}
		seen[n] = true
	}
}

// layout is an OCI image-layout tarball read back and checked.
type layout struct {
	index    index
	manifest manifest
	config   imageConfig
	layer    map[string]tarFile
}

// readLayout reads and checks an archive: oci-layout, one manifest in
// index.json, every blob named by its digest and of its size, the config's
// diff_id the digest of the uncompressed layer.
func readLayout(t *testing.T, im Image) layout {
	t.Helper()
	f, err := os.Open(im.Archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, files := readTar(t, f)
	checkTarOrder(t, im.Archive, names, files)
	if got := string(files["oci-layout"].data); got != `{"imageLayoutVersion":"1.0.0"}` {
		t.Fatalf("oci-layout = %q", got)
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		f, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("blob %s missing", d.Digest)
		}
		if digestOf(f.data) != d.Digest || int64(len(f.data)) != d.Size {
			t.Fatalf("blob %s has digest %s and size %d, want size %d", d.Digest, digestOf(f.data), len(f.data), d.Size)
		}
		return f.data
	}
	var l layout
	if err := json.Unmarshal(files["index.json"].data, &l.index); err != nil {
		t.Fatal(err)
	}
	if len(l.index.Manifests) != 1 {
		t.Fatalf("index.json has %d manifests, want 1", len(l.index.Manifests))
	}
	md := l.index.Manifests[0]
	if md.Digest != im.Digest {
		t.Errorf("index manifest digest %s, Image.Digest %s", md.Digest, im.Digest)
	}
	if err := json.Unmarshal(blob(md), &l.manifest); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(blob(l.manifest.Config), &l.config); err != nil {
		t.Fatal(err)
	}
	if len(l.manifest.Layers) != 1 || (l.manifest.Layers[0].MediaType != mediaTypeLayer && l.manifest.Layers[0].MediaType != mediaTypeLayerTar) {
		t.Fatalf("manifest layers %+v, want one layer, gzip or plain tar", l.manifest.Layers)
	}
	raw := blob(l.manifest.Layers[0])
	if l.manifest.Layers[0].MediaType == mediaTypeLayer {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{digestOf(raw)}; !slices.Equal(l.config.RootFS.DiffIDs, want) {
		t.Errorf("config diff_ids %v, want %v", l.config.RootFS.DiffIDs, want)
	}
	lnames, lfiles := readTar(t, bytes.NewReader(raw))
	checkTarOrder(t, im.Name+" layer", lnames, lfiles)
	l.layer = lfiles
	return l
}

func TestBuild(t *testing.T) {
	needBusybox(t)
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	tests := []struct {
		name       string
		build      func(context.Context, string) (Image, error)
		ref, tag   string
		entrypoint []string
		cmd        []string
		check      func(t *testing.T, layer map[string]tarFile)
	}{
		{
			name: "pause", build: BuildPause, ref: PauseName, tag: "3.9", entrypoint: []string{"/pause"},
			check: func(t *testing.T, layer map[string]tarFile) {
				f, ok := layer["pause"]
				if !ok || f.hdr.Mode&0o111 == 0 {
					t.Fatalf("no executable /pause in the layer")
				}
				bin := filepath.Join(t.TempDir(), "pause")
				if err := os.WriteFile(bin, f.data, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := CheckStatic(bin); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "hog", build: BuildHog, ref: HogName, tag: "1", entrypoint: []string{"/hog"},
			check: func(t *testing.T, layer map[string]tarFile) {
				f, ok := layer["hog"]
				if !ok || f.hdr.Mode&0o111 == 0 {
					t.Fatalf("no executable /hog in the layer")
				}
				bin := filepath.Join(t.TempDir(), "hog")
				if err := os.WriteFile(bin, f.data, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := CheckStatic(bin); err != nil {
					t.Fatal(err)
				}
				// The binary is the hog: it refuses to run without a rate.
				out, err := exec.CommandContext(t.Context(), bin).CombinedOutput()
				if err == nil || !strings.Contains(string(out), "--rate") {
					t.Errorf("/hog with no arguments: %v, %q; want a usage error about --rate", err, out)
				}
			},
		},
		{
			name: "busybox", build: BuildBusybox, ref: BusyboxName, tag: "1.35", cmd: []string{"sh"},
			check: func(t *testing.T, layer map[string]tarFile) {
				if f, ok := layer["bin/busybox"]; !ok || f.hdr.Typeflag != tar.TypeReg || f.hdr.Mode&0o111 == 0 {
					t.Fatal("no executable /bin/busybox in the layer")
				}
				if f, ok := layer["bin/grpchealth"]; !ok || f.hdr.Typeflag != tar.TypeReg || f.hdr.Mode&0o111 == 0 {
					t.Fatal("no executable /bin/grpchealth in the layer")
				} else {
					bin := filepath.Join(t.TempDir(), "grpchealth")
					if err := os.WriteFile(bin, f.data, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := CheckStatic(bin); err != nil {
						t.Fatal(err)
					}
					// The binary is grpchealth: it refuses an argument
					// that is no SERVICE=FILE before it listens.
					out, err := exec.CommandContext(t.Context(), bin, "bad").CombinedOutput()
					if err == nil || !strings.Contains(string(out), "SERVICE=FILE") {
						t.Errorf("/bin/grpchealth bad: %v, %q; want a usage error about SERVICE=FILE", err, out)
					}
				}
				links := map[string]bool{}
				for name, f := range layer {
					if f.hdr.Typeflag == tar.TypeSymlink {
						if f.hdr.Linkname != "/bin/busybox" {
							t.Errorf("%s links to %s, want /bin/busybox", name, f.hdr.Linkname)
						}
						links[path.Base(name)] = true
					}
				}
				for _, a := range RequiredApplets {
					if !links[a] {
						t.Errorf("no link for applet %s", a)
					}
				}
				if f := layer["tmp"]; f.hdr == nil || f.hdr.Mode != 0o1777 {
					t.Errorf("/tmp is not 1777")
				}
				if !strings.HasPrefix(string(layer["etc/passwd"].data), "root:x:0:0:") {
					t.Errorf("/etc/passwd has no root")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is a valid, deterministic OCI layout that ctr names "+tt.ref, func(t *testing.T) {
			a, err := tt.build(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			b, err := tt.build(ctx, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			ab, _ := os.ReadFile(a.Archive)
			bb, _ := os.ReadFile(b.Archive)
			if !bytes.Equal(ab, bb) || a.Digest != b.Digest {
				t.Errorf("two builds differ: %s %d bytes, %s %d bytes", a.Digest, len(ab), b.Digest, len(bb))
			}
			if a.Name != tt.ref || a.Size != int64(len(ab)) || filepath.Base(a.Archive) != tt.name+".tar" {
				t.Errorf("Image %+v: want name %s, archive %s.tar of %d bytes", a, tt.ref, tt.name, len(ab))
			}
			l := readLayout(t, a)
			ann := l.index.Manifests[0].Annotations
			if ann[AnnotationImageName] != tt.ref || ann[AnnotationRefName] != tt.tag {
				t.Errorf("annotations %v, want %s=%s and %s=%s", ann, AnnotationImageName, tt.ref, AnnotationRefName, tt.tag)
			}
			c := l.config
			// amd64 on the development and CI machines.
			if c.Architecture != runtime.GOARCH || c.OS != "linux" || !slices.Equal(c.Config.Entrypoint, tt.entrypoint) || !slices.Equal(c.Config.Cmd, tt.cmd) {
				t.Errorf("config %s/%s entrypoint %q cmd %q, want linux/%s %q %q", c.OS, c.Architecture, c.Config.Entrypoint, c.Config.Cmd, runtime.GOARCH, tt.entrypoint, tt.cmd)
			}
			if p := l.index.Manifests[0].Platform; p == nil || p.Architecture != runtime.GOARCH || p.OS != "linux" {
				t.Errorf("index platform %+v, want linux/%s", p, runtime.GOARCH)
			}
			tt.check(t, l.layer)
		})
	}
}

// pauseBinary builds the pause program and returns its path.
func pauseBinary(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	goBin, err := goTool()
	if err != nil {
		t.Fatal(err)
	}
	b, err := compilePause(ctx, goBin, "")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPauseExitsZeroOnSignal(t *testing.T) {
	bin := pauseBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				t.Fatalf("pause exited unasked: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause after %v: %v, want exit 0", sig, err)
				}
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("pause still running 5 s after %v", sig)
			}
		})
	}
}

// TestPauseReapsOrphans runs pause as PID 1 of a new PID namespace, makes
// an orphan in that namespace, and checks that pause adopts and reaps it.
func TestPauseReapsOrphans(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := pauseBinary(t)
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	pid := cmd.Process.Pid

	// sh forks a sleep and exits at once: the sleep's parent becomes
	// the namespace's init, pause.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(pid), "--pid", "--",
		"/bin/sh", "-c", "sleep 0.3 &").Run(); err != nil {
		t.Fatalf("nsenter: %v", err)
	}
	adopted := false
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		kids := children(t, pid)
		if len(kids) > 0 {
			adopted = true
		} else if adopted {
			return // adopted, exited, reaped
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pause's children after 3 s: %v (adopted an orphan: %v); want none left", children(t, pid), adopted)
}

type child struct {
	pid   int
	state string
}

// children lists the processes whose parent is ppid.
func children(t *testing.T, ppid int) []child {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []child
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
			out = append(out, child{pid, f[0]})
		}
	}
	return out
}

func TestCached(t *testing.T) {
	needBusybox(t)
	ctx, cancel := context.WithTimeout(t.Context(), buildTimeout)
	defer cancel()
	root := t.TempDir()
	first, err := Cached(ctx, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Built {
		t.Error("first Cached in an empty root did not build")
	}
	if first.Hog.Name != HogName || filepath.Dir(first.Hog.Archive) != first.Dir {
		t.Errorf("Cached hog image %+v, want %s in %s", first.Hog, HogName, first.Dir)
	}
	if b, err := os.ReadFile(filepath.Join(root, BuildLog)); err != nil {
		t.Error(err)
	} else {
		for _, p := range []string{"pause", "grpchealth", "hog"} {
			if !strings.Contains(string(b), "== built "+p+" in ") {
				t.Errorf("%s has no line for the build of %s:\n%s", BuildLog, p, b)
			}
		}
	}
	t.Run("the second call reuses the build", func(t *testing.T) {
		again, err := Cached(ctx, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if again.Built || again.Dir != first.Dir || again.Pause != first.Pause || again.Busybox != first.Busybox || again.Hog != first.Hog {
			t.Fatalf("second Cached = %+v, want the first build %+v unbuilt", again, first)
		}
	})
	t.Run("a damaged cache is rebuilt", func(t *testing.T) {
		if err := os.Truncate(first.Busybox.Archive, 100); err != nil {
			t.Fatal(err)
		}
		again, err := Cached(ctx, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Built || again.Busybox.Digest != first.Busybox.Digest {
			t.Fatalf("Cached after truncation = %+v, want a rebuild with digest %s", again, first.Busybox.Digest)
		}
		if fi, err := os.Stat(again.Busybox.Archive); err != nil || fi.Size() != first.Busybox.Size {
			t.Fatalf("rebuilt archive: %v, size %d, want %d", err, fi.Size(), first.Busybox.Size)
		}
	})
}

func TestRejects(t *testing.T) {
	text := filepath.Join(t.TempDir(), "text")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Run("CheckStatic tells a dynamic executable from an unreadable one", func(t *testing.T) {
		if err := CheckStatic("/bin/ls"); !errors.Is(err, ErrNotStatic) {
			t.Errorf("CheckStatic(/bin/ls) = %v, want ErrNotStatic", err)
		}
		if err := CheckStatic(text); err == nil || errors.Is(err, ErrNotStatic) {
			t.Errorf("CheckStatic(a script) = %v, want a non-ELF error", err)
		}
		if err := CheckStatic(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("CheckStatic(missing) = %v, want ErrNotExist", err)
		}
	})
	t.Run("the busybox build refuses a dynamic or missing binary", func(t *testing.T) {
		if _, err := buildBusybox(t.Context(), t.TempDir(), "/bin/ls", fallbackGo, ""); !errors.Is(err, ErrNotStatic) {
			t.Errorf("buildBusybox(/bin/ls) = %v, want ErrNotStatic", err)
		}
		if _, err := buildBusybox(t.Context(), t.TempDir(), "/nonexistent/busybox", fallbackGo, ""); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("buildBusybox(missing) = %v, want ErrNotExist", err)
		}
	})
	t.Run("the pause build reports a toolchain that fails", func(t *testing.T) {
		if _, err := buildPause(t.Context(), t.TempDir(), "/bin/false", filepath.Join(t.TempDir(), BuildLog)); err == nil {
			t.Error("buildPause with /bin/false as go succeeded")
		}
	})
	t.Run("layer entries must be clean, relative and unique", func(t *testing.T) {
		for _, name := range []string{"", "/abs", "a/../b", "../up", "a//b", "a/"} {
			if _, err := withParents([]entry{{name: name, typ: tar.TypeDir}}); err == nil {
				t.Errorf("withParents accepted %q", name)
			}
		}
		if _, err := withParents([]entry{{name: "a", typ: tar.TypeDir}, {name: "a", typ: tar.TypeDir}}); err == nil {
			t.Error("withParents accepted a duplicate")
		}
	})
	t.Run("applet lists must be clean relative paths", func(t *testing.T) {
		for _, in := range []string{"", "\n\n", "/bin/sh\n", "bin/../sh\n", "../sh\n"} {
			if _, err := parseAppletList([]byte(in)); err == nil {
				t.Errorf("parseAppletList(%q) succeeded", in)
			}
		}
		got, err := parseAppletList([]byte("bin/sh\nusr/bin/[\n\nlinuxrc\n"))
		if err != nil || !slices.Equal(got, []string{"bin/sh", "usr/bin/[", "linuxrc"}) {
			t.Errorf("parseAppletList = %q, %v", got, err)
		}
	})
}

func TestWithParentsOrder(t *testing.T) {
	got, err := withParents([]entry{
		{name: "usr/bin/x", typ: tar.TypeReg},
		{name: "a-b", typ: tar.TypeReg},
		{name: "a/c", typ: tar.TypeReg},
		{name: "usr", mode: 0o700, typ: tar.TypeDir},
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range got {
		names = append(names, e.name)
		if e.name == "usr" && e.mode != 0o700 {
			t.Errorf("listed directory usr lost its mode: %o", e.mode)
		}
	}
	want := []string{"a", "a-b", "a/c", "usr", "usr/bin", "usr/bin/x"}
	if !slices.Equal(names, want) {
		t.Fatalf("withParents order %q, want %q", names, want)
	}
}

func TestTag(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.local/nodeguard/pause:3.9": "3.9",
		"registry.local:5000/x":              "latest",
		"busybox":                            "latest",
		"localhost:5000/a/b:v1":              "v1",
	} {
		if got := tag(ref); got != want {
			t.Errorf("tag(%q) = %q, want %q", ref, got, want)
		}
	}
}

// The nodeguard image holds the static binary at /usr/local/bin/nodeguard,
// its entrypoint, and the mount points of the DaemonSet's volumes; a
// dynamically linked binary is refused.
func TestBuildNodeguard(t *testing.T) {
	bin := pauseBinary(t) // any static binary will do
	im, err := BuildNodeguard(bin, filepath.Join(t.TempDir(), "nodeguard.tar"), NodeguardName)
	if err != nil {
		t.Fatal(err)
	}
	l := readLayout(t, im)
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := l.layer["usr/local/bin/nodeguard"]; !ok || !bytes.Equal(f.data, want) || f.hdr.Mode&0o111 == 0 {
		t.Errorf("usr/local/bin/nodeguard: present %v, the binary %v", ok, ok && bytes.Equal(f.data, want))
	}
	for _, d := range []string{"tmp", "sys", "proc", "run", "var/lib", "etc"} {
		if _, ok := l.layer[d+"/"]; !ok {
			if _, ok := l.layer[d]; !ok {
				t.Errorf("no %s in the layer", d)
			}
		}
	}
	if got := l.config.Config.Entrypoint; !slices.Equal(got, []string{"/usr/local/bin/nodeguard"}) {
		t.Errorf("entrypoint %v", got)
	}
	if im.Name != NodeguardName {
		t.Errorf("name %q, want %q", im.Name, NodeguardName)
	}
	if _, err := BuildNodeguard("/bin/sh", filepath.Join(t.TempDir(), "x.tar"), NodeguardName); !errors.Is(err, ErrNotStatic) {
		t.Errorf("a dynamic binary: %v, want ErrNotStatic", err)
	}
}
