//go:build !nodelane

package nodelane

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func laneKubeletValues() KubeletValues {
	return KubeletValues{RuntimeEndpoint: RuntimeEndpoint, StaticPodPath: "/etc/kubernetes/manifests", Port: 41000,
		ServingCert: "/c/serving.crt", ServingKey: "/c/serving.key", ClientCA: "/c/ca.crt"}
}

func TestKubeletConfigRendersTheLanesLayout(t *testing.T) {
	v := laneKubeletValues()
	b, err := KubeletConfig(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	for key, want := range map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
		"cgroupDriver": "systemd", "cgroupRoot": "/", "containerRuntimeEndpoint": RuntimeEndpoint,
		"staticPodPath": "/etc/kubernetes/manifests", "registerNode": true, "port": float64(41000), "readOnlyPort": float64(0),
		"tlsCertFile": "/c/serving.crt", "tlsPrivateKeyFile": "/c/serving.key", "resolvConf": "",
	} {
		if got := m[key]; got != want {
			t.Errorf("%s: %#v, want %#v", key, got, want)
		}
	}
	if _, ok := m["failSwapOn"]; ok {
		t.Errorf("failSwapOn is set (%v): the kubelet's default is meant", m["failSwapOn"])
	}
	// Read back as /configz reports it: the same type, JSON.
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	cz, err := ParseConfigz([]byte(`{"kubeletconfig":` + string(js) + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if ms := ConfigzMismatches(cz, v); len(ms) > 0 {
		t.Errorf("the rendered configuration, read back, differs: %q", ms)
	}
	if cz.Authentication.X509.ClientCAFile != "/c/ca.crt" || *cz.Authentication.Webhook.Enabled != true {
		t.Errorf("authentication %+v", cz.Authentication)
	}
	// The shared default is not handed out.
	cz.EvictionHard["memory.available"] = "1Gi"
	if KubeletEvictionHard["memory.available"] != "100Mi" {
		t.Error("KubeletConfig shares KubeletEvictionHard's map")
	}
}

func TestKubeletConfigRefusesMissingValues(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*KubeletValues)
	}{
		{"no runtime endpoint", func(v *KubeletValues) { v.RuntimeEndpoint = "" }},
		{"no static pod path", func(v *KubeletValues) { v.StaticPodPath = "" }},
		{"no serving key", func(v *KubeletValues) { v.ServingKey = "" }},
		{"no client CA", func(v *KubeletValues) { v.ClientCA = "" }},
		{"port zero", func(v *KubeletValues) { v.Port = 0 }},
		{"port out of range", func(v *KubeletValues) { v.Port = 70000 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := laneKubeletValues()
			tt.edit(&v)
			if _, err := KubeletConfig(v); !errors.Is(err, ErrKubeletValues) {
				t.Errorf("KubeletConfig = %v, want ErrKubeletValues", err)
			}
		})
	}
}

// A /configz answer as the kubelet v1.37 gives it (shortened): the
// configuration in effect, defaults filled in.
const configzFixture = `{"kubeletconfig":{"enableServer":true,"staticPodPath":"/etc/kubernetes/manifests","port":41000,"readOnlyPort":0,
"tlsCertFile":"/c/serving.crt","tlsPrivateKeyFile":"/c/serving.key","authentication":{"x509":{"clientCAFile":"/c/ca.crt"},
"webhook":{"enabled":true,"cacheTTL":"2m0s"},"anonymous":{"enabled":false}},"authorization":{"mode":"Webhook",
"webhook":{"cacheAuthorizedTTL":"5m0s","cacheUnauthorizedTTL":"30s"}},"cgroupRoot":"/","cgroupsPerQOS":true,"cgroupDriver":"systemd",
"evictionHard":{"imagefs.available":"15%","imagefs.inodesFree":"5%","memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"},
"failSwapOn":true,"registerNode":true,"containerRuntimeEndpoint":"unix:///run/containerd/containerd.sock"}}`

