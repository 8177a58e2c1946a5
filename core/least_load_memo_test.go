package core

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The memo's transitions, by hand: loads (membership index: load) and the memo after each move.
func TestLeastLoadMemoMoves(t *testing.T) {
	var m leastLoadMemo
	m.forget()
	assert.Equal(t, leastLoadMemo{load: math.MinInt64, count: 0, at: 0}, m)
	m = leastLoadMemo{load: 2, count: 2, at: 1} // {0: 5, 1: 2, 2: 2}
	m.moved(2, 2, 3)                            // {0: 5, 1: 2, 2: 3}: one tie left, still the first
	assert.Equal(t, leastLoadMemo{load: 2, count: 1, at: 1}, m)
	m.moved(0, 5, 2) // {0: 2, 1: 2, 2: 3}: a tie before the first
	assert.Equal(t, leastLoadMemo{load: 2, count: 2, at: 0}, m)
	m.moved(0, 2, 4) // {0: 4, 1: 2, 2: 3}: the first tie leaves; the next is after it
	assert.Equal(t, leastLoadMemo{load: 2, count: 1, at: 0}, m)
	m.moved(1, 2, 3) // {0: 4, 1: 3, 2: 3}: nobody at 2 any more: unknown, above 2
	assert.Equal(t, 0, m.count)
	m.moved(0, 4, 3) // a worker moving above the bound leaves it unknown
	assert.Equal(t, 0, m.count)
	m.moved(2, 3, 2) // {0: 3, 1: 3, 2: 2}: back down to the bound: known again, alone
	assert.Equal(t, leastLoadMemo{load: 2, count: 1, at: 2}, m)
	m.moved(1, 3, 0) // below: a new least
	assert.Equal(t, leastLoadMemo{load: 0, count: 1, at: 1}, m)
	m.moved(2, 2, 7) // above the least, from above it: nothing
	assert.Equal(t, leastLoadMemo{load: 0, count: 1, at: 1}, m)
}

// The memo reads as a scan of the available workers would, whatever happens in between:
// weighted leases taken and released, health and membership changes, and reads of the least
// load (which fill it in) at random points.
func TestLeastLoadMemoAgreesWithAScan(t *testing.T) {
	r := newTestRouter(t, DefaultConfig().Policy, workerURLs(12)[:8])
	walkLoads(t, r, rand.New(rand.NewPCG(7, 11)), func(step int) {
		least, at, count := scannedLeast(&r.view)
		switch step % 3 {
		case 0:
			gotLeast, gotAt, gotCount := r.view.leastLoaded()
			assert.Equal(t, [3]int64{least, int64(at), int64(count)}, [3]int64{gotLeast, int64(gotAt), int64(gotCount)}, "step %d", step)
		case 1:
			if count > 0 {
				gotLeast, gotCount := r.view.leastLoadCount()
				assert.Equal(t, [2]int64{least, int64(count)}, [2]int64{gotLeast, int64(gotCount)}, "step %d", step)
			}
		}
	})
}

// The prefill memo (balance_by prefill) reads as a scan of the spillable workers' prefill loads
// would, through the same walk.
func TestLeastPrefillMemoAgreesWithAScan(t *testing.T) {
	p := DefaultConfig().Policy
	p.BalanceBy = LoadPrefill
	r := newTestRouter(t, p, workerURLs(12)[:8])
	walkLoads(t, r, rand.New(rand.NewPCG(3, 5)), func(step int) {
		least, _, count := scannedLeastOf(&r.view, func(w *worker) int64 { return w.prefillLoad })
		if count > 0 && step%2 == 0 {
			assert.Equal(t, least, r.view.leastPrefillLoad(), "step %d", step)
		}
	})
}

// walkLoads changes r's loads 20,000 times at random, over the first 8 of 12 workers, and calls
// check under the router's lock after each change: weighted leases taken, marked at their first
// token and released (a few as failures, which turn their worker suspect or ejected, out of the
// least loads), engine reports of the prefill queue given and forgotten, peer routes, health and
// membership changes.
func walkLoads(t *testing.T, r *Router, rng *rand.Rand, check func(step int)) {
	urls := workerURLs(12)
	var leases []LeaseID
	members := map[string]bool{}
	for _, u := range urls[:8] {
		members[u] = true
	}
	for step := 0; step < 20000; step++ {
		u := urls[rng.IntN(len(urls))]
		switch op := rng.IntN(24); {
		case op < 8 && members[u]:
			id, _, err := r.AcquireWeighted(u, nil, int64(1+rng.IntN(5)))
			require.NoError(t, err)
			leases = append(leases, id)
		case op < 11 && len(leases) > 0:
			r.FirstToken(leases[rng.IntN(len(leases))])
		case op < 17 && len(leases) > 0:
			i := rng.IntN(len(leases))
			outcome := OutcomeSuccess
			if op == 16 {
				outcome = OutcomeFailure
			}
			require.True(t, r.Finish(leases[i], outcome, t0))
			leases[i] = leases[len(leases)-1]
			leases = leases[:len(leases)-1]
		case op == 17 && members[u]:
			require.NoError(t, r.ReportLoad(u, EngineLoad{Requests: Unreported, Waiting: int64(rng.IntN(12)), WaitingRequests: Unreported}))
		case op == 18 && members[u]:
			require.NoError(t, r.ForgetLoad(u))
		case op == 19 && members[u]:
			require.NoError(t, r.PeerRoute(u, int64(1+rng.IntN(5)), nil))
		case op == 20 && members[u]:
			require.NoError(t, r.SetHealthy(u, rng.IntN(3) > 0))
		case op == 21 && !members[u]:
			require.NoError(t, r.AddWorker(u))
			members[u] = true
		case op == 22 && members[u] && len(members) > 1:
			require.NoError(t, r.RemoveWorker(u))
			delete(members, u)
		}
		r.mu.Lock()
		check(step)
		r.mu.Unlock()
	}
}

// scannedLeast is the least load of the spillable workers (contract: Worker failures: the
// trusted available ones, or every available one when none is trusted), the first carrying it in
// membership order and how many do, from the workers themselves (-1, 0, 0 with none available).
func scannedLeast(v *view) (least int64, at, count int) {
	return scannedLeastOf(v, func(w *worker) int64 { return w.load })
}

// scannedLeastOf is scannedLeast of the load that load reads.
func scannedLeastOf(v *view, load func(*worker) int64) (least int64, at, count int) {
	trusted := func(w *worker) bool {
		return w.healthy && w.breaker.state == breakerClosed && w.breaker.failures == 0 && w.probe.failures == 0
	}
	anyTrusted := false
	for _, w := range v.workers {
		anyTrusted = anyTrusted || trusted(w)
	}
	least = -1
	for i, w := range v.workers {
		if !w.healthy || (anyTrusted && !trusted(w)) {
			continue
		}
		switch l := load(w); {
		case least < 0 || l < least:
			least, at, count = l, i, 1
		case l == least:
			count++
		}
	}
	return least, at, count
}
