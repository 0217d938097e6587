package images

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
)

// CRINamespace is the containerd namespace the CRI plugin keeps its images
// in.
const CRINamespace = "k8s.io"

// Import imports im into the containerd at address (a socket path) with
// `ctr --address <address> --namespace <namespace> images import`. The CRI
// plugin lists the image shortly after (its store follows containerd's
// events): a caller that goes on through CRI waits for ImageStatus.
func Import(ctx context.Context, address, namespace string, im Image) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return fmt.Errorf("import %s: %w", im.Name, err)
	}
	cmd := exec.CommandContext(ctx, ctr, "--address", address, "--namespace", namespace, "images", "import", im.Archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import %s: ctr: %w: %s", im.Name, err, bytes.TrimSpace(out))
	}
	return nil
}
