package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// OCI media types and annotations (image-spec v1.0, containerd).
const (
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	// mediaTypeLayerTar is an uncompressed layer (spec.uncompressed).
	mediaTypeLayerTar = "application/vnd.oci.image.layer.v1.tar"

	// AnnotationRefName is the OCI annotation that carries an image's tag
	// in index.json.
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationImageName is containerd's annotation that carries the full
	// image name in index.json; `ctr images import` names the image after
	// it.
	AnnotationImageName = "io.containerd.image.name"
)

// Epoch is the modification time of every tar entry and the creation time
// of every image: a fixed date, so builds are reproducible.
var Epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// defaultPath is the PATH of both images' environment.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// imageConfig is the part of the OCI image configuration the images use.
type imageConfig struct {
	Created      time.Time      `json:"created"`
	Architecture string         `json:"architecture"`
	OS           string         `json:"os"`
	Config       runConfig      `json:"config"`
	RootFS       rootFS         `json:"rootfs"`
	History      []historyEntry `json:"history"`
}

type runConfig struct {
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyEntry struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

// entry is one file, directory or symlink of a layer.
type entry struct {
	name   string // slash-separated, relative: "bin/busybox"
	mode   int64  // permission bits (and sticky)
	typ    byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	data   []byte // TypeReg only
	target string // TypeSymlink only
}

// spec is what an image is made of.
type spec struct {
	name       string // full reference, "registry.local/nodeguard/pause:3.9"
	arch       string // GOARCH spelling, as OCI uses it
	entries    []entry
	entrypoint []string
	cmd        []string
	createdBy  string
	// uncompressed writes the layer as a plain tar: for an image built
	// where it is imported (no transfer to save), compressing a large
	// binary costs more than it saves.
	uncompressed bool
}

// tag returns the part of a reference after the last ':' of its last path
// element, or "latest".
func tag(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.LastIndex(last, ":"); i >= 0 {
		return last[i+1:]
	}
	return "latest"
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// withParents returns entries plus a directory entry (0755) for every
// parent directory that is not listed, sorted by name so that every parent
// precedes its children. Duplicate names are an error.
func withParents(entries []entry) ([]entry, error) {
	byName := make(map[string]bool, len(entries))
	out := make([]entry, 0, len(entries))
	for _, e := range entries {
		if e.name == "" || strings.HasPrefix(e.name, "/") || path.Clean(e.name) != e.name || strings.HasPrefix(e.name, "../") {
			return nil, fmt.Errorf("layer entry %q: not a clean relative path", e.name)
		}
		if byName[e.name] {
			return nil, fmt.Errorf("layer entry %q: listed twice", e.name)
		}
		byName[e.name] = true
		out = append(out, e)
	}
	for _, e := range entries {
		for d := path.Dir(e.name); d != "."; d = path.Dir(d) {
			if !byName[d] {
				byName[d] = true
				out = append(out, entry{name: d, mode: 0o755, typ: tar.TypeDir})
			}
		}
	}
	// Sorting by name puts "a" before "a/b"; "a-b" sorts before "a/b" but
	// after "a", which is all tar needs.
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// writeTar writes entries as a tar stream: owned by 0:0, dated Epoch.
// Directories get a trailing slash, as most tools write them.
func writeTar(buf *bytes.Buffer, entries []entry) error {
	tw := tar.NewWriter(buf)
	for _, e := range entries {
		h := &tar.Header{
			Typeflag: e.typ,
			Name:     e.name,
			Mode:     e.mode,
			ModTime:  Epoch,
		}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		case tar.TypeSymlink:
			h.Linkname = e.target
		default:
			return fmt.Errorf("layer entry %q: unsupported tar type %q", e.name, e.typ)
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write tar header %s: %w", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write(e.data); err != nil {
				return fmt.Errorf("write tar entry %s: %w", e.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close tar: %w", err)
	}
	return nil
}

// gz compresses b with a header that carries no name and no time.
func gz(b []byte) ([]byte, error) {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, fmt.Errorf("gzip layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip layer: %w", err)
	}
	return out.Bytes(), nil
}

// writeLayout writes s as an OCI image-layout tarball to file (created
// through a temporary file in the same directory and a rename) and returns
// the image.
func writeLayout(file string, s spec) (Image, error) {
	entries, err := withParents(s.entries)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", s.name, err)
	}
	var layerTar bytes.Buffer
	if err := writeTar(&layerTar, entries); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", s.name, err)
	}
	layer, layerType := layerTar.Bytes(), mediaTypeLayerTar
	if !s.uncompressed {
		if layer, err = gz(layer); err != nil {
			return Image{}, fmt.Errorf("build image %s: %w", s.name, err)
		}
		layerType = mediaTypeLayer
	}
	cfg, err := json.Marshal(imageConfig{
		Created:      Epoch,
		Architecture: s.arch,
		OS:           "linux",
		Config: runConfig{
			Env:        []string{defaultPath},
			Entrypoint: s.entrypoint,
			Cmd:        s.cmd,
			WorkingDir: "/",
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{digestOf(layerTar.Bytes())}},
		History: []historyEntry{{Created: Epoch, CreatedBy: s.createdBy}},
	})
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: encode config: %w", s.name, err)
	}
	man, err := json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     mediaTypeManifest,
		Config:        descriptor{MediaType: mediaTypeConfig, Digest: digestOf(cfg), Size: int64(len(cfg))},
		Layers:        []descriptor{{MediaType: layerType, Digest: digestOf(layer), Size: int64(len(layer))}},
	})
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: encode manifest: %w", s.name, err)
	}
	idx, err := json.Marshal(index{
		SchemaVersion: 2,
		MediaType:     mediaTypeIndex,
		Manifests: []descriptor{{
			MediaType: mediaTypeManifest,
			Digest:    digestOf(man),
			Size:      int64(len(man)),
			Annotations: map[string]string{
				AnnotationImageName: s.name,
				AnnotationRefName:   tag(s.name),
			},
			Platform: &platform{Architecture: s.arch, OS: "linux"},
		}},
	})
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: encode index: %w", s.name, err)
	}

	blob := func(b []byte) entry {
		return entry{name: "blobs/sha256/" + strings.TrimPrefix(digestOf(b), "sha256:"), mode: 0o644, typ: tar.TypeReg, data: b}
	}
	files := []entry{
		{name: "oci-layout", mode: 0o644, typ: tar.TypeReg, data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", mode: 0o644, typ: tar.TypeReg, data: idx},
		blob(layer), blob(cfg), blob(man),
	}
	files, err = withParents(files)
	if err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", s.name, err)
	}
	var archive bytes.Buffer
	if err := writeTar(&archive, files); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", s.name, err)
	}
	if err := writeFileAtomic(file, archive.Bytes()); err != nil {
		return Image{}, fmt.Errorf("build image %s: %w", s.name, err)
	}
	return Image{Name: s.name, Archive: file, Digest: digestOf(man), Size: int64(archive.Len())}, nil
}

// writeFileAtomic writes data to a temporary file beside name, syncs it and
// renames it to name.
func writeFileAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp, name)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, werr)
	}
	return nil
}
