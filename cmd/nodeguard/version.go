package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/loader"
)

// version and commit are set by the Makefile's build:
//
//	-ldflags "-X main.version=$(git describe --tags --always --dirty) -X main.commit=<full hash>[-dirty]"
//
// A binary built another way (go build, go install, the tests) keeps
// version "dev" and takes its commit from what the Go toolchain stamped
// (see buildCommit). version also names the agent to the API server and in
// nodeguard_build_info, so it is fixed at link time, never guessed later.
var (
	version = "dev"
	commit  = ""
)

// versionInfo is what `nodeguard version` reports: enough to tell which
// source, toolchain and kernel programs a node ran.
type versionInfo struct {
	Version string `json:"version"`
	// Commit is the full hash, with "-dirty" when the tree had
	// uncommitted changes; "unknown" when neither the build flags nor
	// the toolchain recorded one.
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
	// BPFObjectsSHA256 is loader.ObjectsSHA256: two binaries that agree
	// on it load the same BPF programs.
	BPFObjectsSHA256 string `json:"bpfObjectsSHA256"`
}

func currentVersion() versionInfo {
	bi, _ := debug.ReadBuildInfo()
	return versionInfo{
		Version:          version,
		Commit:           buildCommit(commit, bi),
		GoVersion:        runtime.Version(),
		Platform:         runtime.GOOS + "/" + runtime.GOARCH,
		BPFObjectsSHA256: loader.ObjectsSHA256(),
	}
}

// buildCommit returns the commit set at link time, else the toolchain's
// vcs.revision (go build stamps it when run inside a git checkout) with
// "-dirty" when vcs.modified says the tree had changes, as git describe
// --dirty writes it.
func buildCommit(linked string, bi *debug.BuildInfo) string {
	if linked != "" {
		return linked
	}
	if bi == nil {
		return "unknown"
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case modified:
		return rev + "-dirty"
	}
	return rev
}

func (v versionInfo) writeText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "version:      %s\ncommit:       %s\ngo:           %s %s\nbpf objects:  sha256:%s\n",
		v.Version, v.Commit, v.GoVersion, v.Platform, v.BPFObjectsSHA256)
	return err
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version and the digest of the embedded BPF objects",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion()
			if !asJSON {
				return v.writeText(cmd.OutOrStdout())
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// setVersionFlag makes `nodeguard --version` print what `nodeguard version`
// prints. cobra renders the flag's output from a template, so the text is
// made here; the digest costs well under a millisecond.
func setVersionFlag(root *cobra.Command) {
	root.Version = version
	var b strings.Builder
	_ = currentVersion().writeText(&b) // a strings.Builder does not fail
	root.SetVersionTemplate(b.String())
}
