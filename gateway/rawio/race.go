//go:build race

package rawio

// Under the race detector Read and Write are net.Conn's: Go's system calls tell the detector
// that I/O orders the goroutines on both ends of a socket, and raw ones would not.
const raceEnabled = true
