package main

import (
	"encoding/binary"
	"iter"
)

// Request headers cross the C boundary as one block: for each header, a little-endian uint32
// name length, the name, a little-endian uint32 value length, the value. One buffer keeps the
// call to a single pointer and length whatever the number of headers.

var errTruncatedHeaders = invalidArgument("headers: the block is truncated: each header is a uint32 name length, the name, a uint32 value length, the value")

// checkHeaderBlock verifies that block is a sequence of whole headers.
func checkHeaderBlock(block []byte) error {
	for rest := block; len(rest) > 0; {
		var ok bool
		if _, _, rest, ok = nextHeader(rest); !ok {
			return errTruncatedHeaders
		}
	}
	return nil
}

// headerPairs iterates over a block that checkHeaderBlock accepted.
func headerPairs(block []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for rest := block; len(rest) > 0; {
			name, value, next, ok := nextHeader(rest)
			if !ok || !yield(name, value) {
				return
			}
			rest = next
		}
	}
}

func nextHeader(block []byte) (name, value, rest []byte, ok bool) {
	if name, rest, ok = nextField(block); !ok {
		return nil, nil, nil, false
	}
	value, rest, ok = nextField(rest)
	return name, value, rest, ok
}

func nextField(block []byte) (field, rest []byte, ok bool) {
	if len(block) < 4 {
		return nil, nil, false
	}
	n := uint64(binary.LittleEndian.Uint32(block))
	if uint64(len(block)-4) < n {
		return nil, nil, false
	}
	return block[4 : 4+n], block[4+n:], true
}
