package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// ImageStatuser is the CRI image call the setup needs (cri.Client).
type ImageStatuser interface {
	ImageStatus(ctx context.Context, ref string) (*runtimeapi.Image, error)
}

// importTimeout bounds one `ctr images import` and the wait for the CRI
// plugin to list the image (0.1-0.3 s measured).
const importTimeout = time.Minute

// ImportImage imports im into the containerd listening on the socket
// address (a private test containerd) and waits until its CRI lists it.
func ImportImage(ctx context.Context, c ImageStatuser, address string, im images.Image) error {
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	if err := images.Import(ctx, address, images.CRINamespace, im); err != nil {
		return err
	}
	for {
		_, err := c.ImageStatus(ctx, im.Name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("import %s: CRI does not list it: %w (last error: %v)", im.Name, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// maxBudgetShare is the largest part of MemAvailable a budget may take:
// the rest of the machine (containerd, shims, the Go toolchain of a
// parallel test) must not be squeezed by the benchmark.
const maxBudgetShare = 0.5

// ErrBudgetTooLarge: the budget exceeds half of the memory available.
var ErrBudgetTooLarge = errors.New("budget too large")

// CheckBudget refuses a budget above half of /proc/meminfo's MemAvailable
// (read from meminfoPath).
func CheckBudget(meminfoPath string, budget uint64) error {
	mi, err := nodestats.ReadMeminfo(meminfoPath)
	if err != nil {
		return fmt.Errorf("check the budget: %w", err)
	}
	avail, ok := mi.Get(nodestats.MeminfoMemAvailable)
	if !ok {
		return fmt.Errorf("check the budget: %s has no MemAvailable", meminfoPath)
	}
	if limit := uint64(float64(avail) * maxBudgetShare); budget > limit {
		return fmt.Errorf("%w: %s is more than %.0f%% of MemAvailable (%s available, so at most %s)",
			ErrBudgetTooLarge, FormatBytes(budget), 100*maxBudgetShare, FormatBytes(avail), FormatBytes(limit))
	}
	return nil
}
