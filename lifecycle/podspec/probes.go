package podspec

import (
	"net/http"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateProbes is validateProbe of pkg/apis/core/validation for a
// container's three probes. A named port must name one of the
// container's ports (Kubernetes finds out only when probing).
func validateProbes(c *corev1.Container, cp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, p := range []struct {
		probe     *corev1.Probe
		name      string
		readiness bool
	}{
		{c.LivenessProbe, "livenessProbe", false},
		{c.ReadinessProbe, "readinessProbe", true},
		{c.StartupProbe, "startupProbe", false},
	} {
		if p.probe != nil {
			errs = append(errs, validateProbe(p.probe, c, p.readiness, cp.Child(p.name))...)
		}
	}
	return errs
}

func validateProbe(p *corev1.Probe, c *corev1.Container, readiness bool, pp *field.Path) field.ErrorList {
	var errs field.ErrorList
	handlers := 0
	for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
		if set {
			handlers++
		}
	}
	switch {
	case handlers == 0:
		errs = append(errs, field.Required(pp, "must specify a handler type"))
	case handlers > 1:
		errs = append(errs, field.Forbidden(pp, "may not specify more than 1 handler type"))
	}
	for _, v := range []struct {
		name string
		val  int32
	}{
		{"initialDelaySeconds", p.InitialDelaySeconds}, {"timeoutSeconds", p.TimeoutSeconds},
		{"periodSeconds", p.PeriodSeconds}, {"successThreshold", p.SuccessThreshold},
		{"failureThreshold", p.FailureThreshold},
	} {
		if v.val < 0 {
			errs = append(errs, field.Invalid(pp.Child(v.name), v.val, "must be greater than or equal to 0"))
		}
	}
	if !readiness && p.SuccessThreshold > 1 {
		errs = append(errs, field.Invalid(pp.Child("successThreshold"), p.SuccessThreshold, "must be 1"))
	}
	if g := p.TerminationGracePeriodSeconds; g != nil {
		switch {
		case readiness:
			errs = append(errs, field.Invalid(pp.Child("terminationGracePeriodSeconds"), *g, "must not be set for readinessProbes"))
		case *g <= 0:
			errs = append(errs, field.Invalid(pp.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
		}
	}
	if p.Exec != nil && len(p.Exec.Command) == 0 {
		errs = append(errs, field.Required(pp.Child("exec", "command"), ""))
	}
	if h := p.HTTPGet; h != nil {
		hp := pp.Child("httpGet")
		errs = append(errs, validateProbePort(h.Port, c, hp.Child("port"))...)
		if h.Scheme != "" && h.Scheme != corev1.URISchemeHTTP && h.Scheme != corev1.URISchemeHTTPS {
			errs = append(errs, field.NotSupported(hp.Child("scheme"), h.Scheme, []string{"HTTP", "HTTPS"}))
		}
		if h.Host != "" {
			errs = append(errs, validation.IsValidIP(hp.Child("host"), h.Host)...)
		}
		for i, hd := range h.HTTPHeaders {
			if !validHeaderName(hd.Name) {
				errs = append(errs, field.Invalid(hp.Child("httpHeaders").Index(i).Child("name"), hd.Name, "a valid HTTP header must consist of alphanumeric characters, '-', '_' or '.'"))
			}
		}
	}
	if t := p.TCPSocket; t != nil {
		tp := pp.Child("tcpSocket")
		errs = append(errs, validateProbePort(t.Port, c, tp.Child("port"))...)
		if t.Host != "" {
			errs = append(errs, validation.IsValidIP(tp.Child("host"), t.Host)...)
		}
	}
	if g := p.GRPC; g != nil {
		// As Kubernetes' validateGRPCAction: the port is a number (no
		// names here), the service any string ("" is the server's
		// overall health).
		for _, msg := range validation.IsValidPortNum(int(g.Port)) {
			errs = append(errs, field.Invalid(pp.Child("grpc", "port"), g.Port, msg))
		}
	}
	return errs
}

// noInitProbes refuses probes on an init container, as Kubernetes does
// for those that are not sidecars: it runs to completion, nothing waits
// for it to be ready.
func noInitProbes(c *corev1.Container, cp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, p := range []struct {
		name string
		set  bool
	}{{"livenessProbe", c.LivenessProbe != nil}, {"readinessProbe", c.ReadinessProbe != nil}, {"startupProbe", c.StartupProbe != nil}} {
		if p.set {
			errs = append(errs, field.Forbidden(cp.Child(p.name), "may not be set for init containers"))
		}
	}
	return errs
}

// validateProbePort: a number in range or the name of one of c's ports.
func validateProbePort(port intstr.IntOrString, c *corev1.Container, fp *field.Path) field.ErrorList {
	if port.Type == intstr.Int {
		var errs field.ErrorList
		for _, msg := range validation.IsValidPortNum(int(port.IntVal)) {
			errs = append(errs, field.Invalid(fp, port.IntVal, msg))
		}
		return errs
	}
	if msgs := validation.IsValidPortName(port.StrVal); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fp, port.StrVal, strings.Join(msgs, "; "))}
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return nil
		}
	}
	return field.ErrorList{field.Invalid(fp, port.StrVal, "must name one of the container's ports")}
}

// validHeaderName is Kubernetes' check of a probe header's name (an HTTP
// token; net/http would refuse anything else when probing).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		ok := r == '-' || r == '_' || r == '.' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return http.CanonicalHeaderKey(name) != ""
}
