//go:build !linux

package core

import "testing"

// cpuClock reports nothing where no per-thread CPU time is read (see cputime_linux_test.go).
type cpuClock struct{}

func startCPUClock() cpuClock { return cpuClock{} }

func (cpuClock) report(*testing.B) {}
