package gateway

import (
	"encoding/binary"

	"github.com/bounded-router/bounded-router/core"
)

// The token ids of a request body as prefix block hashes, for the prefix_blocks "tokens" option
// (docs/contract.md, "HTTP proxies"): the ids the engine caches, hashed as prefix_blocks(ids,
// block_size) and the KV-event intake (kvevents) hash them, so a request's blocks are the names
// of the blocks its engine reports. The ids are read in place, as the text is (jsonScanner).

// bodyTokenBlocks is the prefix blocks of a body's token ids, of its first maxBytes/4 ids and at
// most MaxPrefixBlocks blocks of blockSize ids, or nil when the body has none: "input_ids" when
// it is an array (SGLang's /generate), else "prompt" (OpenAI completions); the array must hold
// only integers from 0 to 2^32-1, and the body must be a JSON object, valid as a whole.
func bodyTokenBlocks(body []byte, blockSize, maxBytes int) []uint64 {
	at, prompt, valid := topLevelFields(body, "input_ids", "prompt")
	if !valid {
		return nil
	}
	if at < 0 || body[at] != '[' {
		at = prompt
	}
	if at < 0 || body[at] != '[' {
		return nil
	}
	blockLen := 4 * blockSize
	limit := min(maxBytes/blockLen, core.MaxPrefixBlocks)
	// Each id takes at least 2 bytes of the body (a digit and a comma) and 4 of the hash.
	h := core.NewPrefixHasher(blockLen, limit, make([]uint64, 0, min(limit, len(body)/(2*blockSize)+1)))
	var id [4]byte
	allIDs := (&jsonScanner{data: body, pos: at}).array(func(s *jsonScanner) bool {
		v, ok := s.tokenID()
		if ok && !h.Full() {
			binary.LittleEndian.PutUint32(id[:], v)
			h.Write(id[:])
		}
		return ok // every id is checked, hashed or not: one that is not makes the body have none
	})
	if !allIDs || len(h.Blocks()) == 0 {
		return nil
	}
	return h.Blocks()
}

// tokenID reads a number that is an integer from 0 to 2^32-1 (-0 is 0, as Python's json reads
// it); a fraction or an exponent makes it no token id, as it makes a float in Python.
func (s *jsonScanner) tokenID() (uint32, bool) {
	s.space()
	start := s.pos
	if !s.number() {
		return 0, false
	}
	digits := s.data[start:s.pos]
	negative := digits[0] == '-'
	if negative {
		digits = digits[1:]
	}
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v = 10*v + uint64(c-'0'); v >= 1<<32 {
			return 0, false
		}
	}
	return uint32(v), !negative || v == 0
}
