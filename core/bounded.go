package core

// selectBounded is bounded consistent hashing with an absolute load gap (docs/contract.md, "The
// bounded rule"). Only an explicit routing key may spill; every other input is routed as by strict hashing.
func selectBounded(v *view, req *Request, keyPos uint64, p *Policy) (int, Branch) {
	return selectByPrecedence(v, req, keyPos, func(position uint64) (int, Branch) {
		return selectBoundedExplicit(v, position, p)
	}, BranchImplicitRoutingKeyHit)
}

// selectBoundedExplicit keeps the preferred worker unless it is clearly overloaded (see
// spillTest). Then the request spills to a worker whose load is at most maxLoadSkew times the
// mean, chosen as p.SpillTarget says; if none is, it stays. With key memory, a key first goes
// to its last worker, as long as that worker is not clearly overloaded. The loads never count
// the request being routed; they are the prefill loads under balance_by prefill.
func selectBoundedExplicit(v *view, position uint64, p *Policy) (int, Branch) {
	preferred := v.preferred(position)
	test := newSpillTest(v, p)
	if last := v.memory.recall(position); last >= 0 && last != preferred && !test.overloaded(v.workers[last]) {
		return last, BranchExplicitRoutingKeyRemembered
	}
	if !test.overloaded(v.workers[preferred]) {
		return preferred, BranchExplicitRoutingKeyHit
	}
	target := p.SpillTarget.find(&test, position)
	if target < 0 {
		return preferred, BranchExplicitRoutingKeyNoEligibleCandidate
	}
	return target, BranchExplicitRoutingKeySpillover
}

// spillTest tells whether a worker is clearly overloaded: its load (as the policy's balance_by
// measures it) exceeds both the least load of the spillable workers by more than gap and the
// mean by more than a factor maxLoadSkew (both strict). The relative test needs only the running
// total; the least load, kept by a memo for each measure, is read only when it fires.
type spillTest struct {
	v     *view
	by    LoadMeasure
	bound float64 // the mean load times maxLoadSkew: also the spill target's load bound
	gap   int64
}

func newSpillTest(v *view, p *Policy) spillTest {
	return spillTest{v: v, by: p.BalanceBy, bound: v.meanLoad(p.BalanceBy) * p.MaxLoadSkew, gap: p.MinLoadGap}
}

// overloaded is the test on w; the in-flight form stays small enough to be inlined.
func (t *spillTest) overloaded(w *worker) bool {
	if t.by == LoadPrefill {
		return float64(w.prefillLoad) > t.bound && w.prefillLoad-t.v.leastPrefillLoad() > t.gap
	}
	return float64(w.load) > t.bound && w.load-t.v.minLoad() > t.gap
}
