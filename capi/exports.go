// Command capi is the C interface of bounded-router, built with -buildmode=c-shared into
// libbounded_router.so and its header. It translates between C values and the core package
// and holds no routing logic of its own.
package main

/*
#include <stddef.h>
#include <stdint.h>

// ABI version of this header; br_abi_version() returns the version the library implements.
#define BR_ABI_VERSION 2

// Status codes: 0 or more is success, negative is an error whose text br_last_error() returns.
#define BR_OK 0
#define BR_ERR_INVALID_HANDLE -1
#define BR_ERR_INVALID_ARGUMENT -2
#define BR_ERR_UNKNOWN_WORKER -3
#define BR_ERR_DUPLICATE_WORKER -4
#define BR_ERR_INTERNAL -5

// Branch codes returned by br_route_key and br_route.
#define BR_BRANCH_NO_HEALTHY_WORKERS 0
#define BR_BRANCH_TARGET_WORKER_HIT 1
#define BR_BRANCH_TARGET_WORKER_MISS 2
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_HIT 3
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_SPILLOVER 4
#define BR_BRANCH_EXPLICIT_ROUTING_KEY_NO_ELIGIBLE_CANDIDATE 5
#define BR_BRANCH_IMPLICIT_ROUTING_KEY_HIT 6
#define BR_BRANCH_RANDOM_FALLBACK 7
#define BR_BRANCH_ROUTING_KEY_HIT 8
#define BR_BRANCH_RANDOM 9
#define BR_BRANCH_ROUND_ROBIN 10

// Packed decisions, returned by br_release_then_route_key and br_release_then_route (and in
// br_route_keys' answers): bits 0-3 the branch code, bits 4-31 the chosen worker's id, bits
// 32-59 the preferred worker's id. Both ids are 0 when no worker was chosen, so a decision
// below 16 carries no lease. Ids of 2^28 or more (a router 2^28 workers have joined) do not
// fit: the decision then has BR_DECISION_IDS_DONT_FIT set and no ids, and the ids are read
// from the call's other output, packed as br_route_key's out[1].
#define BR_DECISION_BRANCH(d) ((int32_t)((d) & 0xF))
#define BR_DECISION_WORKER_ID(d) ((uint32_t)(((d) >> 4) & 0xFFFFFFF))
#define BR_DECISION_PREFERRED_ID(d) ((uint32_t)(((d) >> 32) & 0xFFFFFFF))
#define BR_DECISION_IDS_DONT_FIT ((int64_t)1 << 60)

// The text of the calling thread's last error, NUL-terminated; valid until its next failing call.
const char *br_last_error(void);
*/
import "C"

import (
	"unsafe"

	"github.com/bounded-router/bounded-router/core"
)

func main() {}

const abiVersion = 2

// br_abi_version returns BR_ABI_VERSION of the library; loaders check it against their header.
//
//export br_abi_version
func br_abi_version() C.uint32_t { return abiVersion }

// br_router_new builds a router from a JSON configuration (see core.ParseConfig) and stores its
// handle in *out_router.
//
//export br_router_new
func br_router_new(configJSON *C.char, configLen C.size_t, outRouter *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	if outRouter == nil {
		return failf("out_router must not be NULL")
	}
	cfg, err := core.ParseConfig(bytesArg(configJSON, configLen))
	if err != nil {
		return fail(err)
	}
	r, err := core.NewRouter(cfg)
	if err != nil {
		return fail(err)
	}
	*outRouter = C.uint64_t(registerRouter(r))
	return statusOK
}

// br_router_free closes a router; its handle becomes invalid. Closing twice is BR_ERR_INVALID_HANDLE.
//
//export br_router_free
func br_router_free(router C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	if err := unregisterRouter(uint64(router)); err != nil {
		return fail(err)
	}
	return statusOK
}

//export br_add_worker
func br_add_worker(router C.uint64_t, url *C.char, urlLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withRouter(router, func(r *core.Router) error { return r.AddWorker(string(bytesArg(url, urlLen))) })
}