func TestParseConfigz(t *testing.T) {
	cz, err := ParseConfigz([]byte(configzFixture))
	if err != nil {
		t.Fatal(err)
	}
	if ms := ConfigzMismatches(cz, laneKubeletValues()); len(ms) > 0 {
		t.Errorf("mismatches %q", ms)
	}
	// A kubelet that runs otherwise is told apart, one line per field.
	other := strings.NewReplacer(`"cgroupDriver":"systemd"`, `"cgroupDriver":"cgroupfs"`, `"memory.available":"100Mi"`, `"memory.available":"200Mi"`,
		`"mode":"Webhook"`, `"mode":"AlwaysAllow"`).Replace(configzFixture)
	cz, err = ParseConfigz([]byte(other))
	if err != nil {
		t.Fatal(err)
	}
	ms := ConfigzMismatches(cz, laneKubeletValues())
	if len(ms) != 3 || !strings.Contains(strings.Join(ms, "|"), "cgroupDriver cgroupfs, want systemd") {
		t.Errorf("mismatches %q, want 3 (cgroupDriver, evictionHard memory.available, authorization.mode)", ms)
	}
	for _, bad := range []string{``, `{`, `{"other":{}}`, `[]`} {
		if _, err := ParseConfigz([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseConfigz(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestCheckNodeAddresses(t *testing.T) {
	a := func(typ corev1.NodeAddressType, s string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: typ, Address: s}
	}
	for _, tt := range []struct {
		name  string
		addrs []corev1.NodeAddress
		ok    bool
	}{
		{"the lane's addresses", GuestAddresses("nodelane"), true},
		{"the guest's own address, which the host would route out", []corev1.NodeAddress{a(corev1.NodeInternalIP, "10.0.2.15"), a(corev1.NodeHostName, "nodelane")}, false},
		{"a loopback InternalIP and an ExternalIP elsewhere", []corev1.NodeAddress{a(corev1.NodeInternalIP, "127.0.0.1"), a(corev1.NodeExternalIP, "192.0.2.7")}, false},
		{"a hostname only, as an external cloud provider's kubelet registers", []corev1.NodeAddress{a(corev1.NodeHostName, "nodelane")}, false},
		{"no addresses", nil, false},
		{"a malformed InternalIP", []corev1.NodeAddress{a(corev1.NodeInternalIP, "localhost")}, false},
		{"IPv6 loopback", []corev1.NodeAddress{a(corev1.NodeInternalIP, "::1")}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := CheckNodeAddresses(tt.addrs); (err == nil) != tt.ok {
				t.Errorf("CheckNodeAddresses(%v) = %v, want ok %v", tt.addrs, err, tt.ok)
			}
		})
	}
}

func TestAddressesPatch(t *testing.T) {
	p, err := AddressesPatch(GuestAddresses("nodelane"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status corev1.NodeStatus `json:"status"`
	}
	if err := json.Unmarshal([]byte(p), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Status.Addresses) != 2 || v.Status.Addresses[0].Address != "127.0.0.1" || v.Status.Addresses[1].Type != corev1.NodeHostName {
		t.Errorf("patch %s", p)
	}
}

func TestKubeletArgs(t *testing.T) {
	args := strings.Join(KubeletArgs("/var/lib/kubelet/config.yaml", "/p/node.kubeconfig", "nodelane"), " ")
	for _, want := range []string{"--config=/var/lib/kubelet/config.yaml", "--kubeconfig=/p/node.kubeconfig", "--hostname-override=nodelane", "--cloud-provider=external"} {
		if !strings.Contains(args, want) {
			t.Errorf("kubelet args %q lack %s", args, want)
		}
	}
	if strings.Contains(args, "--node-ip") {
		t.Errorf("kubelet args %q set --node-ip: the kubelet refuses a loopback one, and any other would be dialled from the host", args)
	}
}
