package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The state machines of contract "Worker failures", driven by a fake clock (an explicit time).

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func healthRouter(t *testing.T, n int, breaker *BreakerConfig, probe *HealthCheckConfig) (*Router, []string) {
	t.Helper()
	urls := workerURLs(n)
	r, err := NewRouter(Config{WorkerURLs: urls, Policy: DefaultConfig().Policy, VirtualNodes: DefaultVirtualNodes, Breaker: breaker, HealthCheck: probe})
	require.NoError(t, err)
	return r, urls
}

// failOn takes a lease on url and finishes it with o at now.
func failOn(t *testing.T, r *Router, url string, o Outcome, now time.Time) {
	t.Helper()
	id, _, err := r.Acquire(url, nil)
	require.NoError(t, err)
	require.True(t, r.Finish(id, o, now))
}

func condition(r *Router, url string) WorkerCondition {
	for _, w := range r.Workers() {
		if w.URL == url {
			return w.Condition
		}
	}
	return NumConditions
}

func TestBreakerEjectsAfterThresholdAndTrialsAfterTimeout(t *testing.T) {
	cfg := BreakerConfig{FailureThreshold: 3, SuccessThreshold: 2, Timeout: 10 * time.Second}
	r, urls := healthRouter(t, 3, &cfg, nil)
	var changes []ConditionChange
	r.OnConditionChange(func(c ConditionChange) { changes = append(changes, c) })

	failOn(t, r, urls[0], OutcomeFailure, t0)
	failOn(t, r, urls[0], OutcomeFailure, t0)
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]), "2 of 3 failures: still available")
	assert.Equal(t, 2, r.Workers()[0].ConsecutiveFailures)
	failOn(t, r, urls[0], OutcomeFailure, t0)
	assert.Equal(t, ConditionEjected, condition(r, urls[0]))
	assert.False(t, r.Workers()[0].Healthy)
	assert.Equal(t, uint64(1), r.Workers()[0].Ejections)

	assert.Equal(t, t0.Add(10*time.Second), r.ExpireEjections(t0.Add(9*time.Second)), "not yet: the next end is returned")
	assert.Equal(t, ConditionEjected, condition(r, urls[0]))
	assert.True(t, r.ExpireEjections(t0.Add(10*time.Second)).IsZero())
	assert.Equal(t, ConditionHalfOpen, condition(r, urls[0]))
	assert.True(t, r.Workers()[0].Healthy, "half-open workers are routable")

	failOn(t, r, urls[0], OutcomeSuccess, t0)
	assert.Equal(t, ConditionHalfOpen, condition(r, urls[0]), "1 of 2 successes")
	failOn(t, r, urls[0], OutcomeSuccess, t0)
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]))

	var seen []WorkerCondition
	for _, c := range changes {
		assert.Equal(t, urls[0], c.URL)
		if c.From != c.To {
			seen = append(seen, c.To)
		}
	}
	assert.Equal(t, []WorkerCondition{ConditionEjected, ConditionHalfOpen, ConditionAvailable}, seen)
}

func TestBreakerHalfOpenFailureEjectsAgain(t *testing.T) {
	cfg := BreakerConfig{FailureThreshold: 2, SuccessThreshold: 2, Timeout: time.Second}
	r, urls := healthRouter(t, 2, &cfg, nil)
	failOn(t, r, urls[1], OutcomeFailure, t0)
	failOn(t, r, urls[1], OutcomeFailure, t0)
	r.ExpireEjections(t0.Add(time.Second))
	require.Equal(t, ConditionHalfOpen, condition(r, urls[1]))
	failOn(t, r, urls[1], OutcomeFailure, t0.Add(2*time.Second))
	assert.Equal(t, ConditionEjected, condition(r, urls[1]), "one failure on trial is enough")
	assert.Equal(t, uint64(2), r.Workers()[1].Ejections)
	assert.Equal(t, t0.Add(3*time.Second), r.ExpireEjections(t0.Add(2*time.Second)))
}

