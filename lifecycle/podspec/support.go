package podspec

import (
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// NotSupported is the detail of every error about a field nodeguard cannot
// honour.
const NotSupported = "not supported by nodeguard"

// use says what nodeguard does with a field that is set.
type use int

const (
	// honoured fields are validated and acted upon.
	honoured use = iota
	// scheduling fields mean nothing on a node agent, which runs every pod it
	// is given: they are accepted with a warning.
	scheduling
	// serverSet fields are filled in by an API server; manifests copied from
	// "kubectl get -o yaml" carry them. Accepted with a warning.
	serverSet
	// noEffect fields are accepted silently: their values cannot change what
	// nodeguard does (the value checks in Validate refuse the ones that
	// would).
	noEffect
)

// fieldUse lists, per API type, every field nodeguard accepts. A field of a
// listed type that is set but not listed is refused with NotSupported, so
// a field added to k8s.io/api later is refused until someone decides what
// nodeguard does with it: nothing is ignored silently. Fields whose type is
// listed here are checked field by field; other fields are leaves.
var fieldUse = map[reflect.Type]map[string]use{
	reflect.TypeFor[corev1.Pod](): {
		"apiVersion": noEffect, "kind": noEffect, "metadata": honoured, "spec": honoured,
		"status": serverSet,
	},
	reflect.TypeFor[metav1.ObjectMeta](): {
		"name": honoured, "namespace": honoured, "uid": honoured, "labels": honoured, "annotations": honoured,
		"creationTimestamp": serverSet, "resourceVersion": serverSet, "generation": serverSet,
		"selfLink": serverSet, "managedFields": serverSet,
		// What an API server and its controllers keep on the object (a
		// ReplicaSet's pods have all of them); the node has nothing to do
		// with them, as the kubelet.
		"generateName": serverSet, "ownerReferences": serverSet, "finalizers": serverSet,
		"deletionTimestamp": serverSet, "deletionGracePeriodSeconds": serverSet,
	},
	reflect.TypeFor[corev1.PodSpec](): {
		"volumes": honoured, "initContainers": honoured, "containers": honoured,
		"restartPolicy": honoured, "terminationGracePeriodSeconds": honoured,
		"activeDeadlineSeconds": honoured, "hostAliases": honoured,
		"serviceAccountName": honoured, "serviceAccount": honoured,
		"imagePullSecrets": honoured, "nodeSelector": honoured, "tolerations": honoured,
		"dnsPolicy": honoured, "dnsConfig": honoured, "hostname": honoured, "subdomain": honoured,
		"hostNetwork": honoured, "hostPID": honoured, "hostIPC": honoured,
		"securityContext": honoured, "priorityClassName": honoured, "priority": honoured,
		"os": honoured,
		// Only their harmless values pass Validate.
		"hostUsers": honoured, "shareProcessNamespace": honoured,
		"automountServiceAccountToken": honoured, "setHostnameAsFQDN": honoured,
		// There are no Services standalone: no links to inject.
		"enableServiceLinks": noEffect,
		"nodeName":           scheduling, "affinity": scheduling, "schedulerName": scheduling,
		"topologySpreadConstraints": scheduling, "schedulingGates": scheduling,
		"preemptionPolicy": scheduling,
	},
	reflect.TypeFor[corev1.PodSecurityContext](): {
		"runAsUser": honoured, "runAsGroup": honoured, "runAsNonRoot": honoured,
		"supplementalGroups": honoured, "sysctls": honoured, "seccompProfile": honoured,
		"appArmorProfile": honoured, "fsGroup": honoured, "fsGroupChangePolicy": honoured,
		// Strict passes Validate where the runtime reports the feature.
		"supplementalGroupsPolicy": honoured,
	},
	reflect.TypeFor[corev1.Sysctl]():          {"name": honoured, "value": honoured},
	reflect.TypeFor[corev1.SeccompProfile]():  {"type": honoured, "localhostProfile": honoured},
	reflect.TypeFor[corev1.AppArmorProfile](): {"type": honoured, "localhostProfile": honoured},
	reflect.TypeFor[corev1.PodOS]():           {"name": honoured},
	reflect.TypeFor[corev1.PodDNSConfig](): {
		"nameservers": honoured, "searches": honoured, "options": honoured,
	},
	reflect.TypeFor[corev1.Container](): {
		"name": honoured, "image": honoured, "command": honoured, "args": honoured,
		"workingDir": honoured, "ports": honoured, "env": honoured, "envFrom": honoured, "resources": honoured,
		"volumeMounts": honoured, "volumeDevices": honoured, "securityContext": honoured, "imagePullPolicy": honoured,
		// Only their defaults pass Validate.
		"terminationMessagePath": honoured, "terminationMessagePolicy": honoured,
		"livenessProbe": honoured, "readinessProbe": honoured, "startupProbe": honoured,
		"lifecycle": honoured,
		// Only Always on an init container (a sidecar) passes Validate.
		"restartPolicy": honoured,
		// For `nodeguard pod attach` (lifecycle/api).
		"stdin": honoured, "stdinOnce": honoured, "tty": honoured,
	},
	reflect.TypeFor[corev1.Lifecycle](): {"postStart": honoured, "preStop": honoured},
	reflect.TypeFor[corev1.LifecycleHandler](): {
		"exec": honoured, "httpGet": honoured, "sleep": honoured,
		// tcpSocket: accepted with a warning, and fails when it runs, as
		// the kubelet's.
		"tcpSocket": honoured,
	},
	reflect.TypeFor[corev1.SleepAction](): {"seconds": honoured},
	reflect.TypeFor[corev1.Probe](): {
		"exec": honoured, "httpGet": honoured, "tcpSocket": honoured, "grpc": honoured,
		"initialDelaySeconds": honoured, "timeoutSeconds": honoured, "periodSeconds": honoured,
		"successThreshold": honoured, "failureThreshold": honoured, "terminationGracePeriodSeconds": honoured,
	},
	reflect.TypeFor[corev1.ExecAction]():      {"command": honoured},
	reflect.TypeFor[corev1.HTTPGetAction]():   {"path": honoured, "port": honoured, "host": honoured, "scheme": honoured, "httpHeaders": honoured},
	reflect.TypeFor[corev1.HTTPHeader]():      {"name": honoured, "value": honoured},
	reflect.TypeFor[corev1.TCPSocketAction](): {"port": honoured, "host": honoured},
	reflect.TypeFor[corev1.GRPCAction]():      {"port": honoured, "service": honoured},
	reflect.TypeFor[corev1.ContainerPort](): {
		"name": honoured, "containerPort": honoured, "hostPort": honoured, "protocol": honoured, "hostIP": honoured,
	},
	reflect.TypeFor[corev1.EnvVar](): {"name": honoured, "value": honoured, "valueFrom": honoured},
	reflect.TypeFor[corev1.EnvVarSource](): {
		"fieldRef": honoured, "resourceFieldRef": honoured, "configMapKeyRef": honoured, "secretKeyRef": honoured,
	},
	reflect.TypeFor[corev1.EnvFromSource]():         {"prefix": honoured, "configMapRef": honoured, "secretRef": honoured},
	reflect.TypeFor[corev1.ConfigMapEnvSource]():    {"name": honoured, "optional": honoured},
	reflect.TypeFor[corev1.SecretEnvSource]():       {"name": honoured, "optional": honoured},
	reflect.TypeFor[corev1.ConfigMapKeySelector]():  {"name": honoured, "key": honoured, "optional": honoured},
	reflect.TypeFor[corev1.SecretKeySelector]():     {"name": honoured, "key": honoured, "optional": honoured},
	reflect.TypeFor[corev1.ResourceFieldSelector](): {"containerName": honoured, "resource": honoured, "divisor": honoured},
	reflect.TypeFor[corev1.ResourceRequirements]():  {"limits": honoured, "requests": honoured},
	reflect.TypeFor[corev1.SecurityContext](): {
		"runAsUser": honoured, "runAsGroup": honoured, "privileged": honoured,
		"readOnlyRootFilesystem": honoured, "capabilities": honoured,
		"allowPrivilegeEscalation": honoured, "runAsNonRoot": honoured,
		"seccompProfile": honoured, "appArmorProfile": honoured,
		// Only "Default" passes Validate.
		"procMount": honoured,
	},
	reflect.TypeFor[corev1.VolumeMount](): {
		"name": honoured, "readOnly": honoured, "mountPath": honoured, "subPath": honoured,
		// recursiveReadOnly: only "Disabled" passes Validate.
		"mountPropagation": honoured, "recursiveReadOnly": honoured,
	},
	reflect.TypeFor[corev1.Volume](): {
		"name": honoured, "hostPath": honoured, "emptyDir": honoured, "configMap": honoured,
		"secret": honoured, "projected": honoured, "downwardAPI": honoured, "nfs": honoured,
		// Standalone, the claim and its volume come from the node's
		// source directory (mounts.Volumes.Claim).
		"persistentVolumeClaim": honoured,
		// Mounted by the runtime (CRI Mount.image): Validate refuses it
		// where the runtime cannot (Options.ImageVolumes).
		"image": honoured,
	},
	reflect.TypeFor[corev1.ImageVolumeSource]():                 {"reference": honoured, "pullPolicy": honoured},
	reflect.TypeFor[corev1.NFSVolumeSource]():                   {"server": honoured, "path": honoured, "readOnly": honoured},
	reflect.TypeFor[corev1.PersistentVolumeClaimVolumeSource](): {"claimName": honoured, "readOnly": honoured},
	reflect.TypeFor[corev1.VolumeDevice]():                      {"name": honoured, "devicePath": honoured},
	reflect.TypeFor[corev1.EmptyDirVolumeSource]():              {"medium": honoured, "sizeLimit": honoured},
	reflect.TypeFor[corev1.HostPathVolumeSource]():              {"path": honoured, "type": honoured},
	reflect.TypeFor[corev1.ConfigMapVolumeSource](): {
		"name": honoured, "items": honoured, "defaultMode": honoured, "optional": honoured,
	},
	reflect.TypeFor[corev1.SecretVolumeSource](): {
		"secretName": honoured, "items": honoured, "defaultMode": honoured, "optional": honoured,
	},
	reflect.TypeFor[corev1.ProjectedVolumeSource]():   {"sources": honoured, "defaultMode": honoured},
	reflect.TypeFor[corev1.VolumeProjection]():        {"configMap": honoured, "secret": honoured, "downwardAPI": honoured},
	reflect.TypeFor[corev1.ConfigMapProjection]():     {"name": honoured, "items": honoured, "optional": honoured},
	reflect.TypeFor[corev1.SecretProjection]():        {"name": honoured, "items": honoured, "optional": honoured},
	reflect.TypeFor[corev1.DownwardAPIProjection]():   {"items": honoured},
	reflect.TypeFor[corev1.DownwardAPIVolumeSource](): {"items": honoured, "defaultMode": honoured},
	reflect.TypeFor[corev1.DownwardAPIVolumeFile]():   {"path": honoured, "fieldRef": honoured, "resourceFieldRef": honoured, "mode": honoured},
	reflect.TypeFor[corev1.KeyToPath]():               {"key": honoured, "path": honoured, "mode": honoured},
}

// refusedWhy says why nodeguard refuses a field it does not list in
// fieldUse: the error names what is missing (a plugin, a control plane, a
// feature). A field without an entry is refused with NotSupported alone.
var refusedWhy = map[reflect.Type]map[string]string{
	reflect.TypeFor[corev1.PodSpec](): {
		"ephemeralContainers": "ephemeral containers are added through a control plane's pods/ephemeralcontainers subresource, which nodeguard's API has not",
		"readinessGates":      "readiness gates wait for conditions that controllers set through a control plane",
		"runtimeClassName":    "a RuntimeClass is a control plane's object, and nodeguard configures no runtime handlers",
		"overhead":            "set by a control plane's RuntimeClass admission plugin, which nodeguard has not",
		"resourceClaims":      "dynamic resource allocation needs a control plane's ResourceClaims and a DRA driver",
		"resources":           "nodeguard sizes pod cgroups from the containers' resources only (no PodLevelResources feature): set resources per container",
		"hostnameOverride":    "nodeguard has no HostnameOverride feature: use hostname",
		"schedulingGroup":     "scheduling groups need a control plane's scheduler",
		"evictionResponders":  "eviction requests are a control plane's API",
	},
	// Container fields other helpers' items decide on (probes, envFrom,
	// the security context) are not listed here.
	reflect.TypeFor[corev1.Container](): {
		"resizePolicy": "in-place resize goes through a control plane's pods/resize subresource",
	},
	reflect.TypeFor[corev1.Lifecycle](): {
		"stopSignal": "nodeguard has no ContainerStopSignals feature: the runtime sends the image's STOPSIGNAL (SIGTERM by default)",
	},
	reflect.TypeFor[corev1.VolumeSource](): volumeSourcesRefused(),
	reflect.TypeFor[corev1.VolumeProjection](): {
		"serviceAccountToken": "service account tokens are issued by a control plane, and there is none",
		"clusterTrustBundle":  "ClusterTrustBundles are a control plane's objects",
		"podCertificate":      "pod certificates are issued through a control plane",
	},
}

// volumeSourcesRefused says why each volume type nodeguard does not mount
// is refused: the ones a control plane provides, and the in-tree plugins
// nodeguard has not.
func volumeSourcesRefused() map[string]string {
	why := map[string]string{
		"ephemeral": "a generic ephemeral volume is a PersistentVolumeClaim that a control plane's ephemeral volume controller makes and a provisioner binds; standalone, write the claim and its PersistentVolume in the source directory and use persistentVolumeClaim",
		"csi":       "CSI drivers register with a kubelet's CSI volume plugin, which nodeguard has not",
		"gitRepo":   "gitRepo is deprecated and off in Kubernetes: clone in an init container into an emptyDir",
	}
	for _, plugin := range []string{
		"gcePersistentDisk", "awsElasticBlockStore", "iscsi", "glusterfs", "rbd", "flexVolume",
		"cinder", "cephfs", "flocker", "fc", "azureFile", "vsphereVolume", "quobyte", "azureDisk",
		"photonPersistentDisk", "portworxVolume", "scaleIO", "storageos",
	} {
		why[plugin] = "the " + plugin + " volume plugin, which nodeguard has not: mount it on the node and use a hostPath"
	}
	return why
}

// checkSupport walks the pod and returns a warning for every scheduling or
// server-set field that is set and a Forbidden error for every set field
// nodeguard does not know what to do with.
func checkSupport(p *corev1.Pod) (warnings []string, errs field.ErrorList) {
	walkSupport(reflect.ValueOf(p).Elem(), nil, &warnings, &errs)
	return warnings, errs
}

func walkSupport(v reflect.Value, p *field.Path, warnings *[]string, errs *field.ErrorList) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkSupport(v.Elem(), p, warnings, errs)
		}
		return
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			walkSupport(v.Index(i), p.Index(i), warnings, errs)
		}
		return
	case reflect.Struct:
	default:
		return
	}
	uses, ok := fieldUse[v.Type()]
	if !ok {
		return // a leaf type, validated as a whole
	}
	walkFields(v, uses, p, warnings, errs)
}

// walkFields checks the set fields of struct v against uses; fields of an
// inlined embedded struct (TypeMeta, VolumeSource) count as v's own.
func walkFields(v reflect.Value, uses map[string]use, p *field.Path, warnings *[]string, errs *field.ErrorList) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		fv := v.Field(i)
		if fv.IsZero() || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && fv.Kind() == reflect.Struct {
			walkFields(fv, uses, p, warnings, errs)
			continue
		}
		fp := child(p, name)
		u, ok := uses[name]
		switch {
		case !ok:
			msg := NotSupported
			if why, ok := refusedWhy[t][name]; ok {
				msg += ": " + why
			}
			*errs = append(*errs, field.Forbidden(fp, msg))
		case u == scheduling:
			*warnings = append(*warnings, fp.String()+": ignored: nodeguard does no scheduling, it runs every pod it is given")
		case u == serverSet:
			*warnings = append(*warnings, fp.String()+": ignored: set by an API server, not read from manifests")
		case u == honoured:
			walkSupport(fv, fp, warnings, errs)
		}
	}
}
