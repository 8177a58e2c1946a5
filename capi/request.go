package main

/*
#define BR_NO_PROTOTYPES
#include "bounded_router.h"
*/
import "C"

import (
	"math"
	"unsafe"

	"github.com/bounded-router/bounded-router/core"
)

// Routing from a br_request, the struct that carries every routing input: key, header block,
// lease weight and prefix blocks. The slow path, for callers that pass a weight or prefix
// blocks; the key exports stay the fast path for the others.

//export br_route_request
func br_route_request(router C.uint64_t, request *C.br_request, takeLease C.int32_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	d, o, err := routeRequest(router, out, "out", 0, takeLease != 0, func(r *core.Router) (core.Request, error) { return requestArg(r, request) })
	if err != nil {
		return fail(err)
	}
	return writeDecision(d, o)
}

// br_route_requests: see capi/bounded_router.h. The batch is one step of core.RouteRequests, all
// or nothing; on an invalid argument nothing is routed and the error names the request's index.
//
//export br_route_requests
func br_route_requests(router C.uint64_t, requests *C.br_request, n C.uint32_t, out *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	r, err := lookupRouter(uint64(router))
	if err != nil {
		return fail(err)
	}
	if n == 0 {
		return statusOK
	}
	if requests == nil {
		return fail(invalidArgument("requests must not be NULL"))
	}
	o, err := outArg(out, 3*int(n), "out")
	if err != nil {
		return fail(err)
	}
	batch := unsafe.Slice(requests, n)
	err = r.RouteRequests(int(n), func(i int, req *core.Request) (err error) {
		*req, err = requestArg(r, &batch[i])
		return err
	}, decidedInto(o, int(n)))
	if err != nil {
		return fail(err)
	}
	return statusOK
}

// requestArg reads a br_request. Its prefix blocks are viewed, not copied: the router reads them
// during the call only.
func requestArg(r *core.Router, p *C.br_request) (core.Request, error) {
	if p == nil {
		return core.Request{}, invalidArgument("request must not be NULL")
	}
	req, err := requestFrom(r, p.key, p.key_len, p.headers, p.headers_len)
	if err != nil {
		return core.Request{}, err
	}
	req.Weight = int64(p.weight)
	if req.PrefixBlocks, err = prefixBlocksArg(p.prefix_blocks, p.prefix_blocks_len); err != nil {
		return core.Request{}, err
	}
	return req, core.CheckRequest(&req)
}

// prefixBlocksArg views the n block hashes at p; p may be NULL only when n is 0.
func prefixBlocksArg(p *C.uint64_t, n C.size_t) ([]uint64, error) {
	if p != nil && uint64(n) > core.MaxPrefixBlocks {
		return nil, core.CheckPrefixBlocks(int(min(uint64(n), math.MaxInt)))
	}
	return uint64sArg(p, n, uint64(n), "prefix_blocks", "prefix_blocks_len")
}
