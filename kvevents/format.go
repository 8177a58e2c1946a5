// Package kvevents reads the KV cache events vLLM and SGLang publish (KVEventBatch over ZeroMQ,
// msgpack-encoded) and applies them to a router's cache_aware index (docs/contract.md,
// "Reported blocks"). This file declares the wire format and decodes it; apply.go turns events
// into the router's calls; the index never sees bytes.
//
// The format is vLLM's vllm/distributed/kv_events.py (SGLang publishes the same structures):
// a batch is a msgspec Struct KVEventBatch{ts float, events list, data_parallel_rank int|None}
// and each event a tagged Struct, the tag being the class name. Published with array_like=True,
// as vLLM's publisher and its example subscriber declared them, a struct is a msgpack array of
// its fields in declaration order (an event's tag first), trailing fields at their defaults
// left out (omit_defaults); later vLLM versions declare them without array_like, so a struct
// is a map of its field names (an event's tag under "type"). Both are read; fields not read
// here are skipped, so versions that add fields still decode:
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
	err := d.eachField([]string{"ts", "events", "data_parallel_rank"}, func(name string) error {
		var err error
		switch name {
		case "ts":
			if b.TS, err = d.DecodeFloat64(); err != nil {
				return malformed("ts: %v", err)
			}
		case "events":
			return decodeEvents(d, &b)
		default:
			if err = d.skip(maxSkipDepth); err != nil {
				return malformed("%s: %v", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return Batch{}, err
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

// scalar reads a value that may be an int, a string, bytes or nil, and refuses a list, a map or
// an extension: their headers can claim more elements than the payload holds, and the msgpack
// module allocates what a header claims when it decodes a value of any type.
func (d decoder) scalar() (any, error) {
	code, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	if msgpcode.IsFixedArray(code) || msgpcode.IsFixedMap(code) || msgpcode.IsExt(code) ||
		code == msgpcode.Array16 || code == msgpcode.Array32 || code == msgpcode.Map16 || code == msgpcode.Map32 {
		return nil, fmt.Errorf("must be an int, a string, bytes or nil, got a list, a map or an extension (code 0x%02x)", code)
	}
	return d.DecodeInterfaceLoose()
}

// skip reads past one value of any type, its lists and maps nested at most depth deep, and
// none claiming more elements than there are bytes left.
func (d decoder) skip(depth int) error {
	code, err := d.PeekCode()
	if err != nil {
		return err
	}
	elements := 0
	switch {
	case msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32:
		elements, err = d.DecodeArrayLen()
	case msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32:
		elements, err = d.DecodeMapLen()
		elements *= 2
	default:
		return d.Skip() // a scalar, a string, bytes or an extension: no nesting
	}
	switch {
	case err != nil:
		return err
	case elements > d.rest.Len():
		return fmt.Errorf("a list or map of %d values, more than the %d bytes left", elements, d.rest.Len())
	case elements > 0 && depth == 0:
		return fmt.Errorf("lists or maps nested more than %d deep", maxSkipDepth)
	}
	for range elements {
		if err := d.skip(depth - 1); err != nil {
			return err
		}
	}
	return nil
}

// maxFields bounds the fields of one struct; vLLM's have at most a dozen.
const maxFields = 64

// maxSkipDepth bounds the nesting of a value the decoder skips: the msgpack module's own Skip
// recurses once per level with no bound, and a payload of nested one-element lists would
// overflow the goroutine's stack, a fatal error no recover catches.
const maxSkipDepth = 32

// isMap reports whether the next value is a map: a struct encoded without array_like.
func (d decoder) isMap() (bool, error) {
	code, err := d.PeekCode()
	if err != nil {
		return false, malformed("%v", err)
	}
	return msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32, nil
}

// eachField reads a struct, an array of its fields in order (array_like; "-" names the fields
// past order) or a map of field names, and calls visit with each field's name, visit reading
// its value.
func (d decoder) eachField(order []string, visit func(name string) error) error {
	asMap, err := d.isMap()
	if err != nil {
		return err
	}
	if asMap {
		n, err := d.DecodeMapLen()
		if err != nil || n < 0 || n > maxFields || 2*n > d.rest.Len() {
			return malformed("a struct's fields: a map of %d, %v", n, err)
		}
		for range n {
			name, err := d.DecodeString()
			if err != nil {
				return malformed("a field name: %v", err)
			}
			if err := visit(name); err != nil {
				return err
			}
		}
		return nil
	}
	n, err := d.arrayLen(maxFields)
	if err != nil {
		return malformed("a struct must be an array of its fields or a map: %v", err)
	}
	for i := range n {
		name := "-"
		if i < len(order) {
			name = order[i]
		}
		if err := visit(name); err != nil {
			return err
		}
	}
	return nil
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

type eventSpec struct {
	kind   Kind
	fields []string
}

var eventFields = map[string]eventSpec{
	"BlockStored":      {Stored, []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}},
	"BlockRemoved":     {Removed, []string{"block_hashes", "medium"}},
	"AllBlocksCleared": {Cleared, nil},
}

// decodeEvent reads one tagged event, an array with its tag first (array_like) or a map with
// its tag under "type"; known is false for a tag not in eventFields (skipped).
func decodeEvent(d decoder) (e Event, known bool, err error) {
	asMap, err := d.isMap()
	if err != nil {
		return e, false, err
	}
	tag := ""
	var spec eventSpec
	if asMap {
		err = d.eachField(nil, func(name string) error {
			if name != "type" {
				return decodeEventField(d, &e, name)
			}
			var err error
			if tag, err = d.DecodeString(); err == nil {
				spec, known = eventFields[tag]
			}
			return err
		})
	} else {
		var n int
		if n, err = d.arrayLen(maxFields); err != nil || n < 1 {
			return e, false, malformed("an event must be an array with its tag first (array_like, tag=True) or a map: %d fields, %v", n, err)
		}
		if tag, err = d.DecodeString(); err != nil {
			return e, false, malformed("an event's tag: %v", err)
		}
		spec, known = eventFields[tag]
		for i := 1; i < n && err == nil; i++ {
			name := "-"
			if known && i-1 < len(spec.fields) {
				name = spec.fields[i-1]
			}
			err = decodeEventField(d, &e, name)
		}
	}
	if err != nil {
		return e, false, malformed("%s: %v", tag, err)
	}
	e.Kind = spec.kind
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
		if v, err = d.scalar(); err == nil && v != nil {
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
		if v, err = d.scalar(); err == nil && v != nil {
			e.Adapter = true
		}
	default:
		err = d.skip(maxSkipDepth)
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
		v, err := d.scalar()
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