//export br_remove_worker
func br_remove_worker(router C.uint64_t, url *C.char, urlLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withRouter(router, func(r *core.Router) error { return r.RemoveWorker(string(bytesArg(url, urlLen))) })
}

// br_set_workers replaces the membership with a JSON array of worker URLs.
//
//export br_set_workers
func br_set_workers(router C.uint64_t, urlsJSON *C.char, urlsLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	urls, err := core.ParseWorkerURLs(bytesArg(urlsJSON, urlsLen))
	if err != nil {
		return fail(err)
	}
	return withRouter(router, func(r *core.Router) error { return r.SetWorkers(urls) })
}

//export br_set_healthy
func br_set_healthy(router C.uint64_t, url *C.char, urlLen C.size_t, healthy C.int32_t) (status C.int32_t) {
	defer guard(&status)
	return withRouter(router, func(r *core.Router) error { return r.SetHealthy(string(bytesArg(url, urlLen)), healthy != 0) })
}

// br_acquire counts a request on the named member (chosen outside the router) under a new
// lease, with an optional routing key. out[0] receives the lease, out[1] the worker's id.
//
//export br_acquire
func br_acquire(router C.uint64_t, url *C.char, urlLen C.size_t, key *C.char, keyLen C.size_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	r, err := lookupRouterFor(router, out)
	if err != nil {
		return fail(err)
	}
	lease, w, err := r.Acquire(string(bytesArg(url, urlLen)), bytesArg(key, keyLen))
	if err != nil {
		return fail(err)
	}
	o := unsafe.Slice(out, 2)
	o[0], o[1] = C.uint64_t(lease), C.uint64_t(w.ID)
	return statusOK
}

// br_release releases a lease: 1 if it released it, 0 if it was already released or unknown.
//
//export br_release
func br_release(router C.uint64_t, lease C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return release(router, lease, false)
}

// br_release_abandoned releases a lease its holder lost track of (a safety net such as a
// finalizer) and counts it as leaked. Returns like br_release.
//
//export br_release_abandoned
func br_release_abandoned(router C.uint64_t, lease C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return release(router, lease, true)
}

func release(router, lease C.uint64_t, abandoned bool) C.int32_t {
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	if r.Release(core.LeaseID(lease), abandoned) {
		return 1
	}
	return 0
}

// br_lease_workers_json writes {"worker_url": ..., "preferred_url": ...} of an active lease.
// Like every *_json export it returns the full length of the JSON text and writes it only when
// it fits in cap bytes (call again with a larger buffer otherwise), or a negative status.
//
//export br_lease_workers_json
func br_lease_workers_json(router C.uint64_t, lease C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return writeJSON(router, buf, capacity, func(r *core.Router) (any, error) {
		w, p, ok := r.LeaseWorkers(core.LeaseID(lease))
		if !ok {
			return nil, errUnknownLease
		}
		return map[string]string{"worker_url": w, "preferred_url": p}, nil
	})
}

// br_workers_json writes the members in membership order: [{"url", "id", "healthy", "load",
// "active_keys"}, ...].
//
//export br_workers_json
func br_workers_json(router C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return writeJSON(router, buf, capacity, func(r *core.Router) (any, error) { return r.Workers(), nil })
}

// br_stats_json writes {"branches": {name: count}, "leaked": n, "active_leases": n, "policy": {...}}.
//
//export br_stats_json
func br_stats_json(router C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	return writeJSON(router, buf, capacity, func(r *core.Router) (any, error) {
		s := r.Stats()
		branches := make(map[string]uint64, core.NumBranches)
		for b, n := range s.Branches {
			branches[core.Branch(b).String()] = n
		}
		return map[string]any{"branches": branches, "leaked": s.Leaked, "active_leases": s.ActiveLeases, "policy": r.Policy()}, nil
	})
}
