package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/config"
)

// newConfigCmd is `nodeguard config`: check a file, print the defaults.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration file, or print the default configuration",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Load and validate FILE as `nodeguard run --config FILE` would; print ok or the first bad field",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := config.CheckFile(args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}, &cobra.Command{
		Use:   "defaults",
		Short: "Print the default configuration as YAML",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := yaml.Marshal(config.Default().Effective())
			if err != nil {
				return fmt.Errorf("encode defaults: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	return cmd
}