// Regression (found by an audit): a request on its way when the worker was ejected that ended
// after the ejection had run its time counted as the half-open worker's trial and ejected it
// again (contract: Worker failures, "Circuit breaker"). Streams outlive a 10 s ejection.
func TestBreakerIgnoresRequestsSentBeforeTheEjection(t *testing.T) {
	cfg := BreakerConfig{FailureThreshold: 1, SuccessThreshold: 2, Timeout: 10 * time.Second}
	r, urls := healthRouter(t, 2, &cfg, nil)
	var early [3]LeaseID
	for i := range early {
		id, _, err := r.Acquire(urls[0], nil)
		require.NoError(t, err)
		early[i] = id
	}
	failOn(t, r, urls[0], OutcomeFailure, t0)
	require.Equal(t, ConditionEjected, condition(r, urls[0]))
	require.True(t, r.Finish(early[0], OutcomeFailure, t0.Add(time.Second)), "while ejected")
	r.ExpireEjections(t0.Add(10 * time.Second))
	require.Equal(t, ConditionHalfOpen, condition(r, urls[0]))
	require.True(t, r.Finish(early[1], OutcomeFailure, t0.Add(11*time.Second)))
	require.True(t, r.Finish(early[2], OutcomeSuccess, t0.Add(11*time.Second)))
	s := r.Workers()[0]
	assert.Equal(t, ConditionHalfOpen, s.Condition, "on trial: only requests sent since count")
	assert.Equal(t, uint64(1), s.Ejections)
	assert.Equal(t, uint64(3), s.Outcomes[OutcomeFailure], "their outcomes are still counted")
	failOn(t, r, urls[0], OutcomeSuccess, t0.Add(12*time.Second))
	assert.Equal(t, ConditionHalfOpen, condition(r, urls[0]), "1 of 2 successes since the ejection")
	failOn(t, r, urls[0], OutcomeSuccess, t0.Add(12*time.Second))
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]))
}

func TestBreakerCountsFailuresInARowOnly(t *testing.T) {
	cfg := BreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, Timeout: time.Second}
	r, urls := healthRouter(t, 2, &cfg, nil)
	for _, o := range []Outcome{OutcomeFailure, OutcomeSuccess, OutcomeFailure, OutcomePushback, OutcomeNeutral} {
		failOn(t, r, urls[0], o, t0)
	}
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]), "a success resets; pushback and 4xx count neither way")
	assert.Equal(t, 1, r.Workers()[0].ConsecutiveFailures)
	// A plain Release is a success too.
	id, _, _ := r.Acquire(urls[0], nil)
	require.True(t, r.Release(id, false))
	assert.Equal(t, 0, r.Workers()[0].ConsecutiveFailures)
	assert.Equal(t, OutcomeCounts{OutcomeSuccess: 2, OutcomeFailure: 2, OutcomePushback: 1, OutcomeNeutral: 1}, r.Workers()[0].Outcomes)
	assert.Equal(t, uint64(6), r.Workers()[0].Routed)
}

func TestBreakerDisabledNeverEjects(t *testing.T) {
	cfg := DefaultBreakerConfig()
	cfg.Disabled = true
	r, urls := healthRouter(t, 2, &cfg, nil)
	for i := 0; i < 50; i++ {
		failOn(t, r, urls[0], OutcomeFailure, t0)
	}
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]))
	assert.Equal(t, uint64(50), r.Workers()[0].Outcomes[OutcomeFailure])
}

func TestProbeThresholdsAndUserPrecedence(t *testing.T) {
	probe := DefaultHealthCheckConfig() // 3 failures down, 2 successes up
	r, urls := healthRouter(t, 2, nil, &probe)
	id0, id1 := r.Workers()[0].ID, r.Workers()[1].ID
	for i := 0; i < 2; i++ {
		require.NoError(t, r.ReportProbe(urls[0], id0, false))
	}
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]))
	require.NoError(t, r.ReportProbe(urls[0], id0, false))
	assert.Equal(t, ConditionUnhealthyProbe, condition(r, urls[0]))
	require.NoError(t, r.ReportProbe(urls[0], id0, true))
	assert.Equal(t, ConditionUnhealthyProbe, condition(r, urls[0]), "1 of 2 good probes")
	require.NoError(t, r.SetHealthy(urls[0], false))
	assert.Equal(t, ConditionUnhealthyUser, condition(r, urls[0]))
	require.NoError(t, r.ReportProbe(urls[0], id0, true))
	assert.Equal(t, ConditionUnhealthyUser, condition(r, urls[0]), "the user's word wins over the probes")
	assert.False(t, r.Workers()[0].Healthy)
	require.NoError(t, r.SetHealthy(urls[0], true))
	assert.Equal(t, ConditionAvailable, condition(r, urls[0]), "probes say up, the user says up")
	require.NoError(t, r.ReportProbe(urls[1], id1, false))
	require.NoError(t, r.ReportProbe(urls[1], id1, false))
	require.NoError(t, r.ReportProbe(urls[1], id1, false))
	require.NoError(t, r.SetHealthy(urls[1], true))
	assert.Equal(t, ConditionUnhealthyProbe, condition(r, urls[1]), "set_healthy(True) does not override failing probes")
	assert.ErrorIs(t, r.ReportProbe("http://127.0.0.1:1", id0, true), ErrUnknownWorker)
	assert.ErrorIs(t, r.ReportProbe(urls[0], id1, true), ErrUnknownWorker, "a member's URL with another worker's id")
	assert.Equal(t, ProbeCounts{Passed: 2, Failed: 3}, r.Workers()[0].Probes)
}

