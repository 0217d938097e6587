// Package group owns the goroutines of a long-running process: one
// Group starts them, ends them together and waits for all of them before
// the resources they use are closed.
//
// Invariants: every goroutine of a Group runs until the Group's context
// ends; one that returns before that, with an error or without, is a
// failure: it ends the Group, and Wait and Shutdown return an error naming
// it, so that no loop stops silently while the others run on. Wait
// returns only after every goroutine has returned, and the cleanups
// registered with Cleanup run after that, newest first, once.
package group
