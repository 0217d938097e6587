// Package bench drives nodeguard's benchmarks and writes their reports:
// tables for people, CSV for scripts and PNG plots for distributions. It
// holds no daemon logic: each driver exercises a real component through a
// small interface declared here, and every figure it prints is measured in
// the run that prints it.
package bench
