package core

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// membersOf reads one figure of every member, in membership order, under the router's lock.
func membersOf(r *Router, figure func(*worker) int64) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int64, len(r.members.workers))
	for i, w := range r.members.workers {
		out[i] = figure(w)
	}
	return out
}

// routingLoads are the loads the policies compare, in membership order.
func routingLoads(r *Router) []int64 { return membersOf(r, func(w *worker) int64 { return w.load }) }

func TestEngineLoadIsTheReportPlusTheLeasesSince(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	old1, _, err := r.Acquire(urls[0], nil)
	require.NoError(t, err)
	old2, _, _ := r.Acquire(urls[0], nil)
	require.NoError(t, r.ReportLoad(urls[1], RequestsReport(5))) // other replicas' requests on w1
	assert.Equal(t, []int64{2, 5}, routingLoads(r))
	d := r.Route(&Request{})
	assert.Equal(t, urls[0], d.WorkerURL, "w0's 2 + 0 is below w1's report of 5")
	since, _, _ := r.Acquire(urls[1], nil)
	assert.Equal(t, []int64{3, 6}, routingLoads(r))
	// w0's engine reports 1: the three leases taken before it are in it (two have finished there).
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(1)))
	assert.Equal(t, []int64{1, 6}, routingLoads(r))
	r.Release(old1, false)
	r.Release(old2, false)
	assert.Equal(t, []int64{1, 6}, routingLoads(r), "the report counted them: the next report drops them")
	assert.Equal(t, int64(1), r.Workers()[0].Load, "this process's leases are still counted as leases")
	r.Release(since, false)
	assert.Equal(t, []int64{1, 5}, routingLoads(r), "a lease taken since the report leaves with its release")
	require.NoError(t, r.ForgetLoad(urls[1]))
	require.NoError(t, r.ForgetLoad(urls[1])) // twice is nothing
	assert.Equal(t, []int64{1, 0}, routingLoads(r), "without a report: this process's leases alone")
	r.Release(d.Lease, false)
	require.NoError(t, r.ForgetLoad(urls[0]))
	assert.Equal(t, []int64{0, 0}, routingLoads(r))
}

func TestEngineLoadDrivesTheBoundedRule(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, boundedPolicy(1.5, 2), urls)
	key := keyPreferringURL(t, urls, urls[0])
	assert.Equal(t, BranchExplicitRoutingKeyHit, r.Select(&Request{RoutingKey: key}).Branch)
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(10))) // other replicas fill w0
	assert.Equal(t, BranchExplicitRoutingKeySpillover, r.Select(&Request{RoutingKey: key}).Branch)
}

func TestEngineLoadErrors(t *testing.T) {
	urls := workerURLs(1)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	assert.EqualError(t, r.ReportLoad(urls[0], RequestsReport(-2)), "invalid configuration: engine load must be from 0 to 1099511627776 (or -1, unreported), got -2")
	assert.EqualError(t, r.ReportLoad(urls[0], EngineLoad{Requests: 1, Waiting: MaxEngineLoad + 1, WaitingRequests: Unreported}),
		"invalid configuration: engine waiting must be from 0 to 1099511627776 (or -1, unreported), got 1099511627777")
	assert.ErrorContains(t, r.ReportLoad(urls[0], EngineLoad{Requests: 1, Waiting: 0, WaitingRequests: -3}), "engine waiting requests must be from 0")
	assert.ErrorContains(t, r.ReportLoad(urls[0], RequestsReport(MaxEngineLoad+1)), "engine load must be from 0")
	assert.True(t, errors.Is(r.ReportLoad("http://127.0.0.1:9", RequestsReport(1)), ErrUnknownWorker))
	assert.True(t, errors.Is(r.ForgetLoad("http://127.0.0.1:9"), ErrUnknownWorker))
}

// prefillLoads are the prefill loads the policies compare, in membership order.
func prefillLoads(r *Router) []int64 {
	return membersOf(r, func(w *worker) int64 { return w.prefillLoad })
}

func waitingReport(requests, waiting int64) EngineLoad {
	return EngineLoad{Requests: requests, Waiting: waiting, WaitingRequests: Unreported}
}

// The vectors of docs/contract.md, "Engine load reports", step by step.
func TestEnginePrefillIsTheWaitingPlusTheLeasesSinceNotStarted(t *testing.T) {
	urls := workerURLs(1)
	r := newTestRouter(t, prefillCache(1.0, 2), urls)
	take := func(weight int64) LeaseID {
		id, _, err := r.AcquireWeighted(urls[0], nil, weight)
		require.NoError(t, err)
		return id
	}
	step := func(what string, prefill, load int64) {
		t.Helper()
		assert.Equal(t, []int64{prefill}, prefillLoads(r), what)
		assert.Equal(t, []int64{load}, routingLoads(r), what)
		checkInvariants(t, r)
	}
	three, two := take(3), take(2)
	require.NoError(t, r.ReportLoad(urls[0], waitingReport(9, 7)))
	step("the report", 7, 9)
	require.True(t, r.FirstToken(two))
	step("a lease taken before the report starts: the report counted it waiting", 7, 9)
	four, five := take(4), take(5)
	step("leases taken since", 16, 18)
	require.True(t, r.FirstToken(four))
	step("a lease taken since starts", 12, 18)
	require.True(t, r.Release(five, false))
	step("a lease taken since is released before its first token", 7, 13)
	require.True(t, r.Release(three, false))
	step("a lease taken before is released", 7, 13)
	st := r.Workers()[0]
	assert.Equal(t, [2]int64{0, 0}, [2]int64{st.PrefillLoad, st.PrefillRequests}, "statistics count this process's leases")
	require.NoError(t, r.ReportLoad(urls[0], RequestsReport(3)))
	step("a report without a waiting figure: this process's leases, both started", 0, 3)
	require.NoError(t, r.ReportLoad(urls[0], EngineLoad{Requests: Unreported, Waiting: Unreported, WaitingRequests: 2}))
	step("2 requests waiting weigh the mean held lease, (2 + 4) / 2; no load: the leases", 6, 6)
	require.NoError(t, r.ForgetLoad(urls[0]))
	step("forgotten", 0, 6)
}

