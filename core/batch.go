package core

// RouteKeys routes n requests whose only input is an explicit routing key, in order, exactly
// as n successive Route(KeyRequest(key(i))) calls would, but under one acquisition of the
// router's lock: the batch is one linearizable step, with no other call in between. Each
// decision is handed to decided before the next key is routed. Both callbacks run under the
// lock and must not call the router; key's result is only read during the call.
func (r *Router) RouteKeys(n int, key func(i int) []byte, decided func(i int, d Decision)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < n; i++ {
		req := KeyRequest(key(i))
		decided(i, r.route(&req, r.explicitKeyOf(req.RoutingKey)))
	}
}

// ReleaseMany releases every lease in ids as successive Release(id, false) calls would, in one
// step, and returns how many of them it released (unknown or already released ones are skipped).
func (r *Router) ReleaseMany(ids []LeaseID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	released := 0
	for _, id := range ids {
		if r.release(id, false) {
			released++
		}
	}
	return released
}
