package core

import (
	"encoding/json"
	"sync/atomic"
	"time"
)

// A worker's availability has three sources (contract: Worker failures): the user's
// set_healthy, the active health check's probes and the circuit breaker fed by the outcomes of
// real requests. The user's word is final: a worker set unhealthy stays unavailable whatever
// the probes say. This file keeps their state machines' results together; the rules that route
// only ever see "available" and "spillable".

// WorkerCondition says why a worker is, or is not, available.
type WorkerCondition uint8

const (
	// ConditionAvailable: routable (it may have failed recently; see ConsecutiveFailures).
	ConditionAvailable WorkerCondition = iota
	// ConditionHalfOpen: back from an ejection on trial: routable, but no spill target until
	// its breaker closes.
	ConditionHalfOpen
	// ConditionEjected: its circuit breaker is open.
	ConditionEjected
	// ConditionUnhealthyProbe: its health check failed failure_threshold times in a row.
	ConditionUnhealthyProbe
	// ConditionUnhealthyUser: set unhealthy by the user.
	ConditionUnhealthyUser
	NumConditions
)

var conditionNames = [NumConditions]string{
	ConditionAvailable:      "available",
	ConditionHalfOpen:       "half_open",
	ConditionEjected:        "ejected",
	ConditionUnhealthyProbe: "unhealthy_probe",
	ConditionUnhealthyUser:  "unhealthy_user",
}

func (c WorkerCondition) String() string {
	if c < NumConditions {
		return conditionNames[c]
	}
	return "unknown_condition"
}

// Routable reports whether a worker in this condition can be chosen.
func (c WorkerCondition) Routable() bool { return c == ConditionAvailable || c == ConditionHalfOpen }

// ConditionNames are the conditions' names in the order of their codes.
func ConditionNames() []string { return conditionNames[:] }

func (c WorkerCondition) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// OutcomeCounts counts requests by outcome, indexed by Outcome.
type OutcomeCounts [NumOutcomes]uint64

// MarshalJSON writes {"success": n, "failure": n, ...}.
func (o OutcomeCounts) MarshalJSON() ([]byte, error) {
	out := make(map[string]uint64, NumOutcomes)
	for i, n := range o {
		out[Outcome(i).String()] = n
	}
	return json.Marshal(out)
}

// ProbeCounts counts a worker's health-check probes.
type ProbeCounts struct {
	Passed uint64 `json:"passed"`
	Failed uint64 `json:"failed"`
}

// condition is the first of the user's, the probes' and the breaker's verdicts that keeps the
// worker from being fully available, in that order of precedence.
func (w *worker) condition() WorkerCondition {
	switch {
	case !w.userHealthy:
		return ConditionUnhealthyUser
	case w.probe.down:
		return ConditionUnhealthyProbe
	case w.breaker.state == breakerOpen:
		return ConditionEjected
	case w.breaker.state == breakerHalfOpen:
		return ConditionHalfOpen
	default:
		return ConditionAvailable
	}
}

// trusted workers are available with nothing against them: no failed request since the last
// success, no failed probe since the last good one, not on trial. Only they take spills and
// enter the least loads, so that a worker failing fast never draws traffic by its low load.
func (w *worker) trusted() bool {
	return w.healthy && w.breaker.trusted() && w.probe.failures == 0
}

// ConditionChange is a worker's change of condition, told to the router's listener.
type ConditionChange struct {
	URL      string
	ID       uint32
	From, To WorkerCondition
	// Failures is the worker's failures in a row when it turned suspect (or 0).
	Failures int
	// Until is when an ejection ends (zero for other changes).
	Until time.Time
	// Removed: the worker left the membership (From and To are its last condition).
	Removed bool
}

// StoppedRouting tells whether the worker was routable before the change and is no longer:
// its condition turned unroutable, or it was removed.
func (c ConditionChange) StoppedRouting() bool {
	return c.From.Routable() && (c.Removed || !c.To.Routable())
}

// conditionListener holds the function told about condition changes (nil: nobody listens).
type conditionListener struct {
	fn atomic.Pointer[func(ConditionChange)]
}

// OnConditionChange sets the function told, after the router's locks are released, about every
// change of a worker's condition and of its suspicion (failures in a row turning from 0 to more
// or back), and about every worker removed. The health package sets it once, to log and to schedule the end of ejections.
func (r *Router) OnConditionChange(fn func(ConditionChange)) { r.listener.fn.Store(&fn) }

// announceIf announces change unless it is nil.
func (r *Router) announceIf(change *ConditionChange) {
	if change != nil {
		r.announce(*change)
	}
}

