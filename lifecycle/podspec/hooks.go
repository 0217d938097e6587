package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateLifecycle is validateLifecycle of pkg/apis/core/validation:
// each hook has exactly one handler, a valid exec command, httpGet or
// tcpSocket port, and a sleep of 0 to the pod's
// terminationGracePeriodSeconds (gracePeriod; nil when it is itself
// invalid, reported elsewhere). As for probes, a named port must name one
// of the container's ports.
func validateLifecycle(c *corev1.Container, gracePeriod *int64, cp *field.Path) field.ErrorList {
	l := c.Lifecycle
	if l == nil {
		return nil
	}
	lp := cp.Child("lifecycle")
	var errs field.ErrorList
	if l.PostStart != nil {
		errs = append(errs, validateHandler(l.PostStart, c, gracePeriod, lp.Child("postStart"))...)
	}
	if l.PreStop != nil {
		errs = append(errs, validateHandler(l.PreStop, c, gracePeriod, lp.Child("preStop"))...)
	}
	return errs
}

func validateHandler(h *corev1.LifecycleHandler, c *corev1.Container, gracePeriod *int64, hp *field.Path) field.ErrorList {
	var errs field.ErrorList
	handlers := 0
	one := func(name string) bool {
		if handlers > 0 {
			errs = append(errs, field.Forbidden(hp.Child(name), "may not specify more than 1 handler type"))
			return false
		}
		handlers++
		return true
	}
	if h.Exec != nil && one("exec") && len(h.Exec.Command) == 0 {
		errs = append(errs, field.Required(hp.Child("exec", "command"), ""))
	}
	if g := h.HTTPGet; g != nil && one("httpGet") {
		gp := hp.Child("httpGet")
		errs = append(errs, validateProbePort(g.Port, c, gp.Child("port"))...)
		if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP && g.Scheme != corev1.URISchemeHTTPS {
			errs = append(errs, field.NotSupported(gp.Child("scheme"), g.Scheme, []string{"HTTP", "HTTPS"}))
		}
		if g.Host != "" {
			errs = append(errs, validation.IsValidIP(gp.Child("host"), g.Host)...)
		}
		for i, hd := range g.HTTPHeaders {
			if !validHeaderName(hd.Name) {
				errs = append(errs, field.Invalid(gp.Child("httpHeaders").Index(i).Child("name"), hd.Name, "a valid HTTP header must consist of alphanumeric characters, '-', '_' or '.'"))
			}
		}
	}
	if t := h.TCPSocket; t != nil && one("tcpSocket") {
		errs = append(errs, validateProbePort(t.Port, c, hp.Child("tcpSocket", "port"))...)
	}
	if s := h.Sleep; s != nil && one("sleep") && gracePeriod != nil && (s.Seconds < 0 || s.Seconds > *gracePeriod) {
		errs = append(errs, field.Invalid(hp.Child("sleep"), s.Seconds,
			fmt.Sprintf("must be non-negative and less than terminationGracePeriodSeconds (%d)", *gracePeriod)))
	}
	if handlers == 0 {
		errs = append(errs, field.Required(hp, "must specify a handler type"))
	}
	return errs
}

// noInitLifecycle refuses hooks on an init container that is not a
// sidecar (restartPolicy Always), as Kubernetes does: it runs to
// completion, there is nothing to hook.
func noInitLifecycle(c *corev1.Container, cp *field.Path) field.ErrorList {
	if c.Lifecycle == nil || (c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways) {
		return nil
	}
	return field.ErrorList{field.Forbidden(cp.Child("lifecycle"), "may not be set for init containers without restartPolicy=Always")}
}

// lifecycleWarnings warns of tcpSocket hooks: the API server accepts them
// for compatibility, and the kubelet fails them when they run (a postStart
// kills its container).
func lifecycleWarnings(s *corev1.PodSpec) []string {
	var out []string
	for _, list := range []struct {
		cs   []corev1.Container
		name string
	}{{s.InitContainers, "initContainers"}, {s.Containers, "containers"}} {
		for i, c := range list.cs {
			if c.Lifecycle == nil {
				continue
			}
			for _, h := range []struct {
				h    *corev1.LifecycleHandler
				name string
			}{{c.Lifecycle.PostStart, "postStart"}, {c.Lifecycle.PreStop, "preStop"}} {
				if h.h != nil && h.h.TCPSocket != nil {
					out = append(out, fmt.Sprintf("spec.%s[%d].lifecycle.%s.tcpSocket: deprecated and not run: the hook fails when it runs, as the kubelet's (use exec, httpGet or sleep)",
						list.name, i, h.name))
				}
			}
		}
	}
	return out
}
