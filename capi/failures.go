package main

/*
#define BR_NO_PROTOTYPES
#include "bounded_router.h"
*/
import "C"

import (
	"github.com/bounded-router/bounded-router/core"
)

// The worker-failure calls (contract: Worker failures): finishing a lease with its request's
// outcome, and routing a retry away from the workers already tried.

// br_finish releases a lease as br_release does and records how its request ended on the
// worker (BR_OUTCOME_*): 1 when the lease was active, 0 when not, a negative status otherwise.
//
//export br_finish
func br_finish(router C.uint64_t, lease C.uint64_t, outcome C.int32_t) (status C.int32_t) {
	defer guard(&status)
	m, err := lookupMonitor(uint64(router))
	if err != nil {
		return fail(err)
	}
	if outcome < 0 || outcome >= C.int32_t(core.NumOutcomes) {
		return fail(invalidArgument("outcome must be a BR_OUTCOME_* code from 0 to %d, got %d", core.NumOutcomes-1, outcome))
	}
	if m.Finish(core.LeaseID(lease), core.Outcome(outcome)) {
		return 1
	}
	return 0
}

// br_route_avoiding routes a request (every input of br_route_request: its key, headers, weight
// and prefix blocks) with a lease, but never to the workers whose URLs the JSON array avoid_json
// lists (those a failed request already tried; URLs that are not workers are ignored): a keyed
// request goes to the key's next ring worker, any other where the policy sends it.
//
//export br_route_avoiding
func br_route_avoiding(router C.uint64_t, request *C.br_request, avoidJSON *C.char, avoidLen C.size_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	o, err := outArg(out, 2, "out")
	if err != nil {
		return fail(err)
	}
	req, err := requestArg(r, request)
	if err != nil {
		return fail(err)
	}
	text, err := bytesArg(avoidJSON, avoidLen, "avoid_json")
	if err != nil {
		return fail(err)
	}
	urls, err := core.ParseWorkerURLs(text)
	if err != nil {
		return fail(invalidArgument("avoid_json: %v", err))
	}
	return writeDecision(r.RouteAvoiding(&req, workerIDsOf(r, urls)), o)
}

// workerIDsOf is the ids of the members among urls, in any spelling of their URLs (contract:
// "Workers and membership").
func workerIDsOf(r *core.Router, urls []string) []uint32 {
	named := make(map[string]bool, len(urls))
	for _, u := range urls {
		if n, err := core.NormalizeWorkerURL(u); err == nil {
			named[n] = true
		}
	}
	var ids []uint32
	for _, w := range r.Workers() {
		if named[w.URL] {
			ids = append(ids, w.ID)
		}
	}
	return ids
}
