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

// br_prefix_blocks hashes a prompt into the prefix block hashes cache_aware reads, with the
// core's chained XXH64 (core.HashPrefixBlocks), so bindings need no hash of their own.
//
//export br_prefix_blocks
func br_prefix_blocks(data *C.char, dataLen C.size_t, blockLen C.size_t, out *C.uint64_t, outCapacity C.size_t) (status C.int64_t) {
	defer guard(&status)
	bytes, err := bytesArg(data, dataLen, "data")
	if err != nil {
		return C.int64_t(fail(err))
	}
	if uint64(blockLen) > maxArgLen {
		return C.int64_t(fail(invalidArgument("block_len is %d, more than the largest accepted length %d", uint64(blockLen), maxArgLen)))
	}
	hashes, err := prefixOut(out, outCapacity)
	if err != nil {
		return C.int64_t(fail(err))
	}
	n, err := core.HashPrefixBlocks(bytes, int(blockLen), hashes)
	if err != nil {
		return C.int64_t(fail(err))
	}
	return C.int64_t(n)
}

// prefixOut views the out_capacity hashes at out; out may be NULL only when out_capacity is 0.
// Past MaxPrefixBlocks the room is never used, so a larger capacity is cut to it.
func prefixOut(out *C.uint64_t, capacity C.size_t) ([]uint64, error) {
	return uint64sArg(out, capacity, min(uint64(capacity), core.MaxPrefixBlocks), "out", "out_capacity")
}

// br_store_blocks reports that the engine of a worker stores blocks (core.Router.StoreBlocks);
// engine_hashes, NULL or one per block, are the engine's names for them.
//
//export br_store_blocks
func br_store_blocks(router C.uint64_t, url *C.char, urlLen C.size_t, blocks *C.uint64_t, n C.size_t, engineHashes *C.uint64_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error {
		b, err := reportedBlocks(blocks, n, "blocks")
		if err != nil {
			return err
		}
		var names []uint64
		if engineHashes != nil {
			names = unsafe.Slice((*uint64)(unsafe.Pointer(engineHashes)), len(b))
		}
		return r.StoreBlocks(u, b, names)
	})
}

// br_peer_route records a route another router replica took (core.Router.PeerRoute).
//
//export br_peer_route
func br_peer_route(router C.uint64_t, url *C.char, urlLen C.size_t, weight C.int64_t, blocks *C.uint64_t, n C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error {
		b, err := reportedBlocks(blocks, n, "blocks")
		if err != nil {
			return err
		}
		return r.PeerRoute(u, int64(weight), b)
	})
}

// br_remove_blocks reports that the engine of a worker evicted the blocks it names
// engine_hashes (core.Router.RemoveBlocks).
//
//export br_remove_blocks
func br_remove_blocks(router C.uint64_t, url *C.char, urlLen C.size_t, engineHashes *C.uint64_t, n C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error {
		names, err := reportedBlocks(engineHashes, n, "engine_hashes")
		if err != nil {
			return err
		}
		return r.RemoveBlocks(u, names)
	})
}

// br_clear_blocks reports that the engine of a worker dropped every block (core.Router.ClearBlocks).
//
//export br_clear_blocks
func br_clear_blocks(router C.uint64_t, url *C.char, urlLen C.size_t) (status C.int32_t) {
	defer guard(&status)
	return withWorker(router, url, urlLen, func(r *core.Router, u string) error { return r.ClearBlocks(u) })
}

// reportedBlocks views the n block hashes of a report; more than MaxPrefixBlocks is refused
// before they are read.
func reportedBlocks(p *C.uint64_t, n C.size_t, name string) ([]uint64, error) {
	if err := core.CheckBlockCount(name, uint64(n)); err != nil {
		return nil, err
	}
	return uint64sArg(p, n, uint64(n), name, "n")
}