func (r *Router) announce(changes ...ConditionChange) {
	if len(changes) == 0 {
		return
	}
	if fn := r.listener.fn.Load(); fn != nil {
		for _, c := range changes {
			(*fn)(c)
		}
	}
}

// health is a worker's standing before a change: what reassess compares against.
type health struct {
	condition WorkerCondition
	trusted   bool
}

func (w *worker) health() health { return health{w.condition(), w.trusted()} }

// reassess applies a change to a member's verdicts (made since before was read): it updates the
// worker's availability and the view, and describes the change when there was one (nil when
// none: the plain path of every release goes through here and carries no change). The caller
// holds r.mu.
func (r *Router) reassess(w *worker, before health) *ConditionChange {
	if w.removed {
		return nil
	}
	w.healthy = w.userHealthy && !w.probe.down && w.breaker.state != breakerOpen
	after := w.health()
	if after == before {
		return nil
	}
	if before.condition.Routable() && !w.healthy {
		w.outages++ // key memory forgets what it remembered here
	}
	r.refreshAvailable()
	change := &ConditionChange{URL: w.url, ID: w.id, From: before.condition, To: after.condition, Failures: w.breaker.failures}
	if after.condition == ConditionEjected {
		change.Until = w.breaker.openUntil
	}
	return change
}

// recordOutcome counts how a lease on w ended and feeds the breaker, unless the request was
// sent before the worker's latest ejection (it was judged already); the caller holds r.mu.
func (r *Router) recordOutcome(w *worker, o Outcome, now time.Time, sentBeforeEjection bool) *ConditionChange {
	w.outcomes[o]++
	if w.removed || sentBeforeEjection || (o == OutcomeSuccess && w.breaker.trusted()) {
		return nil // the plain path: a success on a worker with nothing against it
	}
	before := w.health()
	w.breaker.record(o, &r.breakerCfg, now)
	return r.reassess(w, before)
}

// Finish releases a lease as Release does and records how the request ended on its worker, at
// time now (the circuit breaker's clock). It reports whether the lease was active.
func (r *Router) Finish(id LeaseID, o Outcome, now time.Time) bool {
	if o >= NumOutcomes {
		o = OutcomeNeutral
	}
	r.mu.Lock()
	ok, change := r.releaseWith(id, o, now)
	r.mu.Unlock()
	r.announceIf(change)
	return ok
}

// ReportProbe records one health-check probe of the member url whose id is id (a worker
// removed and added again under the same URL has another: a probe of the first never counts on
// the second): ok when it answered 2xx in time.
func (r *Router) ReportProbe(url string, id uint32, ok bool) error {
	return r.changeWorkerOf(url, id, func(w *worker) {
		if ok {
			w.probes.Passed++
		} else {
			w.probes.Failed++
		}
		w.probe.record(ok, &r.healthCheck)
	})
}

// changeWorker applies change to a member's verdicts under the lock, reassesses it and tells
// the listener about the change, if any, once the lock is released.
func (r *Router) changeWorker(url string, change func(*worker)) error {
	return r.changeWorkerOf(url, anyID, change)
}

// anyID names no worker id in particular: changeWorkerOf then takes the member at url.
const anyID = ^uint32(0)

// changeWorkerOf is changeWorker for the member at url whose id is id, or any id with anyID.
func (r *Router) changeWorkerOf(url string, id uint32, change func(*worker)) error {
	r.mu.Lock()
	w, member := r.members.lookup(memberURL(url))
	if !member || (id != anyID && w.id != id) {
		r.mu.Unlock()
		return unknownWorker(url)
	}
	before := w.health()
	change(w)
	c := r.reassess(w, before)
	r.mu.Unlock()
	r.announceIf(c)
	return nil
}

// ExpireEjections puts the workers whose ejection has ended by now on trial (half-open) and
// returns when the next ejection ends (zero when none is pending).
func (r *Router) ExpireEjections(now time.Time) time.Time {
	r.mu.Lock()
	var changes []ConditionChange
	var next time.Time
	for _, w := range r.members.workers {
		before := w.health()
		if w.breaker.expire(now) {
			if change := r.reassess(w, before); change != nil {
				changes = append(changes, *change)
			}
		} else if w.breaker.state == breakerOpen && (next.IsZero() || w.breaker.openUntil.Before(next)) {
			next = w.breaker.openUntil
		}
	}
	r.mu.Unlock()
	r.announce(changes...)
	return next
}

// HealthCheck returns the router's health-check settings (Disabled unless configured).
func (r *Router) HealthCheck() HealthCheckConfig { return r.healthCheck }

// Breaker returns the router's circuit-breaker settings.
func (r *Router) Breaker() BreakerConfig { return r.breakerCfg }
