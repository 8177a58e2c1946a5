package core

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// routingLoads are the loads the policies compare, in membership order.
func routingLoads(r *Router) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int64, len(r.members.workers))
	for i, w := range r.members.workers {
		out[i] = w.load
	}
	return out
}

func TestEngineLoadIsTheReportPlusTheLeasesSince(t *testing.T) {
	urls := workerURLs(2)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	old1, _, err := r.Acquire(urls[0], nil)
	require.NoError(t, err)
	old2, _, _ := r.Acquire(urls[0], nil)
	require.NoError(t, r.ReportLoad(urls[1], 5)) // other replicas' requests on w1
	assert.Equal(t, []int64{2, 5}, routingLoads(r))
	d := r.Route(&Request{})
	assert.Equal(t, urls[0], d.WorkerURL, "w0's 2 + 0 is below w1's report of 5")
	since, _, _ := r.Acquire(urls[1], nil)
	assert.Equal(t, []int64{3, 6}, routingLoads(r))
	// w0's engine reports 1: the three leases taken before it are in it (two have finished there).
	require.NoError(t, r.ReportLoad(urls[0], 1))
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
	require.NoError(t, r.ReportLoad(urls[0], 10)) // other replicas fill w0
	assert.Equal(t, BranchExplicitRoutingKeySpillover, r.Select(&Request{RoutingKey: key}).Branch)
}

func TestEngineLoadErrors(t *testing.T) {
	urls := workerURLs(1)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	assert.EqualError(t, r.ReportLoad(urls[0], -1), "invalid configuration: engine load must be from 0 to 1099511627776, got -1")
	assert.ErrorContains(t, r.ReportLoad(urls[0], MaxEngineLoad+1), "engine load must be from 0")
	assert.True(t, errors.Is(r.ReportLoad("http://127.0.0.1:9", 1), ErrUnknownWorker))
	assert.True(t, errors.Is(r.ForgetLoad("http://127.0.0.1:9"), ErrUnknownWorker))
}

// Random leases, releases, reports and expiries against a model that keeps, per worker, the
// standing report and the set of leases taken since it.
func TestEngineLoadAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	urls := workerURLs(3)
	r := newTestRouter(t, Policy{Kind: PolicyLeastLoad}, urls)
	type lease struct {
		id     LeaseID
		worker int
		weight int64
	}
	var held []lease
	report := []int64{-1, -1, -1}            // -1: none stands
	since := []map[LeaseID]int64{{}, {}, {}} // leases taken since the report
	for step := 0; step < 20000; step++ {
		i := rng.IntN(len(urls))
		switch rng.IntN(6) {
		case 0, 1:
			weight := int64(1 + rng.IntN(3))
			id, _, err := r.AcquireWeighted(urls[i], nil, weight)
			require.NoError(t, err)
			held = append(held, lease{id, i, weight})
			since[i][id] = weight
		case 2, 3:
			if len(held) > 0 {
				k := rng.IntN(len(held))
				l := held[k]
				held = append(held[:k], held[k+1:]...)
				require.True(t, r.Release(l.id, false))
				delete(since[l.worker], l.id)
			}
		case 4:
			load := int64(rng.IntN(10))
			require.NoError(t, r.ReportLoad(urls[i], load))
			report[i], since[i] = load, map[LeaseID]int64{}
		default:
			require.NoError(t, r.ForgetLoad(urls[i]))
			report[i] = -1
		}
		want := make([]int64, len(urls))
		for w := range urls {
			if report[w] < 0 {
				for _, l := range held {
					if l.worker == w {
						want[w] += l.weight
					}
				}
				continue
			}
			want[w] = report[w]
			for _, weight := range since[w] {
				want[w] += weight
			}
		}
		require.Equal(t, want, routingLoads(r), "step %d", step)
		r.mu.Lock()
		total := r.view.availableLoad
		r.mu.Unlock()
		require.Equal(t, want[0]+want[1]+want[2], total, "step %d: the running total", step)
	}
}
