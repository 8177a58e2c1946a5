// Package core is the routing engine of bounded-router: the hash ring, the workers and their
// load counters, the routing policies and the leases that count requests in flight. It has no
// knowledge of C or Python.
package core

import (
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"
)

// Router routes requests to workers and counts the requests in flight on each one. All its
// methods are safe for concurrent use.
type Router struct {
	policy       Policy
	virtualNodes int
	// keyHeaders are the routing_key_headers, fixed when the router is built.
	keyHeaders []string
	// healthCheck and breakerCfg are the worker-failure settings, fixed when the router is built.
	healthCheck HealthCheckConfig
	breakerCfg  BreakerConfig
	listener    conditionListener

	// membershipMu serialises membership changes; the new ring is built while holding only it,
	// so routing continues on the old snapshot until the new one is installed.
	membershipMu sync.Mutex
	nextWorkerID atomic.Uint32

	// mu guards everything below. Each decision and the count it implies happen under it in
	// one step, which is what makes route linearizable.
	mu       sync.Mutex
	members  *membership
	view     view
	leases   leaseTable
	keys     keyCounts
	branches [NumBranches]uint64
	leaked   uint64
	// heldWeight is the sum of the weights of the active leases (the mean lease weight of
	// engine_load.go is heldWeight over leases.active).
	heldWeight int64
	// prefix counts the prefix blocks of routed requests and those their worker held.
	prefix prefixCounts
	// routeObserver, when set, is told every lease taken (peer_routes.go).
	routeObserver RouteObserver
}

// NewRouter validates the configuration and builds a router with its workers.
func NewRouter(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	urls, _ := normalizeWorkerURLs(cfg.WorkerURLs) // Validate checked them
	r := &Router{policy: cfg.Policy, virtualNodes: cfg.VirtualNodes, keyHeaders: keyHeadersOrDefault(cfg.RoutingKeyHeaders), members: emptyMembership(cfg.Policy.HashRing), view: newView(), keys: newKeyCounts(),
		healthCheck: cfg.HealthCheckOrOff(), breakerCfg: cfg.BreakerOrDefault()}
	switch {
	case cfg.Policy.Kind == PolicyBoundedConsistentHashing && cfg.Policy.KeyMemory > 0:
		r.view.memory = newKeyMemory(cfg.Policy.KeyMemory)
	case cfg.Policy.Kind == PolicyManual:
		// manual keeps its keys' workers in the same bounded, recency-ordered memory.
		r.view.memory = newKeyMemory(cfg.Policy.MaxKeys)
	}
	// Only the bound of balance_by prefill reads the prefill total: the others need not keep it.
	r.view.byPrefill = cfg.Policy.Kind.bounds() && cfg.Policy.BalanceBy == LoadPrefill
	if cfg.Policy.HasSeed {
		r.view.randomIndex = seededIndex(cfg.Policy.Seed)
	}
	if cfg.Policy.Kind == PolicyCacheAware {
		r.view.blocks = newBlockIndex(cfg.Policy.CacheAware.BlocksPerWorker)
	}
	r.install(rebuilt(r.newWorkers(urls, r.members), r.policy.HashRing, r.virtualNodes))
	return r, nil
}

// Policy returns the router's policy and its settings.
func (r *Router) Policy() Policy { return r.policy }

// RoutingKeyHeaders returns the names of the headers that carry the explicit routing key, in order.
func (r *Router) RoutingKeyHeaders() []string { return append([]string(nil), r.keyHeaders...) }

// RequestFrom is core.RequestFrom with the router's routing-key header names.
func (r *Router) RequestFrom(explicitKey []byte, headers iter.Seq2[[]byte, []byte]) Request {
	return requestFrom(r.keyHeaders, explicitKey, headers)
}

// RequestFromHeaders is core.RequestFromHeaders with the router's routing-key header names.
func (r *Router) RequestFromHeaders(headers iter.Seq2[[]byte, []byte]) Request {
	return requestFromHeaders(r.keyHeaders, headers)
}

// RoutingHeaderNames returns the names of the headers that carry routing inputs for this
// router, in the order RequestFromValues asks for them: X-SMG-Target-Worker, the routing-key
// headers, then Authorization, X-Forwarded-For and Cookie.
func (r *Router) RoutingHeaderNames() []string { return routingHeaderNames(r.keyHeaders) }

// RequestFromValues is RequestFromHeaders for a caller that looks the routing headers up
// itself, as an HTTP server that has parsed them already: value(i) returns the first value of
// the i-th header of RoutingHeaderNames and whether it is present. It keeps a copy of the
// values it uses only.
func (r *Router) RequestFromValues(value func(i int) (string, bool)) Request {
	return requestFromValues(r.keyHeaders, value)
}

