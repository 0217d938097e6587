package kubepods

import (
	"errors"
	"path"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

const uid types.UID = "1234-abcd-5678-ef90"

func TestPodParent(t *testing.T) {
	tests := []struct {
		name   string
		driver Driver
		root   string
		class  corev1.PodQOSClass
		want   string
	}{
		{"a Guaranteed pod lives directly under kubepods with cgroupfs", Cgroupfs, "/", corev1.PodQOSGuaranteed, "/kubepods/pod1234-abcd-5678-ef90"},
		{"a Burstable pod lives under kubepods/burstable with cgroupfs", Cgroupfs, "/", corev1.PodQOSBurstable, "/kubepods/burstable/pod1234-abcd-5678-ef90"},
		{"a BestEffort pod lives under kubepods/besteffort with cgroupfs", Cgroupfs, "/", corev1.PodQOSBestEffort, "/kubepods/besteffort/pod1234-abcd-5678-ef90"},
		{"an absolute cgroupfs root leads the path", Cgroupfs, "/nodeguard/test", corev1.PodQOSBurstable, "/nodeguard/test/kubepods/burstable/pod1234-abcd-5678-ef90"},
		{"a trailing slash on the root is ignored", Cgroupfs, "/nodeguard/", corev1.PodQOSBestEffort, "/nodeguard/kubepods/besteffort/pod1234-abcd-5678-ef90"},
		{"a relative cgroupfs root gives a relative path", Cgroupfs, "ng-test", corev1.PodQOSGuaranteed, "ng-test/kubepods/pod1234-abcd-5678-ef90"},
		{"a Guaranteed pod is a kubepods child slice with systemd", Systemd, "/", corev1.PodQOSGuaranteed, "/kubepods.slice/kubepods-pod1234_abcd_5678_ef90.slice"},
		{"a Burstable pod slice escapes the dashes of its uid", Systemd, "/", corev1.PodQOSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_ef90.slice"},
		{"a BestEffort pod slice nests under kubepods-besteffort", Systemd, "/", corev1.PodQOSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1234_abcd_5678_ef90.slice"},
		{"a systemd root prefixes every slice and has its dashes escaped", Systemd, "/node-a", corev1.PodQOSBurstable, "/node_a.slice/node_a-kubepods.slice/node_a-kubepods-burstable.slice/node_a-kubepods-burstable-pod1234_abcd_5678_ef90.slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PodParent(tt.driver, tt.root, tt.class, uid)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("PodParent = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestQOSParentAndKubepods(t *testing.T) {
	tests := []struct {
		name   string
		driver Driver
		class  corev1.PodQOSClass
		want   string
	}{
		{"the Guaranteed parent is kubepods itself with cgroupfs", Cgroupfs, corev1.PodQOSGuaranteed, "/kubepods"},
		{"the Burstable parent is kubepods/burstable with cgroupfs", Cgroupfs, corev1.PodQOSBurstable, "/kubepods/burstable"},
		{"the BestEffort parent is kubepods/besteffort with cgroupfs", Cgroupfs, corev1.PodQOSBestEffort, "/kubepods/besteffort"},
		{"the Guaranteed parent is kubepods.slice with systemd", Systemd, corev1.PodQOSGuaranteed, "/kubepods.slice"},
		{"the Burstable parent is kubepods-burstable.slice with systemd", Systemd, corev1.PodQOSBurstable, "/kubepods.slice/kubepods-burstable.slice"},
		{"the BestEffort parent is kubepods-besteffort.slice with systemd", Systemd, corev1.PodQOSBestEffort, "/kubepods.slice/kubepods-besteffort.slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := QOSParent(tt.driver, "/", tt.class)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("QOSParent = %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("kubepods is the Guaranteed parent for both drivers", func(t *testing.T) {
		for _, d := range []Driver{Cgroupfs, Systemd} {
			k, err := Name(d, "/")
			if err != nil {
				t.Fatal(err)
			}
			g, _ := QOSParent(d, "/", corev1.PodQOSGuaranteed)
			if k != g {
				t.Fatalf("%s: Kubepods = %q, Guaranteed parent = %q", d, k, g)
			}
		}
	})
}

func TestNamesRefuseBadInput(t *testing.T) {
	tests := []struct {
		name    string
		driver  Driver
		root    string
		class   corev1.PodQOSClass
		uid     types.UID
		wantErr error
	}{
		{"an unknown driver is unsupported", "cgroupfs2", "/", corev1.PodQOSBurstable, uid, ErrUnknownDriver},
		{"an unknown class is unsupported", Cgroupfs, "/", "Platinum", uid, ErrUnknownClass},
		{"an empty root is malformed", Cgroupfs, "", corev1.PodQOSBurstable, uid, ErrBadComponent},
		{"a root with an underscore is malformed as in NewCgroupName", Cgroupfs, "/a_b", corev1.PodQOSBurstable, uid, ErrBadComponent},
		{"a root with a dot-dot component is malformed", Cgroupfs, "/a/../b", corev1.PodQOSBurstable, uid, ErrBadComponent},
		{"a root with an empty inner component is malformed", Cgroupfs, "/a//b", corev1.PodQOSBurstable, uid, ErrBadComponent},
		{"a relative root is refused by the systemd driver", Systemd, "a", corev1.PodQOSBurstable, uid, ErrBadComponent},
		{"an empty uid is malformed", Cgroupfs, "/", corev1.PodQOSBurstable, "", ErrBadComponent},
		{"a uid with a slash is malformed", Cgroupfs, "/", corev1.PodQOSBurstable, "../../etc", ErrBadComponent},
		{"a uid with an underscore is malformed", Systemd, "/", corev1.PodQOSBurstable, "a_b", ErrBadComponent},
		{"a uid with a newline is malformed", Cgroupfs, "/", corev1.PodQOSBurstable, "a\nb", ErrBadComponent},
		{"an overlong uid is malformed", Cgroupfs, "/", corev1.PodQOSBurstable, types.UID(strings.Repeat("a", 200)), ErrBadComponent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PodParent(tt.driver, tt.root, tt.class, tt.uid)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("PodParent = %q, %v; want error %v", got, err, tt.wantErr)
			}
		})
	}
}

func TestParseDriver(t *testing.T) {
	for _, s := range []string{"cgroupfs", "systemd"} {
		t.Run("the "+s+" driver parses", func(t *testing.T) {
			if d, err := ParseDriver(s); err != nil || string(d) != s {
				t.Fatalf("ParseDriver(%q) = %q, %v", s, d, err)
			}
		})
	}
	t.Run("an unknown driver is refused", func(t *testing.T) {
		if _, err := ParseDriver("Systemd"); !errors.Is(err, ErrUnknownDriver) {
			t.Fatalf("err = %v", err)
		}
	})
}

// FuzzPodParent checks that any root and UID either give a name confined to
// the root's subtree with exactly the expected number of levels, or an error.
func FuzzPodParent(f *testing.F) {
	f.Add("/", "1234-abcd", true)
	f.Add("rel/x", "00ff", false)
	f.Add("/a/../..", "x", true)
	f.Fuzz(func(t *testing.T, root, id string, systemd bool) {
		d := Cgroupfs
		if systemd {
			d = Systemd
		}
		name, err := PodParent(d, root, corev1.PodQOSBurstable, types.UID(id))
		if err != nil {
			return
		}
		for i, c := range strings.Split(name, "/") {
			if (c == "" && i > 0) || c == "." || c == ".." || strings.ContainsAny(c, "\x00\n") {
				t.Fatalf("PodParent(%q, %q, %q) = %q escapes or breaks the path", d, root, id, name)
			}
		}
		if !strings.HasSuffix(name, strings.ReplaceAll(id, "-", map[bool]string{true: "_", false: "-"}[systemd])+map[bool]string{true: ".slice", false: ""}[systemd]) {
			t.Fatalf("PodParent(%q, %q, %q) = %q does not end in the pod", d, root, id, name)
		}
	})
}

func TestSystemdRootsMustMakeValidUnitNames(t *testing.T) {
	for _, c := range []struct {
		name, root string
		ok         bool
	}{
		{"the hierarchy root", "/", true},
		{"a nested root of letters, digits, dots and dashes", "/node.pool-1", true},
		{"a space cannot be in a unit name", "/my pods", false},
		{"an at sign is for templates", "/pods@1", false},
		{"a root whose pod slices would pass 255 bytes", "/" + strings.Repeat("a", 127) + "/" + strings.Repeat("b", 100), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Name(Systemd, c.root)
			if (err == nil) != c.ok {
				t.Errorf("Name(systemd, %q) = %v, want ok %v", c.root, err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrBadComponent) {
				t.Errorf("%v does not match ErrBadComponent", err)
			}
			if _, err := Name(Cgroupfs, c.root); err != nil && c.ok {
				t.Errorf("cgroupfs refuses %q: %v", c.root, err)
			}
		})
	}
}

func TestBeneathPod(t *testing.T) {
	for _, d := range []Driver{Cgroupfs, Systemd} {
		for _, root := range []string{"/", "/node-a"} {
			kube, err := QOSParent(d, root, corev1.PodQOSGuaranteed) // kubepods itself
			if err != nil {
				t.Fatal(err)
			}
			// fromRoot: the path from kubepods on, its own name first.
			fromRoot := func(p string) string { return strings.TrimPrefix(p, strings.TrimSuffix(path.Dir(kube), "/")+"/") }
			for _, class := range []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort} {
				pod, err := PodParent(d, root, class, uid)
				if err != nil {
					t.Fatal(err)
				}
				qos, err := QOSParent(d, root, class)
				if err != nil {
					t.Fatal(err)
				}
				for p, want := range map[string]bool{
					qos:                                false,
					pod:                                false,
					pod + "/cri-containerd-0a1b.scope": true,
					pod + "/0a1b2c3d":                  true,
					pod + "/0a1b2c3d/nested":           true,
					qos + "/not-a-pod/0a1b2c3d":        false,
					qos + "/podnot-a-uid!/0a1b2c3d":    false,
				} {
					if got := BeneathPod(d, fromRoot(p)); got != want {
						t.Errorf("BeneathPod(%v, %q) = %v, want %v", d, fromRoot(p), got, want)
					}
					if got, want := IsPod(d, fromRoot(p)), p == pod; got != want {
						t.Errorf("IsPod(%v, %q) = %v, want %v", d, fromRoot(p), got, want)
					}
				}
			}
		}
	}
}

func TestDriverFor(t *testing.T) {
	for _, c := range []struct {
		configured, runtime string
		want                Driver
		wantErr             bool
	}{
		{configured: "", runtime: "", want: Cgroupfs},                // the runtime does not say: the kubelet's default
		{configured: "", runtime: "systemd", want: Systemd},          // empty follows the runtime
		{configured: "cgroupfs", runtime: "systemd", want: Cgroupfs}, // set wins; the mismatch is refused later
		{configured: "systemd", runtime: "", want: Systemd},
		{configured: "sistemd", wantErr: true},
		{configured: "", runtime: "other", wantErr: true},
	} {
		got, err := DriverFor(c.configured, c.runtime)
		if (err != nil) != c.wantErr || (!c.wantErr && got != c.want) {
			t.Errorf("DriverFor(%q, %q) = %q, %v; want %q (error %v)", c.configured, c.runtime, got, err, c.want, c.wantErr)
		}
	}
}
