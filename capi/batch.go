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

// Batches: a dispatcher that sends a group of requests at once routes and releases them in one
// call each, which costs one crossing of the C boundary (and, from Python, one ctypes call)
// instead of one per request.

// br_route_keys: see capi/bounded_router.h. The batch is one step of core.RouteKeys, all or
// nothing; on an invalid argument nothing is routed.
//
//export br_route_keys
func br_route_keys(router C.uint64_t, keys *C.char, keysLen C.size_t, lengths *C.uint32_t, n C.uint32_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return routeKeyBatch(router, keys, keysLen, lengths, nil, n, out)
}

// br_route_weighted_keys: see capi/bounded_router.h. The batch is one step of
// core.RouteWeightedKeys; an invalid weight routes nothing and the error names its index.
//
//export br_route_weighted_keys
func br_route_weighted_keys(router C.uint64_t, keys *C.char, keysLen C.size_t, lengths *C.uint32_t, weights *C.int64_t, n C.uint32_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	if weights == nil && n > 0 {
		return fail(invalidArgument("weights must not be NULL"))
	}
	return routeKeyBatch(router, keys, keysLen, lengths, weights, n, out)
}

// routeKeyBatch routes the n keys of a key block, with the lease weights at weights (each 1 when
// weights is nil), answering as br_route_keys does.
func routeKeyBatch(router C.uint64_t, keys *C.char, keysLen C.size_t, lengths *C.uint32_t, weights *C.int64_t, n C.uint32_t, out *C.uint64_t) C.int32_t {
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return statusOK
	}
	block, err := bytesArg(keys, keysLen, "keys")
	if err != nil {
		return fail(err)
	}
	if lengths == nil {
		return fail(invalidArgument("lengths must not be NULL"))
	}
	sizes := unsafe.Slice((*uint32)(unsafe.Pointer(lengths)), n)
	if err := checkKeyBlock(block, sizes); err != nil {
		return fail(err)
	}
	o, err := outArg(out, 3*int(n), "out")
	if err != nil {
		return fail(err)
	}
	if weights == nil {
		r.RouteKeys(int(n), keySplitter(block, sizes), decidedInto(o, int(n)))
		return statusOK
	}
	each := unsafe.Slice((*int64)(unsafe.Pointer(weights)), n)
	if err := r.RouteWeightedKeys(int(n), keySplitter(block, sizes), func(i int) int64 { return each[i] }, decidedInto(o, int(n))); err != nil {
		return fail(err)
	}
	return statusOK
}

// decidedInto returns the function that writes decision i of a batch of n into out's three
// runs of n values: leases, packed decisions, worker ids.
func decidedInto(out []C.uint64_t, n int) func(i int, d core.Decision) {
	leases, decisions, ids := out[:n], out[n:2*n], out[2*n:]
	return func(i int, d core.Decision) {
		leases[i], decisions[i], ids[i] = C.uint64_t(d.Lease), C.uint64_t(packDecision(d)), workerIDs(d)
	}
}

// br_release_many releases the n leases in leases[] in one step, as successive br_release
// calls would, and returns how many it released (unknown or already released ones count 0).
//
//export br_release_many
func br_release_many(router C.uint64_t, leases *C.uint64_t, n C.uint32_t) (status C.int32_t) {
	defer guard(&status)
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return 0
	}
	if leases == nil {
		return fail(invalidArgument("leases must not be NULL"))
	}
	return C.int32_t(r.ReleaseMany(unsafe.Slice((*core.LeaseID)(unsafe.Pointer(leases)), n)))
}

// keySplitter returns the function that gives key i of a block checkKeyBlock accepted; it must be
// called for i = 0, 1, ... in order (as core.RouteKeys does), each key following the last.
func keySplitter(block []byte, lengths []uint32) func(i int) []byte {
	rest := block
	return func(i int) []byte {
		key := rest[:lengths[i]]
		rest = rest[lengths[i]:]
		return key
	}
}

// checkKeyBlock verifies that the key lengths of br_route_keys exactly cover the key block.
func checkKeyBlock(block []byte, lengths []uint32) error {
	total := uint64(0)
	for _, n := range lengths {
		total += uint64(n)
	}
	if total != uint64(len(block)) {
		return invalidArgument("the lengths add up to %d bytes but keys_len is %d", total, len(block))
	}
	return nil
}
