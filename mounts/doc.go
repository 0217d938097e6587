// Package mounts prepares the volumes of pods on the node, hands them to the
// container runtime as CRI mounts, measures them, and removes them.
//
// The layout is the kubelet's, beneath Config.RootDir:
//
//	pods/<uid>/volumes/<plugin>/<name>                 emptyDir, configMap, secret, projected, downwardAPI
//	pods/<uid>/volume-subpaths/<volume>/<container>/<i> bind mounts of volumeMounts[i].subPath
//
// with plugin directories such as "kubernetes.io~empty-dir". hostPath
// volumes have no directory there: they are validated and handed to the
// runtime as they are.
//
// The lifecycle of a pod's volumes is Validate (at admission), Setup (on
// every sync; idempotent), PodVolumes.Mounts (per container, for
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
//     an emptyDir at its first Setup by a Manager (the kubelet walks at
//     every mount), OnRootMismatch only when the root's group or bits are
//     wrong; API volumes are walked whenever their payload is written.
//     hostPath volumes are never touched.
//   - Teardown never deletes across a mount it could not unmount and never
//     follows a symlink: it errs with ErrMountsRemain rather than lose data
//     that is not the pod's.
//
// ConfigMap and Secret read the same SourceDir objects for a container's
// env (envFrom, configMapKeyRef, secretKeyRef), with the same rules as a
// volume's keys; a missing object is "not found", not an error.
//
// A Manager does not serialise work on one pod: its caller (the pod worker)
// does.
package mounts
