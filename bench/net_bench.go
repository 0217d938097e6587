package bench

import (
	"context"
	"fmt"
	"io"
	"os"
)

// NetOptions is one run of `nodeguard bench net`.
type NetOptions struct {
	// Config is the scenario; its Progress is set here.
	Config NetConfig
	// Report gets the table and the files written; Progress a line per
	// step.
	Report, Progress io.Writer
}

// NetBench measures pod network ADD and DEL through netplumb in a node
// network namespace of its own (RunNet) and reports them. It needs root.
func NetBench(ctx context.Context, o NetOptions) error {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Errorf("bench net creates network namespaces and needs root (euid %d)", euid)
	}
	cfg := o.Config
	cfg.Progress = o.Progress
	rep, err := RunNet(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintln(o.Report)
	WriteNetTable(o.Report, rep)
	for _, f := range rep.Files {
		fmt.Fprintf(o.Report, "wrote %s\n", f)
	}
	return nil
}
