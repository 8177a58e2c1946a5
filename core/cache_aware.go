package core

import "math"

// cache_aware sends a request to the worker most likely to hold its prefix in its KV cache, as
// long as that worker is not clearly overloaded (docs/contract.md, "cache_aware"). The input is
// the request's prefix as chained block hashes (Request.PrefixBlocks); the router remembers, per
// worker, the blocks it has sent there (blockIndex) and matches a request against them.
//
// The rule, after X-SMG-Target-Worker (which it honours as the other policies do):
//   - A worker passes when the bounded rule's spill test would not call it overloaded (its
//     weighted load does not exceed both max_load_skew times the mean and the least load plus
//     min_load_gap). The least loaded worker always passes, so some worker always does.
//   - depth is the number of leading blocks of the request each held by some passing worker;
//     with chained hashes it is the longest prefix a passing worker holds. The candidates are
//     the passing workers holding block depth-1 (with chained hashes: those holding that prefix).
//   - With candidates, and depth more than cache_threshold of the request's blocks, the request
//     goes to one of them (cache_aware_prefix_hit); otherwise to any passing worker
//     (cache_aware_key_hit with a routing key, cache_aware_no_match without). The threshold keeps
//     a prefix every worker soon holds (a shared system prompt) from deciding alone: without it,
//     workers that have received nothing never hold it and would never be chosen.
//     Among several candidates, the least loaded. Without a hit, a routing key (explicit, else
//     implicit) picks the first worker clockwise from its ring position that is not above the
//     mean load, so routers in front of the same workers agree where a key starts without piling
//     it on a busy worker; without a key the least loaded worker. Ties go clockwise from the key's
//     position, else the request's first block's (membership order for a request with no
//     blocks), so every process breaks them the same way.
//   - When some available worker holds block depth (a longer prefix) but is overloaded, the
//     branch is cache_aware_balance instead, whichever worker was chosen; so it is when
//     hit_wait_factor turns a hit into a miss (below).
//   - With balance_by prefill (docs/contract.md, "Prefill load") the test reads the prefill
//     loads, the candidates are ranked by prefill load, then the fewest leases in flight, and
//     without a hit the request goes to the first worker clockwise from the same position (the
//     key's, else the first unmatched block's) among those within half a mean lease of the
//     least prefill load with no more leases in flight than their mean. With hit_wait_factor F,
//     a hit whose worker's prefill load exceeds the least by more than F times the weight of
//     the blocks matched there is routed as a miss.
//
// Cost: a step along a recency list per leading block held by a passing worker, and an index
// lookup only where the blocks leave the list's run (blockIndex.nextOnPath), plus one; a walk of
// one holder list, and a ring walk only when several candidates tie under a key or a request
// misses (under prefill, after two scans of the spillable workers).

// selectCacheAware is the cache_aware rule; v.blocks is the router's index. It changes nothing
// but the index's decision scratch (its epoch and depth).
func selectCacheAware(v *view, req *Request, keyPos uint64, p *Policy) (int, Branch) {
	x := v.blocks
	x.epoch, x.depth = x.epoch+1, 0
	if req.HasTarget {
		return selectTarget(v, req.TargetIndex)
	}
	c := cacheChoice{v: v, x: x, test: newSpillTest(v, p)}
	c.position, c.keyed, c.positioned = tiePosition(v, req, keyPos)
	blocks := req.PrefixBlocks
	for x.depth < len(blocks) {
		n := x.nextOnPath(blocks[x.depth])
		if n == 0 {
			n = x.holderWhere(blocks[x.depth], c.passes)
		}
		if n == 0 {
			break
		}
		x.extendPath(n)
	}
	var chosen int
	var branch Branch
	hit := x.depth > 0 && float64(x.depth) > p.CacheAware.CacheThreshold*float64(len(blocks))
	declined := false
	if hit {
		chosen, branch = c.amongCandidates(blocks[x.depth-1]), BranchCacheAwarePrefixHit
		declined = !c.hitWorthWaiting(chosen, req, p)
	}
	switch {
	case hit && !declined:
	case c.keyed:
		chosen, branch = c.missFrom(c.position, p.BalanceBy), BranchCacheAwareKeyHit
	case len(blocks) > 0:
		// The first block the match did not reach stands for a key: its own prefix's.
		chosen, branch = c.missFrom(mixBlock(blocks[min(x.depth, len(blocks)-1)]), p.BalanceBy), BranchCacheAwareNoMatch
	default:
		chosen, branch = c.leastLoaded(), BranchCacheAwareNoMatch
	}
	if declined || x.depth < len(blocks) && x.anyHolder(blocks[x.depth], isHealthy) {
		branch = BranchCacheAwareBalance
	}
	return chosen, branch
}

// cacheChoice is the state of one cache_aware decision.
type cacheChoice struct {
	v    *view
	x    *blockIndex
	test spillTest
	// position breaks ties: the routing key's ring position when keyed, else the first block's;
	// positioned is false when there is neither.
	position          uint64
	keyed, positioned bool
}

func (c *cacheChoice) passes(w *worker) bool { return w.healthy && !c.test.overloaded(w) }

func (c *cacheChoice) passesOwner(owner uint32) bool { return c.passes(c.v.workers[owner]) }

func isHealthy(w *worker) bool { return w.healthy }

