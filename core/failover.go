package core

// RouteAvoiding routes a request again after it failed on the workers whose IDs are in tried,
// under a new lease (contract: Worker failures, "Where a retry goes"). A request with a routing
// key, explicit or implicit, goes to the first available worker clockwise from the key that it
// has not tried (BranchFailover), with no load test: every replica agrees on it and the key keeps
// a stable second home. A request without a key goes where the policy sends it among the untried
// workers. A request naming a target worker, under a policy that honours it, has no fallback, so
// it is not routed again; nor is any request once every available worker has been tried (no
// lease, BranchNoHealthyWorkers).
// With nothing tried it is Route.
func (r *Router) RouteAvoiding(req *Request, tried []uint32) Decision {
	if len(tried) == 0 {
		return r.Route(req)
	}
	key, weight := r.explicitKeyOf(req.RoutingKey), req.leaseWeight()
	r.mu.Lock()
	defer r.mu.Unlock()
	// A refusal takes no lease and counts no branch: the request counted its own when it was
	// first routed, and its worker was there.
	if req.HasTarget && r.policy.Kind.honorsTarget() {
		return Decision{Branch: BranchTargetWorkerMiss}
	}
	set := r.setAside(tried)
	defer r.restore(set)
	if len(r.view.available) == 0 {
		return Decision{Branch: BranchNoHealthyWorkers}
	}
	position, keyed := key.position, key.present
	if !keyed && len(req.ImplicitKey) > 0 {
		position, keyed = r.view.ring.keyPosition(req.ImplicitKey), true
	}
	if !keyed {
		var d Decision
		r.route(&d, req, key, weight)
		return d
	}
	w := r.members.workers[r.view.preferred(position)]
	r.branches[BranchFailover]++
	if r.view.blocks != nil {
		r.view.blocks.epoch++ // no decision matched blocks for this worker: the index looks them up
	}
	// The key's second home becomes its last worker under key memory; manual's keys keep the
	// worker they were assigned until it turns unavailable.
	remember := key.present && r.policy.Kind == PolicyBoundedConsistentHashing
	lease := r.commit(w, w, req, key, weight, remember)
	return Decision{Branch: BranchFailover, WorkerURL: w.url, WorkerID: w.id, PreferredURL: w.url, PreferredID: w.id, Lease: lease}
}

// setAside makes the available members among tried unavailable for one decision and returns
// them; the caller holds r.mu and calls restore before releasing it.
func (r *Router) setAside(tried []uint32) []*worker {
	var set []*worker
	for _, w := range r.members.workers {
		if w.healthy && containsID(tried, w.id) {
			w.healthy = false
			set = append(set, w)
		}
	}
	if len(set) > 0 {
		r.refreshAvailable()
	}
	return set
}

func (r *Router) restore(set []*worker) {
	for _, w := range set {
		w.healthy = true
	}
	if len(set) > 0 {
		r.refreshAvailable()
	}
}

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
