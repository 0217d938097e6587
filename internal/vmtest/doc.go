// Package vmtest runs privileged Go tests inside throwaway qemu VMs on
// Debian's kernels with pure cgroup v2 (placeholder; documented below).
package vmtest
