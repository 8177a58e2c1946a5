package core

import (
	"runtime"
	"syscall"
	"testing"
)

// cpuClock measures the CPU time of the calling goroutine's thread, so that a benchmark on a
// shared machine can report the time its loop ran rather than the time it waited for a core.
type cpuClock struct{ start int64 }

// startCPUClock locks the goroutine to its thread and reads the thread's CPU time.
func startCPUClock() cpuClock {
	runtime.LockOSThread()
	return cpuClock{threadCPUNanos()}
}

// report adds the thread CPU time per operation since start as "cpu-ns/op" and unlocks the thread.
func (c cpuClock) report(b *testing.B) {
	elapsed := threadCPUNanos() - c.start
	runtime.UnlockOSThread()
	b.ReportMetric(float64(elapsed)/float64(b.N), "cpu-ns/op")
}

func threadCPUNanos() int64 {
	const rusageThread = 1 // RUSAGE_THREAD (Linux)
	var u syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &u); err != nil {
		panic(err)
	}
	return u.Utime.Nano() + u.Stime.Nano()
}
