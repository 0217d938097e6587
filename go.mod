module github.com/nodeguard/nodeguard

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
