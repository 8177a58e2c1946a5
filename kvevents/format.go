// Package kvevents reads the KV cache events vLLM and SGLang publish (KVEventBatch over ZeroMQ,
// msgpack-encoded) and applies them to a router's cache_aware index (docs/contract.md,
// "Reported blocks"). This file declares the wire format and decodes it; apply.go turns events
// into the router's calls; the index never sees bytes.
//
// The format is vLLM's vllm/distributed/kv_events.py (SGLang publishes the same structures):
// a batch is a msgspec Struct KVEventBatch{ts float, events list, data_parallel_rank int|None}
// and each event a tagged Struct, the tag being the class name. Published with array_like=True,
// as vLLM's publisher and its example subscriber declare them, a struct is a msgpack array of
// its fields in declaration order (an event's tag first), trailing fields at their defaults
// left out (omit_defaults). Fields past those read here are skipped, so later versions that
// append fields still decode:
//
//	BlockStored:      block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...
//	BlockRemoved:     block_hashes, medium, ...
//	AllBlocksCleared: (no field)
//
// A block hash is an int, or bytes in engines that hash with SHA-256 (ExternalBlockHash =
// bytes | int); bytes are named here by their XXH64.
package kvevents

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is an event's tag.
type Kind uint8

const (
	Stored  Kind = iota + 1 // BlockStored
	Removed                 // BlockRemoved
	Cleared                 // AllBlocksCleared
)

// Event is one decoded KV cache event.
type Event struct {
	Kind Kind
	// BlockHashes are the engine's names of the blocks (Stored, Removed).
	BlockHashes []uint64
	// Parent is the engine's name of the block before the first stored one; HasParent is false
	// for the first block of a sequence (Stored).
	Parent    uint64
	HasParent bool
	// TokenIDs are the stored blocks' tokens, BlockSize per block (Stored).
	TokenIDs  []uint32
	BlockSize int
	// Adapter is set when the blocks belong to a LoRA adapter (lora_id or lora_name given):
	// their tokens then name other KV than the base model's.
	Adapter bool
}

// Batch is one KVEventBatch.
type Batch struct {
	TS     float64
	Events []Event
	// UnknownEvents counts the events of a tag this package does not know, skipped.
	UnknownEvents int
}

// Limits of one batch, so a flood of garbage cannot take unbounded memory.
const (
	MaxPayloadBytes = 16 << 20
	MaxEvents       = 1 << 16
	MaxBlocks       = 1 << 16 // per event, core.MaxPrefixBlocks
	MaxTokens       = 1 << 22 // per event
)

// ErrMalformed is wrapped by every error of a payload that is not a KVEventBatch.
var ErrMalformed = errors.New("malformed KV event batch")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Decode reads one batch's msgpack payload.
func Decode(payload []byte) (Batch, error) {
	if len(payload) > MaxPayloadBytes {
		return Batch{}, malformed("%d bytes, more than %d", len(payload), MaxPayloadBytes)
	}
	d := newDecoder(payload)
	var b Batch
	fields, err := structFields(d, []string{"ts", "events", "data_parallel_rank"})
	if err != nil {
		return Batch{}, err
	}
	for _, name := range fields {
		switch name {
		case "ts":
			if b.TS, err = d.DecodeFloat64(); err != nil {
				return Batch{}, malformed("ts: %v", err)
			}
		case "events":
			if err = decodeEvents(d, &b); err != nil {
				return Batch{}, err
			}
		default:
			if err = d.Skip(); err != nil {
				return Batch{}, malformed("%s: %v", name, err)
			}
		}
	}
	return b, nil
}

// decoder is a msgpack decoder that knows how many bytes are left, so that no length a
// header claims is allocated before the bytes that would fill it are there.
type decoder struct {
	*msgpack.Decoder
	rest *bytes.Reader
}

func newDecoder(payload []byte) decoder {
	r := bytes.NewReader(payload)
	return decoder{msgpack.NewDecoder(r), r}
}

// arrayLen reads an array header of at most limit elements, each of which takes a byte at least.
func (d decoder) arrayLen(limit int) (int, error) {
	n, err := d.DecodeArrayLen()
	switch {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, fmt.Errorf("nil, not a list")
	case n > limit || n > d.rest.Len():
		return 0, fmt.Errorf("a list of %d elements, more than %d or than the %d bytes left", n, limit, d.rest.Len())
	}
	return n, nil
}

// maxFields bounds the fields of one struct; vLLM's have at most a dozen.
const maxFields = 64

