// Package mounts prepares the volumes of pods on the node, hands them to the
// container runtime as CRI mounts, measures them, and removes them.
//
// The layout is the kubelet's, beneath Config.RootDir:
//
//	pods/<uid>/volumes/<plugin>/<name>                 emptyDir, configMap, secret, projected, downwardAPI, nfs
//	pods/<uid>/volumes/<plugin>/<pv name>              persistentVolumeClaim (volumeMode Filesystem)
//	pods/<uid>/volumeDevices/<plugin>/<pv name>        persistentVolumeClaim (volumeMode Block), a bind-mounted device node
//	pods/<uid>/volume-subpaths/<volume>/<container>/<i> bind mounts of volumeMounts[i].subPath
//	pods/<uid>/volumes/kubernetes.io~host-path/<name>  bind mounts of hostPath volumes (inline or PersistentVolumes)
//
// with plugin directories such as "kubernetes.io~empty-dir" and
// "kubernetes.io~local-volume". A hostPath is checked beneath its
// allowlist prefix and the object checked is bind mounted (recursively,
// keeping its mount's propagation) through its descriptor; the runtime is
// handed that bind, never the hostPath's path, which a pod writing in the
// allowed tree could point elsewhere before the runtime resolves it. The
// kubernetes.io~host-path directory is a bind mount of itself, unbindable,
// so that no recursive bind copies the binds beneath it (setupHostPath).
// Image volumes have no directory: the runtime
// mounts the image itself (CRI Mount.image, read-only), so Setup makes
// nothing for them and Teardown has nothing to remove; containerd unmounts
// them when the sandbox stops.
//
// # PersistentVolumeClaims
//
// Standalone, there is no control plane to bind claims: a claim is read
// from SourceDir/persistentvolumeclaims/<namespace>/<name>.yaml and its
// volume from SourceDir/persistentvolumes/<name>.yaml, bound by the
// claim's spec.volumeName or the volume's spec.claimRef, and checked as
// the PV controller checks a binding (Claim, Satisfies). A missing or
// unbound claim is a *ClaimError with a scheduler's message, and the pod
// waits for it. The volume's source is mounted by the
// PersistentVolumeMounter of its type (pvMounter): local volumes by
// k8s.io/mount-utils' SafeFormatAndMount (a block device formatted only if
// blkid finds no file system on it, then mounted with the PV's
// mountOptions; a directory bind mounted), read-only when the claim's
// readOnly says so. A raw block volume is the local device bind mounted
// beneath volumeDevices, handed to the runtime as a CRI device (Devices).
// Teardown and GC unmount these like any other mount beneath the pod's
// directory, so nothing is left after a kill either.
//
// The lifecycle of a pod's volumes is Validate (at admission), Setup (on
// every sync; idempotent), PodVolumes.Mounts and PodVolumes.Devices (per container, for
// CreateContainer), Usage (for eviction), and Teardown (after the pod's
// sandbox is gone) or GC (for pods the agent no longer knows).
//
// # Invariants
//
//   - Every path that comes from a manifest (subPath, items[].path, keys,
//     hostPath, names used as directory names) is validated before use, and
//     resolved with openat2(2) RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS beneath
//     the directory it must stay in: a symlink planted in a volume cannot
//     make a subPath expose the host, and one planted in an allowed hostPath
//     tree cannot widen the allowlist.
//   - Directories beneath a pod's directory are made with mkdirat(2) on
//     descriptors opened beneath RootDir/pods; mounts are made through the
//     procfs link of the descriptor that was checked, so the object checked
//     is the object mounted.
//   - Projected files (configMap, secret, projected, downwardAPI) change
//     atomically: readers see the old or the new payload, never a mix
//     (writeAtomic). Secret and projected volumes live on tmpfs and never
//     reach the disk. Beside the payload, such a volume gets the
//     directories the mounts nested beneath its mount points need (the
//     kubelet's MakeNestedMountpoints, nested.go): the runtime cannot make
//     them in a volume the container sees read-only.
//   - A pod's fsGroup owns its emptyDir, configMap, secret, projected and
//     downwardAPI volumes as the kubelet's SetVolumeOwnership makes it:
//     group fsGroup, g+rw (g+r for the read-only API volumes), directories
//     setgid and g+x. The walk goes through an os.Root and changes a
//     symlink's group, never its target. fsGroupChangePolicy Always walks
//     an emptyDir at its first Setup by a Volumes (the kubelet walks at
//     every mount), OnRootMismatch only when the root's group or bits are
//     wrong; API volumes are walked whenever their payload is written.
//     hostPath volumes are never touched.
//   - nfs volumes are mounted as the kubelet's nfs plugin mounts them:
//     k8s.io/mount-utils runs mount -t nfs server:path (mount.nfs from
//     nfs-common) on pods/<uid>/volumes/kubernetes.io~nfs/<name>, with
//     "ro" for a read-only volume (and a PersistentVolume's mountOptions),
//     and retry=0 unless those name a retry= (one attempt per mount(8):
//     the pod worker's syncs retry, with the error in the pod's status),
//     from Config.NodeNetNS, where the client's socket is made. No NFS
//     call holds a pod worker: a mount waits NFSMountTimeout and goes on
//     in the background (ErrMountInProgress until it returns; no second
//     one, and Teardown keeps its directory), an unmount is umount(8),
//     umount -f, then MNT_DETACH; an NFS mount point is found in
//     mountinfo, never stat'ed.
//   - Teardown never deletes across a mount it could not unmount and never
//     follows a symlink: it errs with ErrMountsRemain rather than lose data
//     that is not the pod's. The hostPath binds and the subPath binds (a
//     subPath of a hostPath is bound from inside the hostPath's bind) are
//     made slaves before they are unmounted: the copies of the host's
//     mounts beneath them are peers of the host's, and their unmount must
//     not reach the host.
//
// ConfigMap and Secret read the same SourceDir objects for a container's
// env (envFrom, configMapKeyRef, secretKeyRef), with the same rules as a
// volume's keys; a missing object is "not found", not an error.
//
// A Volumes does not serialise work on one pod: its caller (the pod worker)
// does.
package mounts
