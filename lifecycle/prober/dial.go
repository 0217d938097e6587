package prober

import (
	"context"
	"fmt"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
)

// NetNSDialer returns a DialFunc whose sockets are made in the network
// namespace at path: the node's, where the pod network's bridge routes
// the pod IPs. A socket keeps the namespace it was made in, so only the
// dial runs on a thread moved into path (ns.Do locks a fresh goroutine to
// it and moves it back); reads and writes happen anywhere. The namespace
// is opened at once (a wrong path fails here, not at the first probe) and
// held until close is called.
func NetNSDialer(path string) (dial DialFunc, close func() error, err error) {
	n, err := ns.GetNS(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open the node's network namespace %s for probes: %w", path, err)
	}
	dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := n.Do(func(ns.NetNS) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			conn = c
			return err
		})
		if err != nil {
			return nil, err
		}
		return conn, nil
	}
	return dial, n.Close, nil
}