// tiePosition is the ring position that breaks ties: the explicit key's (hashed by the router),
// else the implicit key's, else the first block's, mixed because block hashes need not be
// uniform (a trace may number its blocks 0, 1, 2...).
func tiePosition(v *view, req *Request, keyPos uint64) (position uint64, keyed, positioned bool) {
	switch {
	case len(req.RoutingKey) > 0:
		return keyPos, true, true
	case len(req.ImplicitKey) > 0:
		return v.ring.keyPosition(req.ImplicitKey), true, true
	case len(req.PrefixBlocks) > 0:
		return mixBlock(req.PrefixBlocks[0]), false, true
	}
	return 0, false, false
}

// mixBlock is MurmurHash3's 64-bit finalizer, a bijection that spreads any block hash over the ring.
func mixBlock(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

// amongCandidates stamps the passing holders of block (there is at least one) and picks the
// least ranked (see rank), ties broken clockwise from c.position.
func (c *cacheChoice) amongCandidates(block uint64) int {
	x, by := c.x, c.test.by
	count, only, least, leastAt, leastCount := 0, -1, rank{}, -1, 0
	for n := x.firstHolder(block); n != 0; n = x.nodes[n].nextHolder {
		w := x.nodes[n].worker
		if !c.passes(w) {
			continue
		}
		w.candidate = x.epoch
		count, only = count+1, w.index
		switch r := w.rank(by); {
		case leastAt >= 0 && r == least:
			leastCount++
		case leastAt < 0 || r.less(least):
			least, leastAt, leastCount = r, w.index, 1
		}
	}
	switch {
	case count == 1:
		return only
	case leastCount == 1:
		return leastAt
	}
	return c.v.ring.first(c.position, func(owner uint32) bool {
		w := c.v.workers[owner]
		return w.candidate == x.epoch && w.rank(by) == least
	})
}

// hitWorthWaiting tells whether a prefix hit stays on its chosen worker under hit_wait_factor
// (docs/contract.md, "Prefill load", rule 5): its prefill load may exceed the least by at most
// the factor times the weight of the blocks found there. A hit saves the prefill of those blocks
// and keeps the prefix warm for the next turn; a queue longer than several times that costs more.
func (c *cacheChoice) hitWorthWaiting(chosen int, req *Request, p *Policy) bool {
	factor := p.CacheAware.HitWaitFactor
	if factor == 0 || p.BalanceBy != LoadPrefill {
		return true
	}
	allowed := factor * float64(max(req.Weight, 1)) * float64(c.x.depth) / float64(len(req.PrefixBlocks))
	// Loads are never negative, so a queue within the allowance needs no scan for the least.
	queued := c.v.workers[chosen].prefillLoad
	return float64(queued) <= allowed || float64(queued-c.v.leastPrefillLoad()) <= allowed
}

// missFrom is where a request without a hit goes, walking clockwise from position: under
// in_flight the first worker not above the mean load, under prefill the first near the least
// prefill load with no more leases than those workers' mean (leastPrefillClockwise).
func (c *cacheChoice) missFrom(position uint64, m LoadMeasure) int {
	if m == LoadPrefill {
		return c.leastPrefillClockwise(position)
	}
	return c.ringUnderMean(position)
}

// leastPrefillClockwise is the first spillable worker clockwise from position among those near
// the least prefill load (within half a mean lease of it) with no more leases in flight than
// their mean. Replicas that share one view (engine reports, peer routes) then send a burst of
// misses where their keys and prefixes point; taking the one least loaded worker would send the
// whole burst there, and leaving the leases out would start prompts behind long decodes.
func (c *cacheChoice) leastPrefillClockwise(position uint64) int {
	least := int64(math.MaxInt64)
	var held, leases, near, nearLeases int64
	for _, i := range c.v.spillable {
		w := c.v.workers[i]
		least, held, leases = min(least, w.prefillLoad), held+w.held, leases+w.requests
	}
	bound := least
	if leases > 0 {
		bound += held / leases / 2
	}
	for _, i := range c.v.spillable {
		if w := c.v.workers[i]; w.prefillLoad <= bound {
			near, nearLeases = near+1, nearLeases+w.requests
		}
	}
	return c.v.ring.first(position, func(owner uint32) bool {
		w := c.v.workers[owner]
		return w.spillable && w.prefillLoad <= bound && w.requests*near <= nearLeases
	})
}

// ringUnderMean is the first worker clockwise from position that is available and not above
// the mean load (the least loaded one never is, so there is one): every router in front of the
// same workers starts a prefix in the same place, but never on a worker busier than the average.
func (c *cacheChoice) ringUnderMean(position uint64) int {
	mean := c.v.meanLoad(LoadInFlight)
	return c.v.ring.first(position, func(owner uint32) bool {
		w := c.v.workers[owner]
		return w.healthy && float64(w.load) <= mean
	})
}

// leastLoaded is the least ranked spillable worker (which passes), ties broken clockwise from
// the key's or the first block's position, or by membership order when the request has neither.
func (c *cacheChoice) leastLoaded() int {
	least, at, count := c.v.leastRanked(c.test.by)
	if count == 1 || !c.positioned {
		return at
	}
	return c.v.firstClockwiseAt(c.position, least, c.test.by)
}

// prefixCounts are the counters of the matched fraction: blocks requested, blocks matched.
type prefixCounts struct{ requested, matched uint64 }

// recordPrefix counts a routed request's blocks and those its chosen worker held, then records
// them on that worker; the caller holds r.mu, right after the decision. A candidate of the
// decision held the depth it matched; any other worker is looked up.
func (r *Router) recordPrefix(chosen *worker, blocks []uint64) {
	x := r.view.blocks
	matched := x.depth
	if chosen.candidate != x.epoch {
		matched = x.matched(chosen, blocks)
	}
	r.prefix.requested += uint64(len(blocks))
	r.prefix.matched += uint64(matched)
	x.record(chosen, blocks)
}
