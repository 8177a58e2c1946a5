package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"unsafe"

	"github.com/bounded-router/bounded-router/core"
)

// Routing one request: by explicit key or by header block, alone or together with the release
// of the previous request's lease (the br_release_then_* exports, for bindings to which a call
// costs more than the routing behind it).

// br_route_key routes a request whose only input is an explicit routing key (an empty key is
// no key) and takes a lease on the chosen worker. It returns the branch code, or a negative
// status. out[0] receives the lease (0 when no worker was chosen) and out[1] the chosen
// worker's id in its low 32 bits and the preferred worker's id in its high 32 bits.
//
//export br_route_key
func br_route_key(router C.uint64_t, key *C.char, keyLen C.size_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	d, status := routeKey(router, key, keyLen, out, 0)
	if status < 0 {
		return status
	}
	return writeDecision(d, out)
}

// br_release_then_route_key releases the lease in io[2] (nothing when it is 0 or no longer
// active) and routes like br_route_key, in one step: the route sees the release. io[2] is set
// to 0, io[0] receives the lease (0 when no worker was chosen or the call failed) and io[1]
// the worker ids as br_route_key's out[1], and the decision comes back packed (BR_DECISION_*),
// or a negative status.
//
//export br_release_then_route_key
func br_release_then_route_key(router C.uint64_t, key *C.char, keyLen C.size_t, io *C.uint64_t) (status C.int64_t) {
	defer guard(&status)
	d, failed := routeKey(router, key, keyLen, io, takePrevious(io))
	return writePackedDecision(d, failed, io)
}

// br_route routes a request from its header block (see headers.go; may be empty) and an
// explicit routing key that, when non-empty, overrides X-SMG-Routing-Key. With take_lease
// non-zero it counts the request like br_route_key; with 0 it only selects (out[0] is 0).
//
//export br_route
func br_route(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, takeLease C.int32_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	d, status := routeHeaders(router, key, keyLen, headers, headersLen, takeLease != 0, out, 0)
	if status < 0 {
		return status
	}
	return writeDecision(d, out)
}

// br_release_then_route releases the lease in io[2] and routes like br_route with take_lease
// set, in one step, answering as br_release_then_route_key does. The release happens even
// when the header block is rejected.
//
//export br_release_then_route
func br_release_then_route(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, io *C.uint64_t) (status C.int64_t) {
	defer guard(&status)
	d, failed := routeHeaders(router, key, keyLen, headers, headersLen, true, io, takePrevious(io))
	return writePackedDecision(d, failed, io)
}

// takePrevious reads io[2], the lease a br_release_then_* call releases first, and clears it
// and io[0], so that a call that fails, even by a panic, leaves no lease there.
func takePrevious(io *C.uint64_t) core.LeaseID {
	if io == nil {
		return 0
	}
	slots := unsafe.Slice(io, 3)
	previous := core.LeaseID(slots[2])
	slots[0], slots[2] = 0, 0
	return previous
}

// routeKey releases previous and routes a key request; the status is negative when it failed.
func routeKey(router C.uint64_t, key *C.char, keyLen C.size_t, out *C.uint64_t, previous core.LeaseID) (core.Decision, C.int32_t) {
	r, err := lookupRouterFor(router, out)
	if err != nil {
		return core.Decision{}, fail(err)
	}
	req := core.KeyRequest(bytesArg(key, keyLen))
	return r.ReleaseThenRoute(previous, &req), statusOK
}

// routeHeaders releases previous and routes (or only selects) a request from its header
// block; the status is negative when it failed.
func routeHeaders(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, takeLease bool, out *C.uint64_t, previous core.LeaseID) (core.Decision, C.int32_t) {
	r, err := lookupRouterFor(router, out)
	if err != nil {
		return core.Decision{}, fail(err)
	}
	block := bytesArg(headers, headersLen)
	if err := checkHeaderBlock(block); err != nil {
		r.Release(previous, false)
		return core.Decision{}, fail(err)
	}
	req := core.RequestFromHeaders(headerPairs(block))
	if explicit := bytesArg(key, keyLen); len(explicit) > 0 {
		req.RoutingKey = explicit
	}
	if takeLease {
		return r.ReleaseThenRoute(previous, &req), statusOK
	}
	return r.Select(&req), statusOK
}

// writeDecision answers as br_route_key does: the branch code, out[0] the lease, out[1] the ids.
func writeDecision(d core.Decision, out *C.uint64_t) C.int32_t {
	o := unsafe.Slice(out, 2)
	o[0], o[1] = C.uint64_t(d.Lease), workerIDs(d)
	return C.int32_t(d.Branch)
}

// writePackedDecision answers as the br_release_then_* exports do: the packed decision, io[0]
// the lease, io[1] the ids; or the negative status of a call that failed.
func writePackedDecision(d core.Decision, failed C.int32_t, io *C.uint64_t) C.int64_t {
	if failed < 0 {
		return C.int64_t(failed)
	}
	writeDecision(d, io)
	return C.int64_t(packDecision(d))
}

// workerIDs packs the chosen worker's id (low 32 bits) and the preferred one's (high 32 bits).
func workerIDs(d core.Decision) C.uint64_t {
	return C.uint64_t(d.WorkerID) | C.uint64_t(d.PreferredID)<<32
}

// Packed decisions (BR_DECISION_* in the header): a binding reads one number per route and
// keys its cache of worker URLs and branch names on it.
const (
	packedIDLimit    = 1 << 28
	packedIDsDontFit = 1 << 60
)

func packDecision(d core.Decision) uint64 {
	if d.WorkerID >= packedIDLimit || d.PreferredID >= packedIDLimit {
		return uint64(d.Branch) | packedIDsDontFit
	}
	return uint64(d.Branch) | uint64(d.WorkerID)<<4 | uint64(d.PreferredID)<<32
}