// An ejected worker and one with fresh failures are never spill targets, though their load is
// the lowest (contract: Worker failures, "No black holes").
func TestFailingWorkersTakeNoSpills(t *testing.T) {
	for _, target := range []SpillTarget{SpillClockwise, SpillLeastLoaded} {
		r, urls := healthRouter(t, 3, nil, nil)
		r.policy.SpillTarget = target
		key := newRefRing(urls, DefaultVirtualNodes).keyWhere(t, func(order []string) bool {
			return order[0] == urls[0] && order[1] == urls[1] // w1 is w0's clockwise spill target
		})
		failOn(t, r, urls[1], OutcomeFailure, t0) // w1 turns suspect: 1 failure in a row
		held := holdLoads(t, r, []int{10, 0, 2})  // w0 overloaded (the trusted mean 6), w1 the least loaded
		d := r.Route(&Request{RoutingKey: key})
		assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch, target.String())
		assert.Equal(t, urls[2], d.WorkerURL, "%s: the suspect w1 takes no spill", target)
		r.Release(d.Lease, false)

		// The gap and the mean are measured over trusted workers only: w2 at 2 is the least load there.
		failOn(t, r, urls[1], OutcomeSuccess, t0)
		d = r.Route(&Request{RoutingKey: key})
		assert.Equal(t, urls[1], d.WorkerURL, "%s: trusted again after a success", target)
		r.Release(d.Lease, false)
		releaseAll(t, r, held)
	}
}

func TestEjectedWorkerIsNeverChosen(t *testing.T) {
	cfg := BreakerConfig{FailureThreshold: 1, SuccessThreshold: 1, Timeout: time.Minute}
	for _, kind := range []PolicyKind{PolicyBoundedConsistentHashing, PolicyLeastLoad, PolicyPowerOfTwo, PolicyRandom, PolicyRoundRobin, PolicyConsistentHashing} {
		urls := workerURLs(3)
		policy := DefaultConfig().Policy
		policy.Kind = kind
		if !kind.bounds() {
			policy.MaxLoadSkew, policy.MinLoadGap = 0, 0
		}
		r, err := NewRouter(Config{WorkerURLs: urls, Policy: policy, VirtualNodes: DefaultVirtualNodes, Breaker: &cfg})
		require.NoError(t, err)
		failOn(t, r, urls[0], OutcomeFailure, t0)
		require.Equal(t, ConditionEjected, condition(r, urls[0]))
		for i := 0; i < 200; i++ {
			d := r.Route(&Request{RoutingKey: []byte{byte(i), 'k'}})
			require.NotEqual(t, urls[0], d.WorkerURL, kind.String())
			r.Release(d.Lease, false)
		}
	}
}