// Decision is the outcome of routing one request.
type Decision struct {
	// Branch names the rule that decided.
	Branch Branch
	// WorkerURL and WorkerID name the chosen worker; empty and 0 when no worker was chosen.
	WorkerURL string
	WorkerID  uint32
	// PreferredURL and PreferredID name the worker the key prefers on the ring; they differ
	// from the chosen worker only when the request spilled or went to its remembered worker.
	PreferredURL string
	PreferredID  uint32
	// Lease is the load token of a routed request; 0 for a selection or when no worker was chosen.
	Lease LeaseID
}

// Spilled reports whether the request spilled. A key routed to the worker it remembers
// (BranchExplicitRoutingKeyRemembered) did not spill, though that worker may not be the
// preferred one.
func (d Decision) Spilled() bool { return d.Branch == BranchExplicitRoutingKeySpillover }

// Route chooses a worker for the request and, if one is chosen, counts the request on it under
// a new lease of req.Weight, in one linearizable step. Release the lease when the request has
// finished. It panics when req.Weight is outside 0..MaxLeaseWeight (see CheckWeight).
func (r *Router) Route(req *Request) Decision { return r.ReleaseThenRoute(0, req) }

// ReleaseThenRoute releases the lease previous (as Release does; nothing when it is 0 or not
// active) and routes req, in one step: the route sees the release. A binding whose calls into
// the library cost more than the work behind them uses it to pass a release on with its next
// route instead of making a call of its own.
func (r *Router) ReleaseThenRoute(previous LeaseID, req *Request) Decision {
	key, weight := r.explicitKeyOf(req.RoutingKey), req.leaseWeight()
	r.mu.Lock()
	var change *ConditionChange
	if previous != 0 {
		_, change = r.releaseWith(previous, OutcomeSuccess, time.Time{})
	}
	var d Decision
	r.route(&d, req, key, weight)
	r.mu.Unlock()
	r.announceIf(change)
	return d
}

// route is Route for a caller that holds r.mu and has hashed the request's explicit key and
// checked its weight; it fills d (a zero Decision), written in place because copying a
// Decision out of each call cost the hot path more than a pointer does (BENCHMARKS.md).
func (r *Router) route(d *Decision, req *Request, key explicitKey, weight int64) {
	chosen, preferred := r.decide(d, req, key)
	r.branches[d.Branch]++
	if chosen != nil {
		// Only round_robin reads the counter; advancing it for every policy keeps this branchless.
		r.view.roundRobin++
		d.Lease = r.commit(chosen, preferred, req, key, weight, remembers(d.Branch))
	}
}

// commit takes the lease of a route (or a retry) to chosen and records what a route records:
// the key's last worker (when remember), the request's blocks in the index, the route for the
// peers.
func (r *Router) commit(chosen, preferred *worker, req *Request, key explicitKey, weight int64, remember bool) LeaseID {
	lease := r.take(chosen, preferred, key, weight)
	if r.view.memory != nil && remember {
		r.view.memory.remember(key.position, chosen)
	}
	if r.view.blocks != nil && len(req.PrefixBlocks) > 0 {
		r.recordPrefix(chosen, req.PrefixBlocks)
	}
	r.tell(chosen, weight, req.PrefixBlocks)
	return lease
}

// explicitKey is a request's explicit routing key reduced to what the router needs: its ring
// position, hashed once and before the lock is taken (the policy and the lease both use it).
type explicitKey struct {
	present  bool
	position uint64
}

// explicitKeyOf hashes a routing key with the hash of the router's ring (the policy's, fixed).
func (r *Router) explicitKeyOf(routingKey []byte) explicitKey {
	if len(routingKey) == 0 {
		return explicitKey{}
	}
	return explicitKey{present: true, position: r.policy.HashRing.Position(routingKey)}
}

// Select chooses a worker like Route but counts nothing and takes no lease.
func (r *Router) Select(req *Request) Decision {
	key := r.explicitKeyOf(req.RoutingKey)
	r.mu.Lock()
	defer r.mu.Unlock()
	var d Decision
	r.decide(&d, req, key)
	return d
}

