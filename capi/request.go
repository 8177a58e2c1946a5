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

// Routing from every routing input of a request: key, header block, lease weight and prefix
// blocks, passed in a br_request (alone or in a batch) or as the arguments of
// br_release_then_route_request, the request path of bindings whose calls cost more than the
// routing behind them.

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

// br_release_then_route_request: see capi/bounded_router.h. The release happens even when the
// arguments are rejected.
//
//export br_release_then_route_request
func br_release_then_route_request(router C.uint64_t, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, weight C.int32_t, prefixBlocks *C.uint64_t, prefixBlocksLen C.size_t, io *C.uint64_t) (status C.int64_t) {
	defer guard(&status)
	previous := takePrevious(io)
	d, o, err := routeRequest(router, io, "io", previous, true, func(r *core.Router) (core.Request, error) {
		return requestOf(r, key, keyLen, headers, headersLen, int64(weight), prefixBlocks, prefixBlocksLen)
	})
	return writePackedDecision(d, o, err)
}

// requestArg reads a br_request.
func requestArg(r *core.Router, p *C.br_request) (core.Request, error) {
	if p == nil {
		return core.Request{}, invalidArgument("request must not be NULL")
	}
	return requestOf(r, p.key, p.key_len, p.headers, p.headers_len, int64(p.weight), p.prefix_blocks, p.prefix_blocks_len)
}

// requestOf reads every routing input of one request. The prefix blocks are viewed, not copied:
// the router reads them during the call only.
func requestOf(r *core.Router, key *C.char, keyLen C.size_t, headers *C.char, headersLen C.size_t, weight int64, blocks *C.uint64_t, blocksLen C.size_t) (core.Request, error) {
	req, err := requestFrom(r, key, keyLen, headers, headersLen)
	if err != nil {
		return core.Request{}, err
	}
	req.Weight = weight
	if req.PrefixBlocks, err = prefixBlocksArg(blocks, blocksLen); err != nil {
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
