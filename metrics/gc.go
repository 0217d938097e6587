package metrics

import "github.com/prometheus/client_golang/prometheus"

// Reasons of kubelet_image_garbage_collected_total, the kubelet's label
// values: "space" for a removal to free disk (the periodic collection
// over its high threshold, and node-level reclaim under disk pressure).
const ImageGCReasonSpace = "space"

// Kinds of nodeguard_container_gc_removed_total.
const (
	ContainerGCKindContainer = "container"
	ContainerGCKindSandbox   = "sandbox"
)

// GC holds the series of image and container garbage collection. Its
// methods are safe for concurrent use.
type GC struct {
	images     *prometheus.CounterVec
	freed      prometheus.Counter
	containers *prometheus.CounterVec
	reclaims   *prometheus.CounterVec
}

// GC registers the garbage collection series on the exporter.
func (e *Exporter) GC() *GC {
	v := &GC{
		// The kubelet's name and label (pkg/kubelet/metrics
		// ImageGarbageCollectedTotal), so existing dashboards count
		// nodeguard's removals.
		images: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_image_garbage_collected_total",
			Help: "Total number of images garbage collected, by reason.",
		}, []string{"reason"}),
		freed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeguard_image_gc_freed_bytes_total",
			Help: "Bytes of images removed by garbage collection, by the sizes the runtime reports.",
		}),
		containers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeguard_container_gc_removed_total",
			Help: "Dead containers and sandboxes removed by garbage collection, by kind.",
		}, []string{"kind"}),
		reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeguard_node_reclaim_total",
			Help: "Node-level reclaims (dead containers, then unused images) run before a disk eviction, by eviction signal.",
		}, []string{"eviction_signal"}),
	}
	v.images.WithLabelValues(ImageGCReasonSpace).Add(0)
	v.freed.Add(0)
	for _, k := range []string{ContainerGCKindContainer, ContainerGCKindSandbox} {
		v.containers.WithLabelValues(k).Add(0)
	}
	e.reg.MustRegister(v.images, v.freed, v.containers, v.reclaims)
	return v
}

// ImageRemoved counts one image removed to free space and its size.
func (v *GC) ImageRemoved(size uint64) {
	v.images.WithLabelValues(ImageGCReasonSpace).Inc()
	v.freed.Add(float64(size))
}

// ContainersRemoved counts dead containers and sandboxes removed.
func (v *GC) ContainersRemoved(containers, sandboxes int) {
	v.containers.WithLabelValues(ContainerGCKindContainer).Add(float64(containers))
	v.containers.WithLabelValues(ContainerGCKindSandbox).Add(float64(sandboxes))
}

// Reclaimed counts one node-level reclaim for signal.
func (v *GC) Reclaimed(signal string) { v.reclaims.WithLabelValues(signal).Inc() }