// decide runs the policy and describes its choice in d (a zero Decision); the caller holds r.mu.
func (r *Router) decide(d *Decision, req *Request, key explicitKey) (chosen, preferred *worker) {
	index, branch := r.policy.selectWorker(&r.view, req, key.position)
	d.Branch = branch
	if index < 0 {
		return nil, nil
	}
	chosen, preferred = r.members.workers[index], r.members.workers[index]
	if branch == BranchExplicitRoutingKeySpillover || branch == BranchExplicitRoutingKeyRemembered {
		// Only these branches leave the preferred worker; finding it again here is cheaper than
		// carrying it out of every policy.
		preferred = r.members.workers[r.view.preferred(key.position)]
	}
	d.WorkerURL, d.WorkerID = chosen.url, chosen.id
	d.PreferredURL, d.PreferredID = preferred.url, preferred.id
	return chosen, preferred
}

// Acquire counts a request on a worker chosen elsewhere (a load token without a routing
// decision) under a lease of weight 1. The worker must be a member; it need not be healthy.
func (r *Router) Acquire(url string, routingKey []byte) (LeaseID, WorkerState, error) {
	return r.AcquireWeighted(url, routingKey, 1)
}

// AcquireWeighted is Acquire with a lease of the given weight (see CheckWeight).
func (r *Router) AcquireWeighted(url string, routingKey []byte, weight int64) (LeaseID, WorkerState, error) {
	if err := CheckWeight(weight); err != nil {
		return 0, WorkerState{}, err
	}
	key := r.explicitKeyOf(routingKey)
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.members.lookup(memberURL(url))
	if !ok {
		return 0, WorkerState{}, unknownWorker(url)
	}
	id := r.take(w, w, key, weight)
	r.tell(w, weight, nil)
	return id, w.state(), nil
}

// take counts a request of the given weight on w under a new lease; the caller holds r.mu.
func (r *Router) take(w, preferred *worker, key explicitKey, weight int64) LeaseID {
	if key.present && r.keys.add(w.id, key.position) {
		w.activeKeys++
	}
	w.requests++
	w.routed++
	w.held += weight
	r.heldWeight += weight
	r.addLoad(w, weight)
	w.prefillRequests++
	w.prefillHeld += weight
	r.addPrefillLoad(w, weight)
	return r.leases.take(w, preferred, key.present, key.position, weight)
}

// addLoad changes a worker's routing load and, while it is an available member, the running total.
func (r *Router) addLoad(w *worker, delta int64) {
	if delta == 0 {
		return // an engine report equal to the load: the least-load memo must not see a move
	}
	w.load += delta
	if w.spillable && w.healthy && !w.removed {
		r.view.spillableLoad += delta
		r.view.least.moved(w.index, w.load-delta, w.load)
	}
}

// addPrefillLoad changes a worker's routing prefill load and, while it is an available member
// of a router that balances by it, the running total and the least prefill load.
func (r *Router) addPrefillLoad(w *worker, delta int64) {
	if delta == 0 {
		return // the least-load memo must not see a move
	}
	w.prefillLoad += delta
	if r.view.byPrefill && w.spillable && w.healthy && !w.removed {
		r.view.spillablePrefill += delta
		r.view.leastPrefill.moved(w.index, w.prefillLoad-delta, w.prefillLoad)
	}
}

// leavePrefill takes a waiting lease out of its worker's prefill queue (its first token, or its
// release before one); the caller holds r.mu.
func (r *Router) leavePrefill(s *leaseSlot) {
	s.waiting = false
	w := s.worker
	w.prefillRequests--
	w.prefillHeld -= s.weight
	if !w.prefillReported || s.reports == w.reports {
		r.addPrefillLoad(w, -s.weight) // else the engine's latest report counted it
	}
}

// FirstToken marks an active lease as having seen its first token: its weight leaves its
// worker's prefill load (docs/contract.md, "Prefill load"). It reports whether it did anything:
// a lease marked before, released or never issued is a no-op. O(1) under the router's lock.
func (r *Router) FirstToken(id LeaseID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.leases.lookup(id)
	if s == nil || !s.waiting {
		return false
	}
	r.leavePrefill(s)
	return true
}

