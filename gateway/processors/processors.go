// Package processors sizes the Go runtime's processors (GOMAXPROCS) to the gateway's load, by
// the rule of the contract (docs/contract.md, HTTP proxies, "Processors"): each idle processor
// costs CPU, since a thread that waits for the network first looks for work on the idle ones.
package processors

import (
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The process is looked at every Tick; every TicksPerWindow ticks (a window) the processors are
// decided from its CPU use and the goroutines it had waiting for a processor, and taken away only
// after DownAfter windows in a row that needed fewer.
const (
	Tick           = 20 * time.Millisecond
	TicksPerWindow = 10
	DownAfter      = 10
)

// busyShare is the share of its processors a process may keep busy, and queuePerProcessor how
// many goroutines may wait for each on average, before it is given more. A gateway on a machine
// whose cores it shares can be short of processors while it uses little CPU (its threads wait
// for the cores): then its goroutines queue.
const (
	busyShare         = 0.75
	queuePerProcessor = 10
)

// Controller decides the processors from each window's CPU use and queue.
type Controller struct {
	max, current int
	// calm counts the windows in a row that needed fewer than current; need is the most any of
	// them needed.
	calm, need int
}

// NewController starts at current processors and never goes above limit or below 1.
func NewController(current, limit int) *Controller {
	limit = max(limit, 1)
	return &Controller{max: limit, current: min(max(current, 1), limit)}
}

// Next takes the cores the process used over a window (CPU seconds per second) and the mean
// number of goroutines that were runnable but not running, and returns the processors to have
// for the next window.
func (c *Controller) Next(cores, queued float64) int {
	need := max(int(math.Ceil(cores/busyShare)), int(math.Ceil(queued/queuePerProcessor)), 1)
	// One processor cannot show much more than a core of use, so a busy process is given at
	// most twice what it has per window.
	need = min(need, 2*c.current, c.max)
	if need >= c.current {
		c.current, c.calm, c.need = need, 0, 0
		return c.current
	}
	c.calm++
	c.need = max(c.need, need)
	if c.calm >= DownAfter {
		c.current, c.calm, c.need = c.need, 0, 0
	}
	return c.current
}

// Sample is what the process shows at a tick: its CPU time so far and its runnable goroutines.
type Sample struct {
	CPU      time.Duration
	Runnable int
}

// Loop runs a controller until stop is closed: it samples the process at every tick and sets
// the processors at the end of every window. sample and set are the process's (sampleProcess,
// runtime.GOMAXPROCS) or a test's.
func Loop(c *Controller, ticks <-chan time.Time, stop <-chan struct{}, sample func() Sample, set func(int)) {
	var start time.Time
	var startCPU time.Duration
	queued, n := 0, 0
	for {
		select {
		case <-stop:
			return
		case now := <-ticks:
			s := sample()
			if start.IsZero() {
				start, startCPU = now, s.CPU
				continue
			}
			queued += s.Runnable
			if n++; n < TicksPerWindow {
				continue
			}
			if now.After(start) {
				set(c.Next(float64(s.CPU-startCPU)/float64(now.Sub(start)), float64(queued)/float64(n)))
			}
			start, startCPU, queued, n = now, s.CPU, 0, 0
		}
	}
}

// sampleProcess reads the process's CPU time and the runtime's count of runnable goroutines.
func sampleProcess(m []metrics.Sample) Sample {
	metrics.Read(m)
	s := Sample{CPU: processCPU()}
	if m[0].Value.Kind() == metrics.KindUint64 {
		s.Runnable = int(m[0].Value.Uint64())
	}
	return s
}

// processCPU is the user and system time of the whole process (every thread, the host
// program's included).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

var running struct {
	sync.Mutex
	users int
	stop  chan struct{}
	done  chan struct{}
	// start is the processors the runtime had before the controller, and custom whether they
	// were the host's choice rather than the runtime's default: the last release restores them.
	start  int
	custom bool
}

// Follow sizes the processors to the load until the returned release is called (once per
// call). Several users share one controller; the last release ends it and gives back the
// processors as they were: the host's count if it had set one, else the runtime's own default,
// which follows the machine again. While it runs, the controller owns the processors. It does
// nothing when the environment sets GOMAXPROCS to a count, as the runtime reads it: the operator
// has chosen.
func Follow() (release func()) {
	if n, err := strconv.Atoi(os.Getenv("GOMAXPROCS")); err == nil && n > 0 {
		return func() {}
	}
	running.Lock()
	defer running.Unlock()
	if running.users++; running.users == 1 {
		running.start = runtime.GOMAXPROCS(0)
		runtime.SetDefaultGOMAXPROCS()
		if running.custom = runtime.GOMAXPROCS(0) != running.start; running.custom {
			runtime.GOMAXPROCS(running.start)
		}
		running.stop, running.done = make(chan struct{}), make(chan struct{})
		go control(running.start, running.stop, running.done)
	}
	var once sync.Once
	return func() { once.Do(leave) }
}

// control runs the process's controller, from and up to n processors, until stop is closed.
func control(n int, stop, done chan struct{}) {
	defer close(done)
	ticker := time.NewTicker(Tick)
	defer ticker.Stop()
	m := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	Loop(NewController(n, n), ticker.C, stop, func() Sample { return sampleProcess(m) }, func(p int) {
		if p != runtime.GOMAXPROCS(0) {
			runtime.GOMAXPROCS(p)
		}
	})
}

func leave() {
	running.Lock()
	defer running.Unlock()
	if running.users--; running.users > 0 {
		return
	}
	close(running.stop)
	<-running.done
	if running.custom {
		runtime.GOMAXPROCS(running.start)
	} else {
		runtime.SetDefaultGOMAXPROCS()
	}
}
