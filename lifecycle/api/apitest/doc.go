// Package apitest provides Fake, an in-memory api.PodService for tests of
// the API server and of its clients (the `nodeguard pod` commands).
//
// Fake behaves as the pod manager promises to: Apply validates with
// podspec.Validate and stores all pods or none, wrapping api.ErrInvalid
// with the field errors; unknown pods and containers wrap api.ErrNotFound;
// List and Get return copies with a status filled in, as if every
// container were running. Nothing runs: logs are what SetLogs stored, and
// exec echoes its command unless ExecFunc says otherwise.
package apitest
