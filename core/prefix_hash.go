package core

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// HashPrefixBlocks writes to out the chained XXH64 hashes of the full blocks of blockLen bytes
// in data and returns how many it wrote: block 0 hashes its own bytes, block i > 0 hashes the
// previous block's hash (8 bytes, little-endian) followed by its bytes, so block i names the
// whole prefix through block i. A partial last block is left out: engines with paged KV caches
// cache only full pages. Token ids go in as little-endian uint32s, text as its UTF-8 bytes.
func HashPrefixBlocks(data []byte, blockLen int, out []uint64) (int, error) {
	return ChainPrefixBlocks(0, false, data, blockLen, out)
}

// ChainPrefixBlocks is HashPrefixBlocks for blocks that follow a block already hashed: with
// hasPrevious, block 0 hashes previous (8 bytes, little-endian) followed by its bytes, as it
// would in the whole prompt. So the hashes of an engine's stored blocks, reported after their
// parent block, equal those of the whole prompt's prefix_blocks.
func ChainPrefixBlocks(previous uint64, hasPrevious bool, data []byte, blockLen int, out []uint64) (int, error) {
	n, err := CountPrefixBlocks(len(data), blockLen)
	if err != nil {
		return 0, err
	}
	if len(out) < n {
		return 0, invalid("out has room for %d prefix blocks, %d needed", len(out), n)
	}
	var d xxhash.Digest
	var chained [8]byte
	for i := range n {
		d.Reset()
		if i > 0 || hasPrevious {
			binary.LittleEndian.PutUint64(chained[:], previous)
			d.Write(chained[:])
		}
		d.Write(data[i*blockLen : (i+1)*blockLen])
		out[i] = d.Sum64()
		previous = out[i]
	}
	return n, nil
}

// CountPrefixBlocks is the number of full blocks of blockLen bytes in dataLen bytes, or an
// error naming the field when blockLen is not positive or the blocks exceed MaxPrefixBlocks.
func CountPrefixBlocks(dataLen, blockLen int) (int, error) {
	if blockLen <= 0 {
		return 0, invalid("block_len must be positive, got %d", blockLen)
	}
	n := dataLen / blockLen
	return n, CheckPrefixBlocks(n)
}