// Release undoes exactly what the lease counted and reports whether it did anything: a lease
// released before (or never issued) is a no-op. Leases on a worker that has since been removed
// release against that worker only, never against a new worker with the same URL. abandoned
// marks a lease the caller lost track of; it is counted as leaked. A lease released by its
// holder is a success of its worker (contract: Worker failures); Finish tells other outcomes.
func (r *Router) Release(id LeaseID, abandoned bool) bool {
	if !abandoned {
		return r.Finish(id, OutcomeSuccess, time.Time{}) // a success needs no clock
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w, _ := r.release(id, true)
	return w != nil
}

// releaseWith releases a lease and records its outcome; the caller holds r.mu and announces
// the change, if any, once it has released the lock.
func (r *Router) releaseWith(id LeaseID, o Outcome, now time.Time) (bool, *ConditionChange) {
	w, ejections := r.release(id, false)
	if w == nil {
		return false, nil
	}
	return true, r.recordOutcome(w, o, now, ejections != uint32(w.breaker.ejections))
}

// release is Release without the outcome, for a caller that holds r.mu: it returns the
// lease's worker, or nil when the lease was not active, and that worker's ejections when the
// lease was taken.
func (r *Router) release(id LeaseID, abandoned bool) (*worker, uint32) {
	s := r.leases.lookup(id)
	if s == nil {
		return nil, 0
	}
	w, ejections := s.worker, s.ejections
	if s.hasKey && r.keys.remove(s.worker.id, s.keyPos) {
		s.worker.activeKeys--
	}
	s.worker.requests--
	s.worker.held -= s.weight
	r.heldWeight -= s.weight
	if !s.worker.reported || s.reports == s.worker.reports {
		r.addLoad(s.worker, -s.weight) // else the engine's latest report counted it
	}
	if s.waiting {
		r.leavePrefill(s)
	}
	if abandoned {
		r.leaked++
	}
	r.leases.drop(id, s)
	return w, ejections
}

// LeaseWorkers returns the chosen and preferred worker URLs of an active lease.
func (r *Router) LeaseWorkers(id LeaseID) (workerURL, preferredURL string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.leases.lookup(id)
	if s == nil {
		return "", "", false
	}
	return s.worker.url, s.preferred.url, true
}

// Stats are the router's counters.
type Stats struct {
	// Branches counts routed requests by the branch that decided them.
	Branches [NumBranches]uint64
	// Leaked counts leases that were released by a safety net instead of by their holder.
	Leaked uint64
	// ActiveLeases is the number of leases currently held, on members or removed workers.
	ActiveLeases int
	// PrefixBlocks counts the prefix blocks of the requests cache_aware routed, and
	// PrefixBlocksMatched those of them their chosen worker held (its matched prefix).
	PrefixBlocks, PrefixBlocksMatched uint64
	// IndexedBlocks is the number of (worker, block) pairs in cache_aware's index.
	IndexedBlocks int
}

// Stats returns a snapshot of the router's counters.
func (r *Router) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats()
}

func (r *Router) stats() Stats {
	return Stats{Branches: r.branches, Leaked: r.leaked, ActiveLeases: r.leases.active,
		PrefixBlocks: r.prefix.requested, PrefixBlocksMatched: r.prefix.matched, IndexedBlocks: r.view.blocks.len()}
}

// Snapshot is the router's counters and its members, read in one step: its active leases are
// the sum of the members' loads plus the leases on removed workers.
type Snapshot struct {
	Stats
	Workers []WorkerState
}

// Snapshot returns the counters and the members in one step.
func (r *Router) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{Stats: r.stats(), Workers: r.workers()}
}

// Workers returns a snapshot of every member in membership order.
func (r *Router) Workers() []WorkerState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workers()
}

// Member names a worker of the membership.
type Member struct {
	ID  uint32
	URL string
}

// Members lists the workers in membership order by id and URL alone: what a binding needs to
// name the workers its routes return, without building every worker's state (Workers).
func (r *Router) Members() []Member {
	r.mu.Lock()
	m := r.members // a membership is never changed once installed
	r.mu.Unlock()
	members := make([]Member, len(m.workers))
	for i, w := range m.workers {
		members[i] = Member{ID: w.id, URL: w.url}
	}
	return members
}

// IsMember tells whether url (in any spelling) names a worker of the membership.
func (r *Router) IsMember(url string) bool {
	r.mu.Lock()
	m := r.members
	r.mu.Unlock()
	_, ok := m.lookup(memberURL(url))
	return ok
}

func (r *Router) workers() []WorkerState {
	states := make([]WorkerState, len(r.members.workers))
	for i, w := range r.members.workers {
		states[i] = w.state()
	}
	return states
}

// SetHealthy marks a member healthy or not, the user's verdict: a worker set unhealthy is
// unavailable whatever its probes and breaker say (contract: Worker failures). Health never
// changes the ring.
func (r *Router) SetHealthy(url string, healthy bool) error {
	return r.changeWorker(url, func(w *worker) { w.userHealthy = healthy })
}

