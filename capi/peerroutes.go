package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"log"

	"github.com/bounded-router/bounded-router/health"
	"github.com/bounded-router/bounded-router/peerroutes"
)

// br_peer_routes_start starts a feed that publishes the router's routes to its peers and
// applies theirs (package peerroutes; options as JSON, peerroutes.Options; docs/contract.md,
// "Sharing routes over the wire") and stores its handle in *out_feed. A router publishes on
// one feed at most.
//
//export br_peer_routes_start
func br_peer_routes_start(router C.uint64_t, optionsJSON *C.char, optionsLen C.size_t, outFeed *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return withStart(router, optionsJSON, optionsLen, outFeed, "out_feed", func(m *health.Monitor, text []byte) (uint64, error) {
		o, err := peerroutes.ParseOptions(text)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		f, err := peerroutes.Start(m.Router(), o, log.Printf)
		if err != nil {
			return 0, invalidArgument("%v", err)
		}
		return startFeed(m, f.Run, func() any { return f.Stats() })
	})
}
