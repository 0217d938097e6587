package vmtest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestResolveFromAptCacheShow(t *testing.T) {
	tests := []struct {
		fixture                   string
		wantPkg, wantVer, wantRel string
	}{
		{"apt-cache-show-linux-image-amd64.txt", "linux-image-6.1.0-57-amd64", "6.1.192-3", "6.1.0-57-amd64"},
		{"apt-cache-show-linux-image-6.12-amd64.txt", "linux-image-6.12.117+deb12-amd64", "6.12.117-1~deb12u1", "6.12.117+deb12-amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			f := parseControl(b)
			if isImagePackage(f["Package"]) {
				t.Fatalf("metapackage %s taken for a kernel image", f["Package"])
			}
			pkg, ver, ok := imageDependency(f["Depends"])
			if !ok || pkg != tt.wantPkg || ver != tt.wantVer {
				t.Fatalf("imageDependency(%q) = %q, %q, %v; want %q, %q", f["Depends"], pkg, ver, ok, tt.wantPkg, tt.wantVer)
			}
			k := Kernel{Package: pkg, Version: ver, Release: pkg[len("linux-image-"):]}
			if k.Release != tt.wantRel {
				t.Errorf("release %q, want %q", k.Release, tt.wantRel)
			}
		})
	}
}

func TestImageDependency(t *testing.T) {
	tests := []struct {
		name, depends    string
		wantPkg, wantVer string
		wantOK           bool
	}{
		{"an unpinned dependency has no version", "linux-image-6.1.0-57-amd64", "linux-image-6.1.0-57-amd64", "", true},
		{"the first image among alternatives and others wins", "initramfs-tools | linux-initramfs-tool, linux-image-6.1.0-58-amd64 (= 6.1.200-1) | linux-image-6.1.0-57-amd64", "linux-image-6.1.0-58-amd64", "6.1.200-1", true},
		{"a metapackage is no image", "linux-image-6.12-amd64 (= 6.12.117-1~deb12u1)", "", "", false},
		{"no dependency at all", "", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pkg, ver, ok := imageDependency(tt.depends)
			if pkg != tt.wantPkg || ver != tt.wantVer || ok != tt.wantOK {
				t.Errorf("got %q, %q, %v; want %q, %q, %v", pkg, ver, ok, tt.wantPkg, tt.wantVer, tt.wantOK)
			}
		})
	}
}

func TestMetaPackage(t *testing.T) {
	for series, want := range map[string]string{
		"6.1":                        "linux-image-amd64",
		"6.12":                       "linux-image-6.12-amd64",
		"linux-image-6.1.0-57-amd64": "linux-image-6.1.0-57-amd64",
	} {
		if got, err := metaPackage(series); err != nil || got != want {
			t.Errorf("metaPackage(%q) = %q, %v; want %q", series, got, err, want)
		}
	}
	for _, bad := range []string{"", "6.18", "amd64"} {
		if _, err := metaPackage(bad); !errors.Is(err, ErrUnknownKernel) {
			t.Errorf("metaPackage(%q) err = %v, want ErrUnknownKernel", bad, err)
		}
	}
	for _, s := range KernelSeries() {
		if _, err := metaPackage(s); err != nil {
			t.Errorf("KernelSeries lists %q, which metaPackage does not know: %v", s, err)
		}
	}
}

func TestParseControl(t *testing.T) {
	in := "Package: p\nDescription: short\n more text\n  and more\nVersion: 1.0\n\nPackage: second\n"
	f := parseControl([]byte(in))
	if f["Package"] != "p" || f["Version"] != "1.0" || f["Description"] != "short\nmore text\nand more" {
		t.Errorf("parseControl = %q", f)
	}
}