// AddWorker adds a worker at the end of the membership order.
func (r *Router) AddWorker(raw string) error {
	url, err := NormalizeWorkerURL(raw)
	if err != nil {
		return err
	}
	return r.changeMembership(func(m *membership) (*membership, error) {
		if _, exists := m.lookup(url); exists {
			if raw != url {
				return nil, fmt.Errorf("%w: worker %q is already a member, as %q", ErrDuplicateWorker, raw, url)
			}
			return nil, fmt.Errorf("%w: worker %q is already a member", ErrDuplicateWorker, url)
		}
		if err := checkRingSize(len(m.workers)+1, r.virtualNodes); err != nil {
			return nil, err
		}
		return m.withWorker(r.newWorker(url), r.virtualNodes), nil
	})
}

// RemoveWorker removes a worker. Its leases stay valid and release against it alone.
func (r *Router) RemoveWorker(url string) error {
	return r.removeWorker(url, func(*worker) bool { return true })
}

// RemoveMember removes the worker m names while it is that member: a worker removed and added
// again at the same URL is another member, with another id, and stays.
func (r *Router) RemoveMember(m Member) error {
	return r.removeWorker(m.URL, func(w *worker) bool { return w.id == m.ID })
}

// removeWorker removes the member at url when is says it is the one meant.
func (r *Router) removeWorker(url string, is func(*worker) bool) error {
	return r.changeMembership(func(m *membership) (*membership, error) {
		i, ok := m.byURL[memberURL(url)]
		if !ok || !is(m.workers[i]) {
			return nil, unknownWorker(url)
		}
		return m.withoutWorker(i), nil
	})
}

// SetWorkers replaces the membership with urls, in that order. Workers that stay keep their
// health and load; the others are removed as by RemoveWorker.
func (r *Router) SetWorkers(given []string) error {
	urls, err := normalizeWorkerURLs(given)
	if err != nil {
		return err
	}
	if err := checkRingSize(len(urls), r.virtualNodes); err != nil {
		return err
	}
	return r.changeMembership(func(m *membership) (*membership, error) {
		return rebuilt(r.newWorkers(urls, m), r.policy.HashRing, r.virtualNodes), nil
	})
}

// changeMembership installs the membership next builds from the current one, one change at a
// time, then tells the condition listener of each worker that left (ConditionChange.Removed).
func (r *Router) changeMembership(next func(current *membership) (*membership, error)) error {
	r.membershipMu.Lock()
	m, err := next(r.members)
	var left []ConditionChange
	if err == nil {
		left = r.install(m)
	}
	r.membershipMu.Unlock()
	r.announce(left...)
	return err
}

// newWorkers returns the workers for urls, reusing the members of current that stay.
func (r *Router) newWorkers(urls []string, current *membership) []*worker {
	workers := make([]*worker, len(urls))
	for i, url := range urls {
		if w, ok := current.lookup(url); ok {
			workers[i] = w
		} else {
			workers[i] = r.newWorker(url)
		}
	}
	return workers
}

func (r *Router) newWorker(url string) *worker { return newWorker(url, r.nextWorkerID.Add(1)) }

// install swaps in a new membership and returns the removals to announce. Members that left
// are marked removed so their outstanding leases no longer touch the totals. The caller holds
// membershipMu.
func (r *Router) install(next *membership) (left []ConditionChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.members.workers {
		if still, ok := next.lookup(w.url); !ok || still != w {
			last := w.condition()
			left = append(left, ConditionChange{URL: w.url, ID: w.id, From: last, To: last, Removed: true})
			w.removed = true
			w.outages++
			r.view.blocks.forget(w)
		}
	}
	for i, w := range next.workers {
		w.index = i
	}
	r.members = next
	r.view.workers, r.view.ring = next.workers, next.ring
	r.refreshAvailable()
	return left
}

// refreshAvailable recomputes the available workers and their total load after a health or
// membership change; the caller holds r.mu.
func (r *Router) refreshAvailable() {
	v := &r.view
	v.available, v.spillable = v.available[:0], v.spillable[:0]
	v.forgetLeast()
	for i, w := range r.members.workers {
		w.spillable = w.trusted()
		if w.healthy {
			v.available = append(v.available, uint32(i))
		}
		if w.spillable {
			v.spillable = append(v.spillable, uint32(i))
		}
	}
	if len(v.spillable) == 0 {
		// Every available worker has failed lately: they are all as good a target as any.
		v.spillable = append(v.spillable, v.available...)
		for _, i := range v.available {
			r.members.workers[i].spillable = true
		}
	}
	v.spillableLoad, v.spillablePrefill = 0, 0
	for _, i := range v.spillable {
		w := r.members.workers[i]
		v.spillableLoad += w.load
		if v.byPrefill {
			v.spillablePrefill += w.prefillLoad
		}
	}
}

func unknownWorker(url string) error {
	return fmt.Errorf("%w: %q is not a worker of this router", ErrUnknownWorker, url)
}
