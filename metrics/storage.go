package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StorageSource hands out the newest sample of every pod's ephemeral
// storage, taken at a slow cadence (it walks directories); nil before
// the first.
type StorageSource interface {
	LatestStorage() *StorageSample
}

// StorageSample is one pass over every pod's ephemeral storage.
type StorageSample struct {
	Taken time.Time
	Pods  []PodStorage
}

// PodStorage is one pod's ephemeral storage.
type PodStorage struct {
	Namespace, Pod, UID string
	Volumes             []VolumeStorage
	Containers          []ContainerStorage
	// EphemeralBytes is the total the kubelet would hold against the
	// pod's ephemeral-storage limit.
	EphemeralBytes uint64
}

// VolumeStorage is one emptyDir's usage.
type VolumeStorage struct {
	Volume, Plugin, Medium string
	Bytes, Inodes          uint64
}

// ContainerStorage is one container's writable layer and logs.
type ContainerStorage struct {
	Container                 string
	RootfsBytes, RootfsInodes uint64
	LogsBytes                 uint64
}

var (
	volLabels  = []string{"namespace", "pod", "uid", "volume", "plugin", "medium"}
	ctrLabels  = []string{"namespace", "pod", "uid", "container"}
	volBytes   = prometheus.NewDesc("nodeguard_volume_used_bytes", "Bytes used in a pod's emptyDir volume.", volLabels, nil)
	volInodes  = prometheus.NewDesc("nodeguard_volume_inodes_used", "Inodes used in a pod's emptyDir volume.", volLabels, nil)
	rootBytes  = prometheus.NewDesc("nodeguard_container_rootfs_used_bytes", "Bytes used by a container's writable layer, as the runtime reports it.", ctrLabels, nil)
	rootInodes = prometheus.NewDesc("nodeguard_container_rootfs_inodes_used", "Inodes used by a container's writable layer, as the runtime reports it.", ctrLabels, nil)
	logBytes   = prometheus.NewDesc("nodeguard_container_logs_used_bytes", "Bytes used by a container's log files.", ctrLabels, nil)
	podEph     = prometheus.NewDesc("nodeguard_pod_ephemeral_storage_used_bytes",
		"A pod's ephemeral storage as the kubelet counts it against its limit: disk emptyDirs, writable layers and logs.", []string{"namespace", "pod", "uid"}, nil)
	storageAge = prometheus.NewDesc("nodeguard_storage_sample_age_seconds", "Age of the newest ephemeral storage sample.", nil, nil)
)

func (c *scrapeCollector) storage(ch chan<- prometheus.Metric) error {
	s := c.e.opts.Storage.LatestStorage()
	if s == nil {
		return errNoSnapshot
	}
	ch <- prometheus.MustNewConstMetric(storageAge, prometheus.GaugeValue, c.e.opts.Now().Sub(s.Taken).Seconds())
	for _, p := range s.Pods {
		for _, v := range p.Volumes {
			lv := []string{p.Namespace, p.Pod, p.UID, v.Volume, v.Plugin, v.Medium}
			ch <- prometheus.MustNewConstMetric(volBytes, prometheus.GaugeValue, float64(v.Bytes), lv...)
			ch <- prometheus.MustNewConstMetric(volInodes, prometheus.GaugeValue, float64(v.Inodes), lv...)
		}
		for _, ct := range p.Containers {
			lv := []string{p.Namespace, p.Pod, p.UID, ct.Container}
			ch <- prometheus.MustNewConstMetric(rootBytes, prometheus.GaugeValue, float64(ct.RootfsBytes), lv...)
			ch <- prometheus.MustNewConstMetric(rootInodes, prometheus.GaugeValue, float64(ct.RootfsInodes), lv...)
			ch <- prometheus.MustNewConstMetric(logBytes, prometheus.GaugeValue, float64(ct.LogsBytes), lv...)
		}
		ch <- prometheus.MustNewConstMetric(podEph, prometheus.GaugeValue, float64(p.EphemeralBytes), p.Namespace, p.Pod, p.UID)
	}
	return nil
}
