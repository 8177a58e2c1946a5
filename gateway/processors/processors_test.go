package processors

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// window is what a window shows the controller: the cores used and the mean goroutines queued.
type window struct{ cores, queued float64 }

func windows(cores, queued float64, n int) []window {
	return slices.Repeat([]window{{cores, queued}}, n)
}

// decide feeds the controller the windows and returns what it decided after each.
func decide(c *Controller, ws []window) []int {
	var got []int
	for _, w := range ws {
		got = append(got, c.Next(w.cores, w.queued))
	}
	return got
}

func counts(v, n int) []int { return slices.Repeat([]int{v}, n) }

// The expected processors are worked out by hand from the package's rule: need is the larger of
// ceil(cores / 0.75) and ceil(queued / 10), at least 1, at most twice the current count and the
// limit; fewer only after ten windows in a row that needed fewer, then the most they needed.
func TestControllerRule(t *testing.T) {
	cases := []struct {
		name           string
		current, limit int
		windows        []window
		want           []int
	}{
		// 0.69 cores need ceil(0.92) = 1, 4 queued ceil(0.4) = 1.
		{"down after ten calm windows", 2, 2, windows(0.69, 4, 10), append(counts(2, 9), 1)},
		// 0.52 cores need 1, 0.80 need ceil(1.07) = 2: up at once.
		{"up at once for CPU", 1, 2, []window{{0.52, 0}, {0.80, 0}, {0.52, 0}}, []int{1, 2, 2}},
		// 0.4 cores need 1, but 12.5 goroutines queued need ceil(1.25) = 2.
		{"up at once for a queue", 1, 2, []window{{0.4, 8}, {0.4, 12.5}}, []int{1, 2}},
		// From one processor of 64: at most twice the current count per window.
		{"doubling at most", 1, 64, []window{{0.95, 0}, {1.9, 0}, {40, 0}, {40, 0}, {0.2, 300}}, []int{2, 3, 6, 12, 24}},
		// Down to the most any calm window needed: ceil(2.2 / 0.75) = 3, ceil(45 / 10) = 5.
		{"down to the most needed", 8, 8, append([]window{{2.2, 0}, {0.1, 45}, {1, 0}}, windows(0.1, 0, 7)...), append(counts(8, 9), 5)},
		// Idle, or a clock that went back: one processor is the floor.
		{"never below one", 1, 4, []window{{0, 0}, {-3, -1}}, []int{1, 1}},
		{"a limit of one", 1, 1, []window{{5, 50}, {5, 50}}, []int{1, 1}},
		{"the start is held to the limit", 6, 4, []window{{3, 0}}, []int{4}},
	}
	for _, tc := range cases {
		if got := decide(NewController(tc.current, tc.limit), tc.windows); !slices.Equal(got, tc.want) {
			t.Errorf("%s: processors %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A window that needs all the processors ends a calm streak: ten more calm ones are needed.
func TestABusyWindowRestartsTheCount(t *testing.T) {
	ws := append(windows(0.1, 0, 9), window{0.3, 11}) // 11 queued need ceil(1.1) = 2
	ws = append(ws, windows(0.1, 0, 10)...)
	if got, want := decide(NewController(2, 2), ws), append(counts(2, 19), 1); !slices.Equal(got, want) {
		t.Fatalf("processors %v, want %v", got, want)
	}
}

// loopOnAFakeClock runs Loop with c for the given windows, one tick after another on a fake
// clock (the first only starts the count); sample gets the number of its call, from 1. It returns
// what the loop set after each window.
func loopOnAFakeClock(c *Controller, windows int, sample func(call int) Sample) []int {
	ticks, stop, done := make(chan time.Time), make(chan struct{}), make(chan struct{})
	var set []int
	go func() {
		defer close(done)
		calls := 0 // the loop's alone
		Loop(c, ticks, stop, func() Sample { calls++; return sample(calls) }, func(p int) { set = append(set, p) })
	}()
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for i := 0; i <= windows*TicksPerWindow; i++ {
		ticks <- start.Add(time.Duration(i) * Tick) // unbuffered: the loop has taken the tick
	}
	close(stop)
	<-done
	return set
}

// Loop samples at every tick and decides at the end of every window from the CPU used since its
// start and the mean of its samples' queues: 0.69 Tick of CPU per Tick is 0.69 cores.
func TestLoopOnAFakeClock(t *testing.T) {
	set := loopOnAFakeClock(NewController(2, 2), 11, func(call int) Sample {
		// Four goroutines queued at every tick, 30 at every tenth: a mean of 6.6, need 1.
		queued := 4
		if call%TicksPerWindow == 0 {
			queued = 30
		}
		return Sample{CPU: time.Duration(call) * Tick * 69 / 100, Runnable: queued}
	})
	// Ten windows at 0.69 cores bring two processors to one, and the eleventh stays there.
	if want := append(counts(2, 9), 1, 1); !slices.Equal(set, want) {
		t.Fatalf("set %v, want %v", set, want)
	}
}

// A burst in the first window must not count in the next ones: each window is judged on its own
// CPU use. Averaged since the start, 31 CPU-seconds over eleven windows would still need two
// processors.
func TestEachWindowOnItsOwn(t *testing.T) {
	set := loopOnAFakeClock(NewController(1, 2), 11, func(call int) Sample {
		cpu := time.Duration(call) * Tick / 10 // 0.1 cores
		if call > 1 {
			cpu += 30 * TicksPerWindow * Tick // 30 cores through the first window
		}
		return Sample{CPU: cpu}
	})
	// Up to two after the burst, then ten windows of 0.1 cores bring it back to one.
	if want := append(counts(2, 10), 1); !slices.Equal(set, want) {
		t.Fatalf("set %v, want %v", set, want)
	}
}

func TestFollowLeavesAnOperatorsChoice(t *testing.T) {
	for _, value := range []string{"1", "3"} {
		t.Setenv("GOMAXPROCS", value)
		before := runtime.GOMAXPROCS(0)
		release := Follow()
		if running.users != 0 {
			t.Fatalf("GOMAXPROCS=%s: a controller runs although the operator set the processors", value)
		}
		release()
		if runtime.GOMAXPROCS(0) != before {
			t.Fatalf("GOMAXPROCS=%s: the processors changed from %d to %d", value, before, runtime.GOMAXPROCS(0))
		}
	}
}

// A value the runtime does not read as a count ("0", "auto") leaves its default in force, and
// the controller runs.
func TestFollowRunsWhenTheEnvironmentSetsNoCount(t *testing.T) {
	for _, value := range []string{"", "0", "auto"} {
		t.Setenv("GOMAXPROCS", value)
		release := Follow()
		if running.users != 1 {
			t.Fatalf("GOMAXPROCS=%q: users %d, want 1", value, running.users)
		}
		release()
	}
}

// The last release stops the controller and gives the runtime its default back, once however
// often it is called; a later Follow starts a new controller.
func TestFollowSharedAndReleased(t *testing.T) {
	runtime.SetDefaultGOMAXPROCS()
	want := runtime.GOMAXPROCS(0)
	for round := 0; round < 2; round++ {
		first, second := Follow(), Follow()
		if running.users != 2 {
			t.Fatalf("round %d: users %d, want 2", round, running.users)
		}
		first()
		first()
		if running.users != 1 {
			t.Fatalf("round %d: users %d after a repeated release, want 1", round, running.users)
		}
		runtime.GOMAXPROCS(want + 1) // as the controller might leave it, and never the default
		second()
		if running.users != 0 {
			t.Fatalf("round %d: users %d, want 0", round, running.users)
		}
		if got := runtime.GOMAXPROCS(0); got != want {
			t.Fatalf("round %d: GOMAXPROCS %d after the last release, want the default %d", round, got, want)
		}
	}
}

// A count the host set itself is the controller's limit, and is what the last release restores.
func TestFollowRestoresTheHostsCount(t *testing.T) {
	runtime.SetDefaultGOMAXPROCS()
	host := runtime.GOMAXPROCS(0) + 2
	runtime.GOMAXPROCS(host)
	defer runtime.SetDefaultGOMAXPROCS()
	release := Follow()
	if got := runtime.GOMAXPROCS(0); got != host {
		t.Fatalf("GOMAXPROCS %d once the controller started, want the host's %d", got, host)
	}
	runtime.GOMAXPROCS(1) // as the controller might leave it
	release()
	if got := runtime.GOMAXPROCS(0); got != host {
		t.Fatalf("GOMAXPROCS %d after the release, want the host's %d", got, host)
	}
}
