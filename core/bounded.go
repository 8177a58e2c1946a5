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
// the request being routed.
func selectBoundedExplicit(v *view, position uint64, p *Policy) (int, Branch) {
	preferred := v.preferred(position)
	test := spillTest{v: v, bound: v.meanLoad() * p.MaxLoadSkew, gap: p.MinLoadGap}
	if last := v.memory.recall(position); last >= 0 && last != preferred && !test.overloaded(v.workers[last].load) {
		return last, BranchExplicitRoutingKeyRemembered
	}
	if !test.overloaded(v.workers[preferred].load) {
		return preferred, BranchExplicitRoutingKeyHit
	}
	target := p.SpillTarget.find(&test, position)
	if target < 0 {
		return preferred, BranchExplicitRoutingKeyNoEligibleCandidate
	}
	return target, BranchExplicitRoutingKeySpillover
}

// spillTest tells whether a worker is clearly overloaded: its load exceeds both the least load
// of the available workers by more than gap and the mean by more than a factor maxLoadSkew
// (both strict). The relative test needs only the running total; the least load is read only
// when it fires.
type spillTest struct {
	v     *view
	bound float64 // the mean load times maxLoadSkew: also the spill target's load bound
	gap   int64
}

func (t *spillTest) overloaded(load int64) bool {
	return float64(load) > t.bound && load-t.v.minLoad() > t.gap
}
