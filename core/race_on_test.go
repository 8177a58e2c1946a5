//go:build race

package core

// raceEnabled is set when the tests run under the race detector, whose sync.Pool drops a
// random quarter of the items put back, so pooled buffers are allocated again.
const raceEnabled = true
