package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/bounded-router/bounded-router/gateway"
	"github.com/bounded-router/bounded-router/health"
)

// The native gateway (package gateway): an HTTP proxy served by the library's own threads,
// routing every request through a router of this process, so Python code and the proxied
// requests share loads, membership and statistics.

// An unknown gateway handle is an invalid argument: BR_ERR_INVALID_HANDLE means a closed router.
var errInvalidGateway = invalidArgument("invalid gateway handle: the gateway was stopped or never started")

// gateways maps the opaque integers C holds to running gateways; handles are never reused.
var gateways = struct {
	sync.Mutex
	running map[uint64]*gateway.Gateway
}{running: map[uint64]*gateway.Gateway{}}

// br_gateway_start starts a gateway in front of a router's workers with options as a JSON
// object (see gateway.Options; empty for the defaults) and stores its handle in *out_gateway.
// br_gateway_address_json tells where it listens.
//
//export br_gateway_start
func br_gateway_start(router C.uint64_t, optionsJSON *C.char, optionsLen C.size_t, outGateway *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return withStart(router, optionsJSON, optionsLen, outGateway, "out_gateway", func(m *health.Monitor, text []byte) (uint64, error) {
		opts, err := gateway.ParseOptions(text)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		g, err := gateway.Start(m, opts)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		gateways.Lock()
		defer gateways.Unlock()
		handle := newHandle()
		gateways.running[handle] = g
		return handle, nil
	})
}

// br_gateway_address_json writes {"address": "host:port", "metrics_address": "host:port" or
// null, "in_flight": n} of a running gateway, answering like every *_json export.
//
//export br_gateway_address_json
func br_gateway_address_json(handle C.uint64_t, buf *C.char, capacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	gateways.Lock()
	g, ok := gateways.running[uint64(handle)]
	gateways.Unlock()
	if !ok {
		return C.int64_t(fail(errInvalidGateway))
	}
	var metrics *string
	if a := g.MetricsAddr(); a != "" {
		metrics = &a
	}
	n, err := writeJSON(map[string]any{"address": g.Addr(), "metrics_address": metrics, "in_flight": g.InFlight()}, buf, capacity)
	if err != nil {
		return C.int64_t(fail(err))
	}
	return n
}

// br_gateway_stop stops accepting connections, lets in-flight requests finish for up to
// timeout_ms milliseconds (the gateway's shutdown_timeout when 0 or less), cuts the rest and
// returns once every request has released its lease: 0, or 1 when requests had to be cut.
// The handle becomes invalid.
//
//export br_gateway_stop
func br_gateway_stop(handle C.uint64_t, timeoutMs C.int64_t) (status C.int32_t) {
	defer guard(&status)
	gateways.Lock()
	g, ok := gateways.running[uint64(handle)]
	delete(gateways.running, uint64(handle))
	gateways.Unlock()
	if !ok {
		return fail(errInvalidGateway)
	}
	err := g.Shutdown(drainTimeout(int64(timeoutMs)))
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, context.DeadlineExceeded):
		return 1
	default:
		setErrorText(err.Error())
		return statusInternal
	}
}

// drainTimeout is timeout_ms as a Duration, at most the longest one (a product past it would wrap).
func drainTimeout(ms int64) time.Duration {
	if ms > int64(math.MaxInt64/time.Millisecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}
