// The OOM race through the API server (RunKubeEviction): the pods are a
// node's, run by whoever owns that node (the kubelet, or nodeguard in
// node mode), created with client-go, the hog as a Deployment of one
// replica so that its controller's replacement can be seen.

package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Labels of the race's objects in the API.
const (
	// LabelRace marks every pod and Deployment the race makes.
	LabelRace = "bench.nodeguard.io/race"
	// LabelHog names the hog Deployment a pod belongs to.
	LabelHog = "bench.nodeguard.io/hog"
)

// apiGracePeriod is the grace the race's pods get through the API server.
// The in-process pods have 0, which the API server would take as "delete
// now" (no graceful deletion, the kubelet left to clean up an orphan); 1 s
// lets the node's owner stop the containers itself, as it would a user's.
const apiGracePeriod = int64(1)

// memoryPressureToleration lets the race's pods be admitted while the
// node has MemoryPressure: the kubelet (and nodeguard, as it) refuses new
// BestEffort pods under memory pressure unless they tolerate this taint,
// and keeps the pressure for evictionPressureTransitionPeriod (5 min)
// after every eviction, so the next trial's BestEffort hog would be
// refused.
var memoryPressureToleration = corev1.Toleration{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// KubePods is EvictionPods through the API server: pods bound to Node
// (spec.nodeName: no scheduler in between, its taints do not apply),
// listed with a spec.nodeName field selector.
type KubePods struct {
	Client kubernetes.Interface
	Node   string
	// Poll is how often Wait asks for the pod (default 100 ms).
	Poll time.Duration
}

// prepare is p as the race sends it: bound to the node, tolerating memory
// pressure, no service account token, images never pulled, the API
// grace period.
func (k *KubePods) prepare(p *corev1.Pod) *corev1.Pod {
	p = p.DeepCopy()
	p.ResourceVersion, p.UID = "", ""
	p.Status = corev1.PodStatus{}
	p.Labels = maps.Clone(p.Labels)
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[LabelRace] = "true"
	k.prepareSpec(&p.Spec)
	return p
}

func (k *KubePods) prepareSpec(s *corev1.PodSpec) {
	s.NodeName = k.Node
	s.Tolerations = append(s.Tolerations, memoryPressureToleration)
	no, grace := false, apiGracePeriod
	s.AutomountServiceAccountToken = &no
	s.TerminationGracePeriodSeconds = &grace
	for i := range s.Containers {
		s.Containers[i].ImagePullPolicy = corev1.PullIfNotPresent
	}
}

// Apply implements EvictionPods: each pod is created (an existing one is
// an error), bound to the node.
func (k *KubePods) Apply(ctx context.Context, pods []*corev1.Pod, _ string) ([]*corev1.Pod, error) {
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		c, err := k.Client.CoreV1().Pods(p.Namespace).Create(ctx, k.prepare(p), metav1.CreateOptions{})
		if err != nil {
			return out, fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Delete implements EvictionPods (an error matching apierrors.IsNotFound
// when there is no such pod).
func (k *KubePods) Delete(ctx context.Context, namespace, name string) error {
	grace := apiGracePeriod
	if err := k.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

// List implements EvictionPods: every pod bound to the node.
func (k *KubePods) List(ctx context.Context) ([]*corev1.Pod, error) {
	l, err := k.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", k.Node).String()})
	if err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", k.Node, err)
	}
	out := make([]*corev1.Pod, 0, len(l.Items))
	for i := range l.Items {
		if l.Items[i].Spec.NodeName == k.Node { // as selected (a fake client ignores the selector)
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}

func (k *KubePods) poll() time.Duration {
	if k.Poll > 0 {
		return k.Poll
	}
	return 100 * time.Millisecond
}

// Wait implements EvictionPods: it polls the pod until pred holds (ok is
// false once the pod is gone from the API).
func (k *KubePods) Wait(ctx context.Context, namespace, name string, pred func(*corev1.Pod, bool) bool) error {
	for {
		p, err := k.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if pred(nil, false) {
				return nil
			}
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
		case pred(p, true):
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// EnsureNamespace creates ns unless it exists and waits (up to bound) for
// its default ServiceAccount, without which the API server refuses pods.
func (k *KubePods) EnsureNamespace(ctx context.Context, ns string, bound time.Duration) error {
	_, err := k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	deadline := time.Now().Add(bound)
	for {
		_, err := k.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s has no default ServiceAccount after %v (the controller-manager makes it): %w", ns, bound, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// hogDeployment is the hog pod as the template of a Deployment of one
// replica called name: restartPolicy Always (a Deployment's only one),
// so a hog the kernel OOM-kills is restarted in its pod, while an evicted
// one is Failed and replaced by a new pod.
func (k *KubePods) hogDeployment(hog *corev1.Pod) *appsv1.Deployment {
	one := int32(1)
	lbl := map[string]string{LabelRace: "true", LabelHog: hog.Name}
	spec := hog.Spec.DeepCopy()
	spec.RestartPolicy = corev1.RestartPolicyAlways
	k.prepareSpec(spec)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: hog.Name, Namespace: hog.Namespace, Labels: lbl},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: *spec},
		},
	}
}

// hogSelector selects the pods of the hog Deployment name.
func hogSelector(name string) string {
	return labels.SelectorFromSet(labels.Set{LabelHog: name}).String()
}

// HogPods lists the pods of the hog Deployment name, as the API has them.
func (k *KubePods) HogPods(ctx context.Context, namespace, name string) ([]corev1.Pod, error) {
	l, err := k.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: hogSelector(name)})
	if err != nil {
		return nil, fmt.Errorf("list the pods of hog %s/%s: %w", namespace, name, err)
	}
	return l.Items, nil
}

// StartHog creates hog as a Deployment of one replica and returns its
// first pod once the ReplicaSet made it (within bound).
func (k *KubePods) StartHog(ctx context.Context, hog *corev1.Pod, bound time.Duration) (*corev1.Pod, error) {
	d := k.hogDeployment(hog)
	if _, err := k.Client.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create hog deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	deadline := time.Now().Add(bound)
	for {
		pods, err := k.HogPods(ctx, d.Namespace, d.Name)
		if err != nil {
			return nil, err
		}
		if len(pods) > 0 {
			return &pods[0], nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hog deployment %s/%s: no pod after %v", d.Namespace, d.Name, bound)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// WaitReplacement waits (up to bound) until a pod of the hog Deployment
// other than old has a running container, and returns when it was seen.
func (k *KubePods) WaitReplacement(ctx context.Context, namespace, name, old string, bound time.Duration) (time.Time, error) {
	deadline := time.Now().Add(bound)
	for {
		pods, err := k.HogPods(ctx, namespace, name)
		if err != nil {
			return time.Time{}, err
		}
		for _, p := range pods {
			if string(p.UID) == old || p.DeletionTimestamp != nil {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil {
					return time.Now(), nil
				}
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("hog %s/%s: no replacement running after %v (%d pods)", namespace, name, bound, len(pods))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// StopHog deletes the hog Deployment and every pod of it, and waits (up
// to bound) until none is left in the API: its Failed (evicted) pods
// would otherwise stay until the garbage collector takes them.
func (k *KubePods) StopHog(ctx context.Context, namespace, name string, bound time.Duration) error {
	bg := metav1.DeletePropagationBackground
	err := k.Client.AppsV1().Deployments(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete hog deployment %s/%s: %w", namespace, name, err)
	}
	deadline := time.Now().Add(bound)
	for {
		pods, err := k.HogPods(ctx, namespace, name)
		if err != nil {
			return err
		}
		if len(pods) == 0 {
			return nil
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				if err := k.Delete(ctx, p.Namespace, p.Name); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
		}
		if time.Now().After(deadline) {
			var left []string
			for _, p := range pods {
				left = append(left, p.Name+" "+string(p.Status.Phase))
			}
			return fmt.Errorf("hog %s/%s: pods left after %v: %v", namespace, name, bound, left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// RemoveRace deletes every Deployment and pod of the race in namespace
// and waits (up to bound) until no pod of it is left.
func (k *KubePods) RemoveRace(ctx context.Context, namespace string, bound time.Duration) error {
	sel := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{LabelRace: "true"}).String()}
	ds, err := k.Client.AppsV1().Deployments(namespace).List(ctx, sel)
	if err != nil {
		return fmt.Errorf("list the race's deployments: %w", err)
	}
	var errs []error
	bg := metav1.DeletePropagationBackground
	for _, d := range ds.Items {
		if err := k.Client.AppsV1().Deployments(namespace).Delete(ctx, d.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	deadline := time.Now().Add(bound)
	for {
		l, err := k.Client.CoreV1().Pods(namespace).List(ctx, sel)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("list the race's pods: %w", err))...)
		}
		if len(l.Items) == 0 {
			return errors.Join(errs...)
		}
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil {
				if err := k.Delete(ctx, p.Namespace, p.Name); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
		}
		if time.Now().After(deadline) {
			return errors.Join(append(errs, fmt.Errorf("%d pods of the race left after %v", len(l.Items), bound))...)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// NodeReady waits (up to bound) until the Node is Ready.
func (k *KubePods) NodeReady(ctx context.Context, bound time.Duration) (*corev1.Node, error) {
	deadline := time.Now().Add(bound)
	last := "not found"
	for {
		n, err := k.Client.CoreV1().Nodes().Get(ctx, k.Node, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return n, nil
					}
					last = "Ready=" + string(c.Status) + " " + c.Message
				}
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s not Ready after %v: %s", k.Node, bound, last)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(k.poll()):
		}
	}
}

// ForgetNode deletes the Node and its Lease, so that the next owner
// registers afresh and inherits nothing (conditions, taints, addresses).
func (k *KubePods) ForgetNode(ctx context.Context) error {
	var errs []error
	if err := k.Client.CoreV1().Nodes().Delete(ctx, k.Node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete node %s: %w", k.Node, err))
	}
	if err := k.Client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, k.Node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete lease %s: %w", k.Node, err))
	}
	return errors.Join(errs...)
}