// Regression (found by a review; contract: Worker failures, "No black holes"): the relative
// bound's mean was over every available worker while spills go only to trusted ones, so suspect
// workers, which fail fast and hold little, pulled the bound below every trusted worker and a
// hot key stayed on its overloaded worker (explicit_routing_key_no_eligible_candidate, which the
// contract says a skew of at least 1 never reaches). The mean is over the trusted workers.
func TestSuspectWorkersLeaveTheMeanToTheTrustedOnes(t *testing.T) {
	urls := workerURLs(4)
	key := keyPreferringURL(t, urls, urls[0])
	for _, by := range []LoadMeasure{LoadInFlight, LoadPrefill} {
		for _, target := range []SpillTarget{SpillClockwise, SpillLeastLoaded} {
			for _, c := range []struct {
				loads  []int
				branch Branch
				worker string
			}{
				{[]int{9, 6, 0, 0}, BranchExplicitRoutingKeyHit, urls[0]},       // trusted mean 7.5, bound 11.25
				{[]int{9, 2, 0, 0}, BranchExplicitRoutingKeySpillover, urls[1]}, // bound 8.25: to w1, no suspect
			} {
				policy := Policy{Kind: PolicyBoundedConsistentHashing, MaxLoadSkew: 1.5, MinLoadGap: 2, SpillTarget: target, BalanceBy: by}
				r := newTestRouter(t, policy, urls)
				failOn(t, r, urls[2], OutcomeFailure, t0)
				failOn(t, r, urls[3], OutcomeFailure, t0)
				held := holdLoads(t, r, c.loads)
				d := r.Route(&Request{RoutingKey: key})
				assert.Equal(t, c.branch, d.Branch, "%v %v %v", by, target, c.loads)
				assert.Equal(t, c.worker, d.WorkerURL, "%v %v %v", by, target, c.loads)
				r.Release(d.Lease, false)
				releaseAll(t, r, held)
			}
		}
	}
}

// Every available worker failing lately: they are all spill targets again.
func TestAllSuspectWorkersStillSpill(t *testing.T) {
	r, urls := healthRouter(t, 2, nil, nil)
	key := keyPreferringURL(t, urls, urls[0])
	failOn(t, r, urls[0], OutcomeFailure, t0)
	failOn(t, r, urls[1], OutcomeFailure, t0)
	held := holdLoads(t, r, []int{6, 0})
	d := r.Route(&Request{RoutingKey: key})
	assert.Equal(t, urls[1], d.WorkerURL)
	assert.Equal(t, BranchExplicitRoutingKeySpillover, d.Branch)
	r.Release(d.Lease, false)
	releaseAll(t, r, held)
}

func TestRouteAvoidingFollowsTheKeysRing(t *testing.T) {
	r, urls := healthRouter(t, 4, nil, nil)
	ring := newRefRing(urls, DefaultVirtualNodes)
	key := []byte("session-42")
	order := ring.order(key)
	first := r.Route(&Request{RoutingKey: key})
	require.Equal(t, order[0], first.WorkerURL)
	tried := []uint32{first.WorkerID}
	for step := 1; step < 4; step++ {
		d := r.RouteAvoiding(&Request{RoutingKey: key}, tried)
		assert.Equal(t, BranchFailover, d.Branch)
		assert.Equal(t, order[step], d.WorkerURL, "retry %d goes to the key's next ring worker", step)
		assert.NotContains(t, tried, d.WorkerID)
		tried = append(tried, d.WorkerID)
		r.Release(d.Lease, false)
	}
	d := r.RouteAvoiding(&Request{RoutingKey: key}, tried)
	assert.Equal(t, BranchNoHealthyWorkers, d.Branch, "every worker tried")
	assert.Zero(t, d.Lease)
	assert.Equal(t, Decision{Branch: BranchTargetWorkerMiss}, r.RouteAvoiding(&Request{HasTarget: true, TargetIndex: 1}, tried[:1]), "a target worker has no fallback")
	r.Release(first.Lease, false)
	assert.Equal(t, 0, r.Stats().ActiveLeases)
	for _, w := range r.Workers() {
		assert.True(t, w.Healthy, "setting tried workers aside is undone")
	}
	assert.Equal(t, uint64(3), r.Stats().Branches[BranchFailover])
}

func TestRouteAvoidingKeylessUsesThePolicyAmongUntried(t *testing.T) {
	urls := workerURLs(3)
	r, err := NewRouter(Config{WorkerURLs: urls, Policy: Policy{Kind: PolicyLeastLoad}, VirtualNodes: DefaultVirtualNodes})
	require.NoError(t, err)
	held := holdLoads(t, r, []int{0, 3, 1})
	ids := map[string]uint32{}
	for _, w := range r.Workers() {
		ids[w.URL] = w.ID
	}
	d := r.RouteAvoiding(&Request{}, []uint32{ids[urls[0]]})
	assert.Equal(t, BranchLeastLoad, d.Branch)
	assert.Equal(t, urls[2], d.WorkerURL, "the least loaded of the untried")
	r.Release(d.Lease, false)
	releaseAll(t, r, held)
}

