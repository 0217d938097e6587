package main

import "github.com/spf13/cobra"

func newDoctorCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{Use: "doctor", Short: "Check what this kernel and host allow"}
}
