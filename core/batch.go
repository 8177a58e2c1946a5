package core

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// RouteKeys routes n requests whose only input is an explicit routing key, in order, exactly
// as n successive Route(KeyRequest(key(i))) calls would, but under one acquisition of the
// router's lock: the batch is one linearizable step, with no other call in between. The keys
// are read (key(0), key(1), ...) and hashed before the lock is taken; each decision is handed
// to decided, under the lock, which must not call the router.
//
// A batch is all or nothing: with no available worker no key gets a lease, otherwise every
// key does (an explicit key always finds a worker, and so does an empty one, at random).
func (r *Router) RouteKeys(n int, key func(i int) []byte, decided func(i int, d Decision)) {
	// A key request is always valid: no error. *req is zero, so setting its key makes it
	// KeyRequest(key(i)) without writing the whole Request again.
	_ = r.RouteRequests(n, func(i int, req *Request) error { req.RoutingKey = key(i); return nil }, decided)
}

// RouteWeightedKeys is RouteKeys with a lease of weight(i) for key i (weight 1 for every key
// when weight is nil). The weights are read with the keys, before the lock is taken: if one is
// invalid (0 included), no key is routed and the error names its index.
func (r *Router) RouteWeightedKeys(n int, key func(i int) []byte, weight func(i int) int64, decided func(i int, d Decision)) error {
	return r.RouteRequests(n, func(i int, req *Request) error {
		req.RoutingKey = key(i) // *req is zero: this is KeyRequest(key(i))
		if weight == nil {
			return nil
		}
		req.Weight = weight(i)
		return CheckWeight(req.Weight)
	}, decided)
}

// RouteRequests routes n requests in order, exactly as n successive Route calls would, under
// one acquisition of the router's lock (see RouteKeys). request(i, req) sets *req, a zero Request,
// to request i (in place: a batch copies no request). The requests are read, their keys hashed
// and their weights and prefix blocks checked before the lock is taken: if request returns an
// error or a request is invalid, no request is routed and the error names its index. The
// requests' slices must stay unchanged until it returns.
func (r *Router) RouteRequests(n int, request func(i int, req *Request) error, decided func(i int, d Decision)) error {
	batch := batches.Get().(*[]batchKey)
	defer batches.Put(batch)
	keys := slices.Grow((*batch)[:0], n)[:n]
	*batch = keys
	defer clear(keys) // the pool must not keep the callers' keys alive (and hands out zero entries)
	for i := range keys {
		req := &keys[i].req
		err := request(i, req)
		if err == nil {
			err = CheckRequest(req)
		}
		if err != nil {
			return fmt.Errorf("%w (request %d)", err, i)
		}
		keys[i].key = r.explicitKeyOf(req.RoutingKey)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range keys {
		var d Decision
		r.route(&d, &keys[i].req, keys[i].key, keys[i].req.leaseWeight())
		decided(i, d)
	}
	return nil
}

// batchKey is one key of a batch, read and hashed before the lock is taken.
type batchKey struct {
	req Request
	key explicitKey
}

// batches recycles the key buffers of RouteKeys, so a batch allocates nothing.
var batches = sync.Pool{New: func() any { return new([]batchKey) }}

// ReleaseMany releases every lease in ids as successive Release(id, false) calls would, in one
// step, and returns how many of them it released (unknown or already released ones are skipped).
func (r *Router) ReleaseMany(ids []LeaseID) int {
	r.mu.Lock()
	released := 0
	var changes []ConditionChange
	for _, id := range ids {
		ok, change := r.releaseWith(id, OutcomeSuccess, time.Time{})
		if ok {
			released++
		}
		if change != nil {
			changes = append(changes, *change)
		}
	}
	r.mu.Unlock()
	r.announce(changes...)
	return released
}
