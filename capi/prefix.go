package main

/*
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import "github.com/bounded-router/bounded-router/core"

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
