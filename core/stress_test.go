package core

import (
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stressLeases is the number of leases TestStressLeasesUnderChurn takes: 100,000 by default
// (a few seconds under the race detector), BR_STRESS_LEASES for the long run of
// scripts/stress.py (1,000,000).
func stressLeases(t *testing.T) int {
	if s := os.Getenv("BR_STRESS_LEASES"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "BR_STRESS_LEASES")
		return n
	}
	return 100000
}

// TestStressLeasesUnderChurn: goroutines take and release leases (routed by key, by headers,
// without inputs, acquired, some released as abandoned, some released twice) while workers
// are added, removed, replaced and flip health underneath. A monitor checks that no worker's
// load or key count, members and removed workers alike, is ever negative; at the end every
// lease has been released exactly once and every count is zero.
func TestStressLeasesUnderChurn(t *testing.T) {
	total := stressLeases(t)
	const goroutines = 8
	pool := workerURLs(10)
	r := newTestRouter(t, boundedPolicy(1.25, 1), pool[:8])

	var (
		seenMu sync.Mutex
		seen   = map[*worker]bool{}
	)
	recordMembers := func() {
		r.mu.Lock()
		members := r.members.workers
		r.mu.Unlock()
		seenMu.Lock()
		for _, w := range members {
			seen[w] = true
		}
		seenMu.Unlock()
	}
	recordMembers()
	checkNoNegative := func() {
		seenMu.Lock()
		defer seenMu.Unlock()
		r.mu.Lock()
		defer r.mu.Unlock()
		for w := range seen {
			if state := w.state(); state.Load < 0 || state.ActiveKeys < 0 || int64(state.ActiveKeys) > state.Load {
				t.Errorf("worker %s (removed %v) has load %d and %d active keys", w.url, w.removed, state.Load, state.ActiveKeys)
			}
		}
	}

	stop := make(chan struct{})
	var background sync.WaitGroup
	var changes, checks atomic.Int64
	// One membership or health change; the lease goroutines make one every 500 leases (so the
	// churn never depends on scheduling) and a background goroutine makes them continuously.
	churn := func(rng *rand.Rand) {
		u := pool[rng.IntN(len(pool))]
		var err error
		switch rng.IntN(8) {
		case 0:
			err = r.AddWorker(u)
		case 1:
			err = r.RemoveWorker(u)
		case 2:
			var next []string
			size := 1 + rng.IntN(len(pool)) // now and then none at all
			if rng.IntN(20) == 0 {
				size = 0
			}
			for _, p := range rng.Perm(len(pool))[:size] {
				next = append(next, pool[p])
			}
			err = r.SetWorkers(next)
		default:
			err = r.SetHealthy(u, rng.IntN(4) != 0)
		}
		if err != nil && !errors.Is(err, ErrUnknownWorker) && !errors.Is(err, ErrDuplicateWorker) {
			t.Errorf("churn: %v", err)
		}
		recordMembers()
		changes.Add(1)
	}
	background.Add(2)
	go func() {
		defer background.Done()
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				return
			default:
			}
			churn(rng)
			runtime.Gosched()
		}
	}()
	go func() { // monitor
		defer background.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			checkNoNegative()
			checks.Add(1)
			time.Sleep(100 * time.Microsecond)
		}
	}()

	var taken, released, abandoned, noWorker atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			var held []LeaseID
			quota := total / goroutines
			if g == 0 {
				quota += total % goroutines
			}
			for n := 0; n < quota; {
				var id LeaseID
				switch k := rng.IntN(10); {
				case k < 5:
					d := route(r, "key-"+strconv.Itoa(rng.IntN(30)))
					id = d.Lease
				case k < 7:
					req := RequestFromHeaders(headers(HeaderRoutingKey, "h"+strconv.Itoa(rng.IntN(5)), HeaderCookie, "c"))
					if rng.IntN(4) == 0 {
						req = RequestFromHeaders(headers(HeaderTargetWorker, strconv.Itoa(rng.IntN(10))))
					}
					id = r.Route(&req).Lease
				case k < 8:
					var req Request
					id = r.Route(&req).Lease
				default:
					var err error
					id, _, err = r.Acquire(pool[rng.IntN(len(pool))], []byte("acquired"))
					if err != nil && !errors.Is(err, ErrUnknownWorker) {
						t.Errorf("acquire: %v", err)
					}
					if err != nil {
						continue
					}
				}
				if id == 0 {
					noWorker.Add(1)
					continue
				}
				if n%500 == 0 {
					churn(rng)
				}
				n++
				taken.Add(1)
				held = append(held, id)
				// Release in random order, holding up to a few dozen at a time.
				for len(held) > 0 && (len(held) > 40 || rng.IntN(2) == 0) {
					j := rng.IntN(len(held))
					asAbandoned := rng.IntN(20) == 0
					if !r.Release(held[j], asAbandoned) {
						t.Errorf("release of a held lease did nothing")
					}
					if asAbandoned {
						abandoned.Add(1)
					}
					if rng.IntN(10) == 0 && r.Release(held[j], false) {
						t.Errorf("a second release released")
					}
					released.Add(1)
					held[j] = held[len(held)-1]
					held = held[:len(held)-1]
				}
			}
			for _, id := range held {
				if !r.Release(id, false) {
					t.Errorf("final release did nothing")
				}
				released.Add(1)
			}
		}(g)
	}
	start := time.Now()
	wg.Wait()
	elapsed := time.Since(start)
	close(stop)
	background.Wait()
	recordMembers()
	checkNoNegative()

	t.Logf("%d leases in %v (%.0f leases/s), %d without a worker, %d membership/health changes, %d monitor checks",
		taken.Load(), elapsed.Round(time.Millisecond), float64(taken.Load())/elapsed.Seconds(), noWorker.Load(), changes.Load(), checks.Load())
	assert.Equal(t, int64(total), taken.Load())
	assert.Equal(t, taken.Load(), released.Load(), "every lease released exactly once")
	stats := r.Stats()
	assert.Equal(t, 0, stats.ActiveLeases)
	assert.Equal(t, uint64(abandoned.Load()), stats.Leaked)
	assert.GreaterOrEqual(t, changes.Load(), int64(total/500))
	checkInvariants(t, r)
	seenMu.Lock()
	defer seenMu.Unlock()
	for w := range seen {
		assert.Zero(t, w.state().Load, "load of %s (removed %v)", w.url, w.removed)
		assert.Zero(t, w.state().ActiveKeys, "active keys of %s (removed %v)", w.url, w.removed)
	}
	assert.Zero(t, r.view.spillableLoad)
}
