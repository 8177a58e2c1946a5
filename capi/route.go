package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"github.com/bounded-router/bounded-router/core"
)

// Routing one request: by explicit key or by header block, alone or together with the release
// of the previous request's lease (the br_release_then_* exports, for bindings to which a call
// costs more than the routing behind it). Signatures and answers: capi/bounded_router.h.

//export br_route_key
func br_route_key(router C.uint64_t, key *C.char, keyLen C.size_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	d, o, err := routeKey(router, key, keyLen, out, "out", 0)
	if err != nil {
		return fail(err)
	}
	return writeDecision(d, o)
}

//export br_release_then_route_key
func br_release_then_route_key(router C.uint64_t, key *C.char, keyLen C.size_t, io *C.uint64_t) (status C.int64_t) {
	defer guard(&status)
	previous := takePrevious(io)
	d, o, err := routeKey(router, key, keyLen, io, "io", previous)
	return writePackedDecision(d, o, err)
}

//export br_route
func br_route(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, takeLease C.int32_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	d, o, err := routeHeaders(router, key, keyLen, headers, headersLen, takeLease != 0, out, "out", 0)
	if err != nil {
		return fail(err)
	}
	return writeDecision(d, o)
}

// The release happens even when the arguments are rejected.
//
//export br_release_then_route
func br_release_then_route(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, io *C.uint64_t) (status C.int64_t) {
	defer guard(&status)
	previous := takePrevious(io)
	d, o, err := routeHeaders(router, key, keyLen, headers, headersLen, true, io, "io", previous)
	return writePackedDecision(d, o, err)
}

// takePrevious reads io[2], the lease a br_release_then_* call releases first, and clears it
// and io[0], so that a call that fails, even by a panic, leaves no lease there.
func takePrevious(io *C.uint64_t) core.LeaseID {
	slots, err := outArg(io, 3, "io")
	if err != nil {
		return 0
	}
	previous := core.LeaseID(slots[2])
	slots[0], slots[2] = 0, 0
	return previous
}

// routeKey releases previous and routes a key request; outName is out's name in the header.
func routeKey(router C.uint64_t, key *C.char, keyLen C.size_t, out *C.uint64_t, outName string, previous core.LeaseID) (core.Decision, []C.uint64_t, error) {
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return core.Decision{}, nil, err
	}
	o, err := outArg(out, 2, outName)
	var k []byte
	if err == nil {
		k, err = bytesArg(key, keyLen, "key")
	}
	if err != nil {
		r.Release(previous, false)
		return core.Decision{}, nil, err
	}
	req := core.KeyRequest(k)
	return r.ReleaseThenRoute(previous, &req), o, nil
}

// routeHeaders releases previous and routes (or only selects) a request from an explicit key
// and a header block.
func routeHeaders(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, takeLease bool, out *C.uint64_t, outName string, previous core.LeaseID) (core.Decision, []C.uint64_t, error) {
	return routeRequest(router, out, outName, previous, takeLease, func(r *core.Router) (core.Request, error) {
		return requestFrom(r, key, keyLen, headers, headersLen)
	})
}

// routeRequest releases previous and routes (or only selects) the request read builds from the
// export's arguments; previous is released even when they are rejected.
func routeRequest(router C.uint64_t, out *C.uint64_t, outName string, previous core.LeaseID, takeLease bool, read func(*core.Router) (core.Request, error)) (core.Decision, []C.uint64_t, error) {
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return core.Decision{}, nil, err
	}
	o, err := outArg(out, 2, outName)
	var req core.Request
	if err == nil {
		req, err = read(r)
	}
	if err != nil {
		r.Release(previous, false)
		return core.Decision{}, nil, err
	}
	if takeLease {
		return r.ReleaseThenRoute(previous, &req), o, nil
	}
	return r.Select(&req), o, nil
}

// requestFrom reads the routing inputs of an explicit key and a header block argument, with the
// router's routing-key header names.
func requestFrom(r *core.Router, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t) (core.Request, error) {
	k, err := bytesArg(key, keyLen, "key")
	if err != nil {
		return core.Request{}, err
	}
	block, err := bytesArg(headers, headersLen, "headers")
	if err == nil {
		err = checkHeaderBlock(block)
	}
	if err != nil {
		return core.Request{}, err
	}
	if len(block) == 0 {
		// The same request, without RequestFrom's header iterator, whose state escapes to the
		// heap (4 allocations per request).
		return core.KeyRequest(k), nil
	}
	return r.RequestFrom(k, headerPairs(block)), nil
}

// writeDecision answers as br_route_key does: the branch code, out[0] the lease, out[1] the ids.
func writeDecision(d core.Decision, out []C.uint64_t) C.int32_t {
	out[0], out[1] = C.uint64_t(d.Lease), workerIDs(d)
	return C.int32_t(d.Branch)
}

// writePackedDecision answers as the br_release_then_* exports do: the packed decision, io[0]
// the lease, io[1] the ids; or the negative status of a call that failed.
func writePackedDecision(d core.Decision, io []C.uint64_t, err error) C.int64_t {
	if err != nil {
		return C.int64_t(fail(err))
	}
	writeDecision(d, io)
	return C.int64_t(packDecision(d))
}

// workerIDs packs the chosen worker's id (low 32 bits) and the preferred one's (high 32 bits).
func workerIDs(d core.Decision) C.uint64_t {
	return C.uint64_t(d.WorkerID) | C.uint64_t(d.PreferredID)<<32
}

// packDecision packs a decision as BR_DECISION_* in the header describes: a binding reads one
// number per route and keys its cache of worker URLs and branch names on it.
func packDecision(d core.Decision) uint64 {
	if d.WorkerID >= packedIDLimit || d.PreferredID >= packedIDLimit {
		return uint64(d.Branch) | packedIDsDontFit
	}
	return uint64(d.Branch) | uint64(d.WorkerID)<<decisionWorkerShift | uint64(d.PreferredID)<<decisionPreferredShift
}
