// Package hog carries the source of the hog program (cmd/hog/main.go), the
// memory hog of `nodeguard bench eviction`, so that lab/images can
// compile it into the image registry.local/nodeguard/hog:1 without the
// source tree at hand, as it does the pause program.
//
// The program itself is in cmd/hog; this package only embeds its source and
// states the contract between the hog and the harness that reads it:
//
//   - In ramp mode (--rate) the hog prints one line at start, "<unix-nanos>
//     0", sleeps --delay, then allocates anonymous memory (one mmap of --max
//     bytes, written one byte per page so that every page is charged) in
//     --step increments, paced by sleeping and catching up so that the
//     allocated total follows rate*elapsed. After each step it prints
//     "<unix-nanos> <allocated-bytes>", the time taken with
//     time.Now().UnixNano() (CLOCK_REALTIME) once the step's pages are
//     charged. It never frees, and stops allocating at --max, then waits to
//     be killed.
//   - In steady mode (--steady N) it allocates N bytes once, prints one
//     line, and rewrites one byte of every page each --period, forever: a
//     busy background pod whose working set stays put.
//
// Each line is one write(2) to stdout, so a line is either whole in the
// container log or absent, even when the hog is killed mid-run.
package hog

import _ "embed" // the program's source

// Source is cmd/hog/main.go, a program that needs only the standard
// library.
//
//go:embed cmd/hog/main.go
var Source []byte
