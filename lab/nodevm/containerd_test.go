package nodevm

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/vmtest"
)

func TestParseContainerd(t *testing.T) {
	for in, want := range map[string]string{
		"": ContainerdDebian, "debian": ContainerdDebian,
		"v2.4.2": ContainerdV2, "2.4.2": ContainerdV2, "2": ContainerdV2, "v2": ContainerdV2,
	} {
		t.Run("the knob "+in+" names "+want, func(t *testing.T) {
			if got, err := ParseContainerd(in); err != nil || got != want {
				t.Errorf("ParseContainerd(%q) = %q, %v", in, got, err)
			}
		})
	}
	for _, bad := range []string{"v1.7.0", "1.6.20", "Debian", " 2", "v2.4.1", "latest"} {
		t.Run("the knob "+bad+" is refused, naming the choices", func(t *testing.T) {
			_, err := ParseContainerd(bad)
			if err == nil || !strings.Contains(err.Error(), EnvContainerd) || !strings.Contains(err.Error(), ContainerdV2) {
				t.Errorf("ParseContainerd(%q) = %v", bad, err)
			}
		})
	}
}

func TestConfigFromEnvContainerd(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name      string
		env       map[string]string
		ctrd      string
		race      string
		extraTime bool
	}{
		{"unset is Debian's, with the quick race", map[string]string{}, ContainerdDebian, RaceQuick, true},
		{"containerd 2 defaults the race to off", map[string]string{EnvContainerd: "2"}, ContainerdV2, RaceOff, false},
		{"containerd 2 with the race asked for runs it", map[string]string{EnvContainerd: "v2.4.2", EnvRace: "quick"}, ContainerdV2, RaceQuick, true},
		{"Debian's with the race off", map[string]string{EnvContainerd: "debian", EnvRace: "off"}, ContainerdDebian, RaceOff, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ConfigFromEnv(env(tt.env), nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Containerd != tt.ctrd || c.Race != tt.race {
				t.Errorf("containerd %q race %q, want %q %q", c.Containerd, c.Race, tt.ctrd, tt.race)
			}
			if want := DefaultTimeout + RaceAllowance(tt.race); c.Timeout != want || (c.Timeout > DefaultTimeout) != tt.extraTime {
				t.Errorf("timeout %s, want %s", c.Timeout, want)
			}
		})
	}
	if _, err := ConfigFromEnv(env(map[string]string{EnvContainerd: "1.7"}), nil); err == nil {
		t.Error("an unknown containerd gave no error")
	}
}

func TestContainerdRecipe(t *testing.T) {
	r := containerdRecipe
	k := r.Key()
	if !strings.HasPrefix(k, ContainerdV2+"-") || len(k) != len(ContainerdV2)+1+12 || filepath.Base(k) != k {
		t.Errorf("key %q: want the version, a dash and 12 hex digits, one path element", k)
	}
	if r.Key() != k {
		t.Error("the same recipe gives two keys")
	}
	changes := map[string]func(r *ContainerdRecipe){
		"the version":   func(r *ContainerdRecipe) { r.Version = "v2.4.3" },
		"the commands":  func(r *ContainerdRecipe) { r.Commands = r.Commands[:2] },
		"the tags":      func(r *ContainerdRecipe) { r.Tags = append(slices.Clone(r.Tags), "no_zfs") },
		"the ldflags":   func(r *ContainerdRecipe) { r.Ldflags = "-s" },
		"the module":    func(r *ContainerdRecipe) { r.Module = "example.com/containerd" },
		"command order": func(r *ContainerdRecipe) { r.Commands = []string{r.Commands[1], r.Commands[0], r.Commands[2]} },
	}
	seen := map[string]string{k: "the lane's"}
	for what, change := range changes {
		t.Run("a change of "+what+" changes the key", func(t *testing.T) {
			c := r
			c.Commands, c.Tags = slices.Clone(r.Commands), slices.Clone(r.Tags)
			change(&c)
			if other, dup := seen[c.Key()]; dup {
				t.Errorf("key %s is also %s's", c.Key(), other)
			}
			seen[c.Key()] = what
		})
	}
	if got, want := r.Binaries(), []string{"containerd", "containerd-shim-runc-v2", "ctr"}; !slices.Equal(got, want) {
		t.Errorf("binaries %q, want %q", got, want)
	}
	args := r.InstallArgs()
	for _, want := range []string{"install", "-tags", "no_btrfs", "-ldflags=-s -w -X github.com/containerd/containerd/v2/version.Version=" + ContainerdV2,
		"github.com/containerd/containerd/v2/cmd/containerd@" + ContainerdV2,
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@" + ContainerdV2,
		"github.com/containerd/containerd/v2/cmd/ctr@" + ContainerdV2} {
		if !slices.Contains(args, want) {
			t.Errorf("go %q lacks %q", args, want)
		}
	}
}

