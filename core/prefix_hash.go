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
	h := NewPrefixHasher(blockLen, n, out[:0])
	if hasPrevious {
		h.follow(previous)
	}
	h.Write(data)
	return len(h.Blocks()), nil
}

// PrefixHasher computes HashPrefixBlocks' hashes of a text written to it in pieces of any size,
// holding one block's hash state instead of the text. It hashes up to a limit of blocks and
// ignores what is written after.
type PrefixHasher struct {
	blocks   []uint64
	digest   xxhash.Digest
	blockLen int
	limit    int
	filled   int // bytes of the current block written so far
}

// NewPrefixHasher hashes at most limit blocks of blockLen (> 0) bytes, appending them to out.
func NewPrefixHasher(blockLen, limit int, out []uint64) *PrefixHasher {
	h := &PrefixHasher{blocks: out, blockLen: blockLen, limit: limit}
	h.digest.Reset()
	return h
}

// Write hashes p as the continuation of what was written before. It never fails.
func (h *PrefixHasher) Write(p []byte) (int, error) {
	written := len(p)
	for len(p) > 0 && !h.Full() {
		n := min(len(p), h.blockLen-h.filled)
		h.digest.Write(p[:n])
		p, h.filled = p[n:], h.filled+n
		if h.filled == h.blockLen {
			sum := h.digest.Sum64()
			h.blocks = append(h.blocks, sum)
			h.follow(sum)
			h.filled = 0
		}
	}
	return written, nil
}

// follow starts the next block chained on previous, the hash of the block before it.
func (h *PrefixHasher) follow(previous uint64) {
	var chained [8]byte
	binary.LittleEndian.PutUint64(chained[:], previous)
	h.digest.Reset()
	h.digest.Write(chained[:])
}

// Full reports whether the limit is reached: what is written from then on is not hashed.
func (h *PrefixHasher) Full() bool { return len(h.blocks) >= h.limit }

// Blocks is the hashes of the full blocks written so far.
func (h *PrefixHasher) Blocks() []uint64 { return h.blocks }

// CountPrefixBlocks is the number of full blocks of blockLen bytes in dataLen bytes, or an
// error naming the field when blockLen is not positive or the blocks exceed MaxPrefixBlocks.
func CountPrefixBlocks(dataLen, blockLen int) (int, error) {
	if blockLen <= 0 {
		return 0, invalid("block_len must be positive, got %d", blockLen)
	}
	n := dataLen / blockLen
	return n, CheckPrefixBlocks(n)
}