func TestEngineWaitingRequestsWeighTheMeanLease(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, prefillCache(1.0, 2), urls)
	report := EngineLoad{Requests: Unreported, Waiting: Unreported, WaitingRequests: 3}
	require.NoError(t, r.ReportLoad(urls[1], report))
	assert.Equal(t, []int64{0, 3}, prefillLoads(r), "no lease held: each waiting request weighs 1")
	a, _, _ := r.AcquireWeighted(urls[0], nil, 100)
	_, _, _ = r.AcquireWeighted(urls[0], nil, 51)
	require.True(t, r.FirstToken(a))
	require.NoError(t, r.ReportLoad(urls[1], report))
	assert.Equal(t, []int64{51, 3 * 75}, prefillLoads(r), "held leases weigh 151 over 2: 75 each (rounded down)")
	report.Waiting = 40
	require.NoError(t, r.ReportLoad(urls[1], report))
	assert.Equal(t, []int64{51, 40}, prefillLoads(r), "a waiting figure in lease weights comes first")
	require.NoError(t, r.ReportLoad(urls[1], EngineLoad{Requests: Unreported, Waiting: Unreported, WaitingRequests: MaxEngineLoad}))
	assert.Equal(t, []int64{51, MaxEngineLoad}, prefillLoads(r), "the product is capped")
	checkInvariants(t, r)
}

func TestEnginePrefillDrivesThePrefillBound(t *testing.T) {
	urls := workerURLs(4)
	r := newTestRouter(t, prefillBounded(1.0, 2, SpillLeastLoaded), urls)
	key := keyPreferringURL(t, urls, urls[0])
	require.NoError(t, r.ReportLoad(urls[0], waitingReport(20, 2))) // decoding 18, 2 waiting: not overloaded
	assert.Equal(t, BranchExplicitRoutingKeyHit, r.Select(&Request{RoutingKey: key}).Branch)
	require.NoError(t, r.ReportLoad(urls[0], waitingReport(20, 3))) // 3 - 0 > 2 and 3 > 0.75
	assert.Equal(t, BranchExplicitRoutingKeySpillover, r.Select(&Request{RoutingKey: key}).Branch)
}

// Random leases, first tokens, releases, reports and expiries against a model that keeps, per
// worker, the standing report and the leases taken since it, both loads.
func TestEnginePrefillAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	urls := workerURLs(3)
	r := newTestRouter(t, prefillCache(1.0, 2), urls)
	type lease struct {
		id            LeaseID
		worker        int
		weight        int64
		since, waited bool // taken since its worker's standing report; not yet past its first token
	}
	var held []*lease
	requests, waiting := []int64{-1, -1, -1}, []int64{-1, -1, -1} // -1: no figure stands
	for step := 0; step < 20000; step++ {
		i := rng.IntN(len(urls))
		switch rng.IntN(7) {
		case 0, 1:
			weight := int64(1 + rng.IntN(3))
			id, _, err := r.AcquireWeighted(urls[i], nil, weight)
			require.NoError(t, err)
			held = append(held, &lease{id, i, weight, true, true})
		case 2:
			if len(held) > 0 {
				l := held[rng.IntN(len(held))]
				require.Equal(t, l.waited, r.FirstToken(l.id))
				l.waited = false
			}
		case 3:
			if len(held) > 0 {
				k := rng.IntN(len(held))
				require.True(t, r.Release(held[k].id, false))
				held = append(held[:k], held[k+1:]...)
			}
		case 4, 5:
			e := EngineLoad{Requests: int64(rng.IntN(12)) - 1, Waiting: int64(rng.IntN(8)) - 1, WaitingRequests: Unreported}
			require.NoError(t, r.ReportLoad(urls[i], e))
			requests[i], waiting[i] = e.Requests, e.Waiting
			for _, l := range held {
				l.since = l.since && l.worker != i
			}
		default:
			require.NoError(t, r.ForgetLoad(urls[i]))
			requests[i], waiting[i] = -1, -1
		}
		want, wantPrefill := make([]int64, len(urls)), make([]int64, len(urls))
		for w := range urls {
			want[w], wantPrefill[w] = max(requests[w], 0), max(waiting[w], 0)
			for _, l := range held {
				if l.worker == w && (requests[w] < 0 || l.since) {
					want[w] += l.weight
				}
				if l.worker == w && l.waited && (waiting[w] < 0 || l.since) {
					wantPrefill[w] += l.weight
				}
			}
		}
		require.Equal(t, want, routingLoads(r), "step %d", step)
		require.Equal(t, wantPrefill, prefillLoads(r), "step %d", step)
		checkInvariants(t, r)
	}
}