// structFields reads an array_like struct's header and returns the names of the fields that
// follow, in order ("-" past the known ones); the caller reads each field's value.
func structFields(d decoder, order []string) ([]string, error) {
	code, err := d.PeekCode()
	if err != nil {
		return nil, malformed("%v", err)
	}
	if msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32 {
		n, err := d.arrayLen(maxFields)
		if err != nil {
			return nil, malformed("a struct's fields: %v", err)
		}
		names := make([]string, n)
		for i := range names {
			names[i] = "-"
			if i < len(order) {
				names[i] = order[i]
			}
		}
		return names, nil
	}
	return nil, malformed("a struct must be an array of its fields (array_like), got msgpack code 0x%02x", code)
}

func decodeEvents(d decoder, b *Batch) error {
	n, err := d.arrayLen(MaxEvents)
	if err != nil {
		return malformed("events: %v", err)
	}
	b.Events = make([]Event, 0, n)
	for i := 0; i < n; i++ {
		e, known, err := decodeEvent(d)
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if known {
			b.Events = append(b.Events, e)
		} else {
			b.UnknownEvents++
		}
	}
	return nil
}

var eventFields = map[string]struct {
	kind   Kind
	fields []string
}{
	"BlockStored":      {Stored, []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}},
	"BlockRemoved":     {Removed, []string{"block_hashes", "medium"}},
	"AllBlocksCleared": {Cleared, nil},
}

// decodeEvent reads one tagged event; known is false for a tag not in eventFields (skipped).
func decodeEvent(d decoder) (e Event, known bool, err error) {
	n, err := d.arrayLen(maxFields)
	if err != nil || n < 1 {
		return e, false, malformed("an event must be an array with its tag first (array_like, tag=True): %d fields, %v", n, err)
	}
	tag, err := d.DecodeString()
	if err != nil {
		return e, false, malformed("an event's tag: %v", err)
	}
	spec, known := eventFields[tag]
	e.Kind = spec.kind
	for i := 1; i < n; i++ {
		name := "-"
		if known && i-1 < len(spec.fields) {
			name = spec.fields[i-1]
		}
		if err := decodeEventField(d, &e, name); err != nil {
			return e, false, malformed("%s.%s: %v", tag, name, err)
		}
	}
	if known && spec.kind == Stored {
		err = checkStored(&e)
	}
	return e, known, err
}

func decodeEventField(d decoder, e *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		e.BlockHashes, err = decodeHashes(d)
	case "parent_block_hash":
		var v any
		if v, err = d.DecodeInterfaceLoose(); err == nil && v != nil {
			e.Parent, err = hashValue(v)
			e.HasParent = err == nil
		}
	case "token_ids":
		e.TokenIDs, err = decodeTokens(d)
	case "block_size":
		var size int64
		if size, err = d.DecodeInt64(); err == nil && (size < 1 || size > MaxTokens) {
			err = fmt.Errorf("must be from 1 to %d, got %d", MaxTokens, size)
		}
		e.BlockSize = int(size)
	case "lora_id", "lora_name":
		var v any
		if v, err = d.DecodeInterfaceLoose(); err == nil && v != nil {
			e.Adapter = true
		}
	default:
		err = d.Skip()
	}
	return err
}

func decodeHashes(d decoder) ([]uint64, error) {
	n, err := d.arrayLen(MaxBlocks)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, n)
	for i := range out {
		v, err := d.DecodeInterfaceLoose()
		if err != nil {
			return nil, err
		}
		if out[i], err = hashValue(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// hashValue names a block hash by 64 bits: an int as itself (two's complement), bytes by XXH64.
func hashValue(v any) (uint64, error) {
	switch h := v.(type) {
	case int64:
		return uint64(h), nil
	case uint64:
		return h, nil
	case []byte:
		return xxhash.Sum64(h), nil
	case string:
		return xxhash.Sum64String(h), nil
	}
	return 0, fmt.Errorf("a block hash must be an int or bytes, got %T", v)
}

func decodeTokens(d decoder) ([]uint32, error) {
	n, err := d.arrayLen(MaxTokens)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, n)
	for i := range out {
		id, err := d.DecodeInt64()
		if err != nil {
			return nil, err
		}
		if id < 0 || id > math.MaxUint32 {
			return nil, fmt.Errorf("token id %d is not from 0 to 2**32 - 1", id)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// checkStored checks that a stored event's tokens fill its blocks.
func checkStored(e *Event) error {
	if e.BlockSize < 1 {
		return malformed("BlockStored without block_size")
	}
	if len(e.TokenIDs) != len(e.BlockHashes)*e.BlockSize {
		return malformed("BlockStored has %d token ids for %d blocks of %d", len(e.TokenIDs), len(e.BlockHashes), e.BlockSize)
	}
	return nil
}
