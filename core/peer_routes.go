package core

// Peer routes (docs/contract.md, "Peer routes"). Router replicas in front of the same workers each
// count their own leases and record their own routes; the engines' reports bring the others' in,
// but only at the next load poll and once a prompt has left its queue (its KV cache events). A
// replica that hears each route the others take, as they take it, closes that gap:
//
//   - while an engine report of a worker's load (or prefill load) stands, a peer's route adds its
//     weight to that routing load until the next report, which counts the request itself and
//     replaces the sum whole, so nothing is counted twice; without a standing report it adds
//     nothing, since no report would ever take it away;
//   - its prefix blocks join the worker's index as this router's own routes do (cache_aware).
//
// The weight a peer route may add to one worker between two reports is capped at MaxEngineLoad,
// so a flooding peer cannot overflow a load.

// PeerRoute records that another router replica sent a request of weight (0 means 1) and prefix
// blocks (this package's hashes, in prefix order; nil for none) to worker url.
func (r *Router) PeerRoute(url string, weight int64, blocks []uint64) error {
	if weight == 0 {
		weight = 1
	}
	if err := CheckWeight(weight); err != nil {
		return err
	}
	if err := CheckPrefixBlocks(len(blocks)); err != nil {
		return err
	}
	return r.changeWorker(url, func(w *worker) {
		if add := min(weight, MaxEngineLoad-w.peerWeight); add > 0 {
			w.peerWeight += add
			if w.reported {
				r.addLoad(w, add)
			}
			if w.prefillReported {
				r.addPrefillLoad(w, add)
			}
		}
		if x := r.view.blocks; x != nil && len(blocks) > 0 {
			x.recordReport(w, blocks)
		}
	})
}

// RouteObserver is told each lease a router takes, under the router's lock: the worker's URL,
// the lease's weight and the request's prefix blocks (nil for none), which are the caller's and
// valid only during the call. It must return at once and must not call the router: a publisher
// copies the route into a bounded queue and sends it from its own goroutine.
type RouteObserver func(url string, weight int64, blocks []uint64)

// ObserveRoutes makes o the router's route observer (nil for none), replacing any other.
func (r *Router) ObserveRoutes(o RouteObserver) {
	r.mu.Lock()
	r.routeObserver = o
	r.mu.Unlock()
}

// tell passes a lease just taken on w to the route observer, if there is one; r.mu is held.
func (r *Router) tell(w *worker, weight int64, blocks []uint64) {
	if r.routeObserver != nil {
		r.routeObserver(w.url, weight, blocks)
	}
}