func TestHealthSettingsRefusedWithTheirNames(t *testing.T) {
	for text, want := range map[string]string{
		`{"worker_urls":[],"health_check":{"interval_secs":0}}`: "health_check_interval_secs",
		`{"worker_urls":[],"health_check":{"timeout_secs":-1}}`: "health_check_timeout_secs",
		// Regression (found by a review): a negative time was reported as "got 0".
		`{"worker_urls":[],"health_check":{"interval_secs":-1.5}}`:             "health_check_interval_secs must be a number of seconds > 0 and at most 86400, got -1.5",
		`{"worker_urls":[],"circuit_breaker":{"timeout_duration_secs":-2}}`:    "got -2",
		`{"worker_urls":[],"health_check":{"failure_threshold":0}}`:            "health_failure_threshold",
		`{"worker_urls":[],"health_check":{"success_threshold":-2}}`:           "health_success_threshold",
		`{"worker_urls":[],"health_check":{"endpoint":"health"}}`:              "health_check_endpoint",
		`{"worker_urls":[],"health_check":{"endpoint":"http://x/health"}}`:     "health_check_endpoint",
		`{"worker_urls":[],"circuit_breaker":{"failure_threshold":-1}}`:        "cb_failure_threshold",
		`{"worker_urls":[],"circuit_breaker":{"success_threshold":0}}`:         "cb_success_threshold",
		`{"worker_urls":[],"circuit_breaker":{"timeout_duration_secs":0}}`:     "cb_timeout_duration_secs",
		`{"worker_urls":[],"circuit_breaker":"yes"}`:                           "circuit_breaker must be true, false or an object",
		`{"worker_urls":[],"health_check":{"interval":1}}`:                     "unknown field",
		`{"worker_urls":[],"circuit_breaker":{"timeout_duration_secs":1e300}}`: "cb_timeout_duration_secs",
	} {
		_, err := ParseConfig([]byte(text))
		require.Error(t, err, text)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), want, text)
	}
	cfg, err := ParseConfig([]byte(`{"worker_urls":[],"health_check":{"endpoint":"/ready","interval_secs":0.5},"circuit_breaker":false}`))
	require.NoError(t, err)
	assert.Equal(t, HealthCheckConfig{Endpoint: "/ready", Interval: 500 * time.Millisecond, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 2}, *cfg.HealthCheck)
	assert.True(t, cfg.Breaker.Disabled)
	again, err := ParseConfig(must(cfg.MarshalJSON()))
	require.NoError(t, err)
	assert.Equal(t, cfg, again)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A worker that leaves the membership, by any of the calls that remove one, is announced once,
// with its last condition, after the router's locks are released (the listener may call it).
func TestARemovedWorkerIsAnnounced(t *testing.T) {
	r, urls := healthRouter(t, 4, nil, nil)
	require.NoError(t, r.SetHealthy(urls[3], false))
	ids := map[string]uint32{}
	for _, m := range r.Members() {
		ids[m.URL] = m.ID
	}
	var changes []ConditionChange
	r.OnConditionChange(func(c ConditionChange) {
		changes = append(changes, c)
		_ = r.Members() // would deadlock under the membership lock
	})
	require.NoError(t, r.RemoveWorker(urls[0]))
	require.NoError(t, r.RemoveMember(Member{ID: ids[urls[1]], URL: urls[1]}))
	require.NoError(t, r.SetWorkers(urls[2:3]))
	require.NoError(t, r.AddWorker(urls[0]))
	require.Error(t, r.RemoveWorker("http://127.0.0.1:1"))
	want := []ConditionChange{
		{URL: urls[0], ID: ids[urls[0]], From: ConditionAvailable, To: ConditionAvailable, Removed: true},
		{URL: urls[1], ID: ids[urls[1]], From: ConditionAvailable, To: ConditionAvailable, Removed: true},
		{URL: urls[3], ID: ids[urls[3]], From: ConditionUnhealthyUser, To: ConditionUnhealthyUser, Removed: true},
	}
	assert.Equal(t, want, changes)
	assert.True(t, changes[0].StoppedRouting())
	assert.False(t, changes[2].StoppedRouting(), "an unroutable worker removed had stopped routing before")
}