// fakeGo writes a go command that "builds" by copying a static binary
// into GOBIN under each command's name, counting its runs in a file.
func fakeGo(t *testing.T) (goCmd, runs string) {
	t.Helper()
	needBusybox(t)
	dir := t.TempDir()
	runs = filepath.Join(dir, "runs")
	script := "#!/bin/sh\necho run >>" + vmtest.ShellQuote(runs) + "\n" +
		"[ \"$CGO_ENABLED\" = 0 ] && [ \"$GOTOOLCHAIN\" = local ] || { echo \"CGO_ENABLED=$CGO_ENABLED GOTOOLCHAIN=$GOTOOLCHAIN\" >&2; exit 3; }\n" +
		"case \"$PWD\" in */containerd/build-*) ;; *) echo \"built in $PWD\" >&2; exit 4;; esac\n" +
		"mkdir -p \"$GOBIN\"\n" +
		"for a; do case \"$a\" in *@*) n=${a%@*}; n=${n##*/}; cp " + vmtest.ShellQuote(vmtest.Busybox) + " \"$GOBIN/$n\";; esac; done\n"
	goCmd = filepath.Join(dir, "go")
	if err := os.WriteFile(goCmd, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return goCmd, runs
}

func TestCachedContainerd(t *testing.T) {
	goCmd, runs := fakeGo(t)
	cache := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	count := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run")
	}
	b, err := CachedContainerd(ctx, cache, goCmd, log)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Built || b.Version != ContainerdV2 || b.Dir != filepath.Join(cache, "containerd", containerdRecipe.Key()) || count() != 1 {
		t.Errorf("first use: %+v, %d builds; want one build into the cache", b, count())
	}
	for _, n := range b.Binaries {
		if err := vmtest.CheckStatic(filepath.Join(b.Dir, n)); err != nil {
			t.Error(err)
		}
	}
	t.Run("a warm cache does not build", func(t *testing.T) {
		b2, err := CachedContainerd(ctx, cache, goCmd, log)
		if err != nil || b2.Built || b2.Dir != b.Dir || count() != 1 {
			t.Errorf("%+v %v, %d builds", b2, err, count())
		}
	})
	t.Run("a binary missing builds the whole again", func(t *testing.T) {
		if err := os.Remove(filepath.Join(b.Dir, "ctr")); err != nil {
			t.Fatal(err)
		}
		b3, err := CachedContainerd(ctx, cache, goCmd, log)
		if err != nil || !b3.Built || count() != 2 || !haveBinaries(b3.Dir, b3.Binaries) {
			t.Errorf("%+v %v, %d builds", b3, err, count())
		}
	})
	t.Run("nothing is left of the build but the binaries and the lock", func(t *testing.T) {
		es, err := os.ReadDir(filepath.Join(cache, "containerd"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		if want := []string{"lock", containerdRecipe.Key()}; !slices.Equal(names, want) {
			t.Errorf("cache has %q, want %q", names, want)
		}
	})
	t.Run("a failed build publishes nothing", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "go")
		if err := os.WriteFile(bad, []byte("#!/bin/sh\necho no module proxy >&2\nexit 1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		c := t.TempDir()
		_, err := CachedContainerd(ctx, c, bad, log)
		if err == nil || !strings.Contains(err.Error(), "no module proxy") {
			t.Errorf("err %v, want the build's output", err)
		}
		if _, serr := os.Stat(containerdDir(c, containerdRecipe)); !os.IsNotExist(serr) {
			t.Errorf("a failed build left %s: %v", containerdDir(c, containerdRecipe), serr)
		}
	})
}

func TestContainerdV2Config(t *testing.T) {
	c, err := ContainerdV2Config(images.PauseName)
	if err != nil {
		t.Fatal(err)
	}
	const rt = `[plugins."io.containerd.cri.v1.runtime"`
	wantIn := map[string][]string{
		"":                                      {"version = 3", `required_plugins = ["io.containerd.grpc.v1.cri"]`},
		`[plugins."io.containerd.grpc.v1.cri"]`: {"disable_tcp_service = true", `stream_server_address = "127.0.0.1"`},
		`[plugins."io.containerd.cri.v1.images"]`:               {`snapshotter = "overlayfs"`},
		`[plugins."io.containerd.cri.v1.images".pinned_images]`: {`sandbox = "` + images.PauseName + `"`},
		`[plugins."io.containerd.cri.v1.images".registry]`:      {`config_path = ""`},
		rt + `.containerd]`:                       {`default_runtime_name = "runc"`},
		rt + `.containerd.runtimes.runc]`:         {`runtime_type = "io.containerd.runc.v2"`, `runtime_path = "` + ContainerdBinDir + `/containerd-shim-runc-v2"`},
		rt + `.containerd.runtimes.runc.options]`: {"SystemdCgroup = true"},
		rt + `.cni]`:                              {`bin_dirs = ["/usr/lib/cni"]`, `conf_dir = "/etc/cni/net.d"`, "max_conf_num = 1"},
		`[plugins."io.containerd.nri.v1.nri"]`:    {"disable = true"},
	}
	tables := tomlTables(c)
	for table, lines := range wantIn {
		for _, l := range lines {
			if !slices.Contains(tables[table], l) {
				t.Errorf("table %s lacks %q; it has %q", table, l, tables[table])
			}
		}
	}
	// The 1.6 layout's CRI settings must not be where 2.x ignores them.
	for _, l := range tables[`[plugins."io.containerd.grpc.v1.cri"]`] {
		if strings.HasPrefix(l, "sandbox_image") {
			t.Errorf("sandbox_image in the gRPC CRI plugin's table: %q", l)
		}
	}
	// The checks switch the driver by replacing this line (race_test.go's
	// setSystemdCgroup): it must be there once, as in the 1.6 config.
	if n := strings.Count(c, "SystemdCgroup = true"); n != 1 {
		t.Errorf("SystemdCgroup = true appears %d times", n)
	}
	v1, err := ContainerdConfig(images.PauseName)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(v1, "SystemdCgroup = true") != 1 {
		t.Error("the 1.6 config's SystemdCgroup line is not the same")
	}
	for _, bad := range []string{"", "pause\n:1"} {
		if _, err := ContainerdV2Config(bad); err == nil {
			t.Errorf("ContainerdV2Config(%q) gave no error", bad)
		}
	}
}

func TestContainerdInstallScript(t *testing.T) {
	s := ContainerdInstallScript(ContainerdV2, containerdRecipe.Binaries())
	order := []string{
		"set -eu",
		"systemctl stop containerd",
		"rm -rf /var/lib/containerd /run/containerd",
		`install -m 0755 "$src/bin/containerd" "$src/bin/containerd-shim-runc-v2" "$src/bin/ctr" ` + ContainerdBinDir + "/",
		`install -m 0644 "$src/config.toml" ` + ContainerdConfigPath,
		`install -D -m 0644 "$src/containerd.service.conf" ` + ContainerdDropIn,
		"systemctl daemon-reload",
		"systemctl start containerd || { journalctl -u containerd -n 30 --no-pager -o cat; exit 1; }",
	}
	at := 0
	for _, want := range order {
		i := strings.Index(s[at:], want+"\n")
		if i < 0 {
			t.Fatalf("the installer lacks %q after byte %d:\n%s", want, at, s)
		}
		at += i + len(want)
	}
	if !strings.Contains(s, "src='"+PayloadMount+"/containerd'") {
		t.Errorf("the installer does not read the payload's containerd/:\n%s", s)
	}
	if !strings.Contains(containerdDropIn, "ExecStart=\nExecStart="+ContainerdBinDir+"/containerd\n") {
		t.Errorf("the drop-in does not replace ExecStart:\n%s", containerdDropIn)
	}
}

func TestPayloadWithContainerd(t *testing.T) {
	p := testPayload(t)
	dir := t.TempDir()
	bins := containerdRecipe.Binaries()
	for _, b := range bins {
		if err := os.Link(vmtest.Busybox, filepath.Join(dir, b)); err != nil {
			data, rerr := os.ReadFile(vmtest.Busybox)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if err := os.WriteFile(filepath.Join(dir, b), data, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.Containerd = &PayloadContainerd{Version: ContainerdV2, Dir: dir, Binaries: bins, Config: "version = 3\n"}
	es, err := p.Entries()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Entry{}
	for _, e := range es {
		by[e.Path] = e
	}
	for _, want := range []string{"containerd/bin/containerd", "containerd/bin/containerd-shim-runc-v2", "containerd/bin/ctr",
		"containerd/config.toml", "containerd/containerd.service.conf", "containerd/install"} {
		if _, ok := by[want]; !ok {
			t.Errorf("the payload lacks %s", want)
		}
	}
	if e := by["containerd/install"]; e.Mode.Perm() != 0o755 || !strings.Contains(e.Data, "systemctl start containerd") {
		t.Errorf("installer %v %q", e.Mode, e.Data)
	}
	if by["containerd/config.toml"].Data != "version = 3\n" || by["containerd/bin/ctr"].Host != filepath.Join(dir, "ctr") {
		t.Errorf("config %q, ctr from %q", by["containerd/config.toml"].Data, by["containerd/bin/ctr"].Host)
	}
	t.Run("without it the payload has no containerd", func(t *testing.T) {
		p.Containerd = nil
		es, err := p.Entries()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if strings.HasPrefix(e.Path, "containerd") {
				t.Errorf("%s in a payload for Debian's containerd", e.Path)
			}
		}
	})
	for name, change := range map[string]func(c *PayloadContainerd){
		"a missing binary":         func(c *PayloadContainerd) { c.Binaries = append(slices.Clone(c.Binaries), "containerd-stress") },
		"a binary name with a /":   func(c *PayloadContainerd) { c.Binaries = []string{"../ctr"} },
		"no config":                func(c *PayloadContainerd) { c.Config = "" },
		"no version":               func(c *PayloadContainerd) { c.Version = "" },
		"a dynamic binary instead": func(c *PayloadContainerd) { c.Dir = "/usr/bin"; c.Binaries = []string{"env"} },
	} {
		t.Run("the payload refuses "+name, func(t *testing.T) {
			p.Containerd = &PayloadContainerd{Version: ContainerdV2, Dir: dir, Binaries: bins, Config: "version = 3\n"}
			change(p.Containerd)
			if _, err := p.Entries(); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestLaneScriptInstallsThePayloadsContainerd(t *testing.T) {
	i := strings.Index(laneScript, payloadContainerdInstall)
	imp := strings.Index(laneScript, "ctr -n k8s.io images import")
	reload := strings.Index(laneScript, `say "units reloaded"`)
	if i < 0 || imp < 0 || !(reload < i && i < imp) {
		t.Errorf("the lane script runs the payload's %s at %d, not between the units' reload (%d) and the image import (%d)", payloadContainerdInstall, i, reload, imp)
	}
	if !strings.Contains(laneScript, "finish 125") {
		t.Error("no payload failure status")
	}
}

func TestDpkgVersion(t *testing.T) {
	status := []byte("Package: containerd-stress\nVersion: 9\n\nPackage: runc\nStatus: install ok installed\nVersion: 1.1.5+ds1-1+deb12u1\n\n" +
		"Package: containerd\nStatus: install ok installed\nVersion: 1.6.20~ds1-1+deb12u3\nDescription: x\n")
	for pkg, want := range map[string]string{"containerd": "1.6.20~ds1-1+deb12u3", "runc": "1.1.5+ds1-1+deb12u1"} {
		if got, ok := DpkgVersion(status, pkg); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", pkg, got, ok, want)
		}
	}
	if v, ok := DpkgVersion(status, "crun"); ok {
		t.Errorf("crun found: %q", v)
	}
	if v, ok := DpkgVersion([]byte("Version: 1\n"), "containerd"); ok {
		t.Errorf("a Version outside any package: %q", v)
	}
}
