package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/bounded-router/bounded-router/core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// storedBatch is a KVEventBatch as vLLM's msgspec encoder writes it (array_like, tag first),
// assembled byte by byte from the msgpack specification and vLLM's field order:
// [1.5, [["BlockStored", [11, 12], None, [1, 2, 3, 4], 2, None, None, None]]]
// (block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name).
var storedBatch = []byte{
	0x92,                               // the batch: an array of 2 fields
	0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // ts = 1.5, float 64
	0x91,                                                        // events: 1
	0x98,                                                        // the event: 8 elements
	0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', // its tag
	0x92, 0x0b, 0x0c, // block_hashes [11, 12]
	0xc0,                         // parent_block_hash None
	0x94, 0x01, 0x02, 0x03, 0x04, // token_ids
	0x02,             // block_size
	0xc0, 0xc0, 0xc0, // lora_id, medium, lora_name
}

func TestDecodeStoredBatch(t *testing.T) {
	b, err := Decode(storedBatch)
	require.NoError(t, err)
	assert.Equal(t, 1.5, b.TS)
	assert.Equal(t, []Event{{Kind: Stored, BlockHashes: []uint64{11, 12}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2}}, b.Events)
}

// Later vLLM versions declare the structs without array_like: maps of field names, the tag
// under "type" (msgspec's default tag field), fields added since (medium, group_idx, ...) skipped.
func TestDecodeMapForm(t *testing.T) {
	stored := map[string]any{"type": "BlockStored", "block_hashes": []uint64{11, 12}, "parent_block_hash": nil,
		"token_ids": []uint32{1, 2, 3, 4}, "block_size": 2, "lora_id": nil, "medium": "GPU", "lora_name": nil, "group_idx": 0}
	removed := map[string]any{"type": "BlockRemoved", "block_hashes": []uint64{7}, "medium": "GPU"}
	future := map[string]any{"type": "FutureEvent", "x": 1}
	payload, err := msgpack.Marshal(map[string]any{"ts": 1.5, "events": []any{stored, future, removed}, "data_parallel_rank": 0})
	require.NoError(t, err)
	b, err := Decode(payload)
	require.NoError(t, err)
	assert.Equal(t, 1.5, b.TS)
	assert.Equal(t, []Event{
		{Kind: Stored, BlockHashes: []uint64{11, 12}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2},
		{Kind: Removed, BlockHashes: []uint64{7}},
	}, b.Events)
	assert.Equal(t, 1, b.UnknownEvents)
	lora, err := msgpack.Marshal(map[string]any{"ts": 0.0, "events": []any{map[string]any{"type": "BlockStored", "block_hashes": []uint64{1},
		"token_ids": []uint32{1, 2}, "block_size": 2, "lora_name": "adapter-1"}}})
	require.NoError(t, err)
	b, err = Decode(lora)
	require.NoError(t, err)
	assert.True(t, b.Events[0].Adapter)
}

func TestDecodeRemovedClearedAndUnknown(t *testing.T) {
	payload := []byte{
		0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, // [0.0, events, data_parallel_rank 3]
		0x94, // 4 events
		0x93, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xa3, 'G', 'P', 'U',
		0x92, 0xa8, 'F', 'u', 't', 'u', 'r', 'e', 'E', 'v', 0x2a, // an unknown tag with a field: skipped
		0x91, 0xb0, 'A', 'l', 'l', 'B', 'l', 'o', 'c', 'k', 's', 'C', 'l', 'e', 'a', 'r', 'e', 'd',
		0x92, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0xc4, 0x02, 0xab, 0xcd, // a bytes hash
		0x03,
	}
	b, err := Decode(payload)
	require.NoError(t, err)
	require.Len(t, b.Events, 3)
	assert.Equal(t, Event{Kind: Removed, BlockHashes: []uint64{1<<64 - 1}}, b.Events[0])
	assert.Equal(t, Event{Kind: Cleared}, b.Events[1])
	assert.Equal(t, Removed, b.Events[2].Kind)
	assert.Len(t, b.Events[2].BlockHashes, 1)
	assert.Equal(t, 1, b.UnknownEvents)
}

func TestDecodeMalformed(t *testing.T) {
	for name, payload := range map[string][]byte{
		"empty":             {},
		"truncated":         storedBatch[:20],
		"a field not named": {0x81, 0x01, 0x00},
		"events not list":   {0x92, 0x00, 0x05},
		"tag not string":    {0x92, 0x00, 0x91, 0x91, 0x05},
		"tokens short":      {0x92, 0x00, 0x91, 0x95, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x91, 0x01, 0xc0, 0x91, 0x01, 0x02},
		"negative token":    {0x92, 0x00, 0x91, 0x95, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x91, 0x01, 0xc0, 0x91, 0xff, 0x01},
		"zero block size":   {0x92, 0x00, 0x91, 0x95, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0xc0, 0x90, 0x00},
		"too large":         make([]byte, MaxPayloadBytes+1),
		// Regression (found by FuzzDecode's seed): an array header claiming 4 Gi fields made the
		// decoder allocate for them before reading any: out of memory.
		"claims 4 Gi fields":  {0xdd, 0xff, 0xff, 0xff, 0xff},
		"claims 64 Ki tokens": {0x92, 0x00, 0x91, 0x95, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0xc0, 0xdc, 0xff, 0xff},
		// Regression (found by FuzzDecode, testdata/fuzz/FuzzDecode/89d1bb0473bfa96d): a parent
		// hash or an adapter field holding a list whose header claims 3.7 Gi elements was decoded
		// as any value, and the msgpack module allocated them all: out of memory.
		"parent hash a huge list": {0x92, 0x00, 0x91, 0x93, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0xdd, 0xdd, 0xdd, 0xdd, 0xdd},
		"lora_id a huge map":      {0x92, 0x00, 0x91, 0x96, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0xc0, 0x90, 0x01, 0xdf, 0xdd, 0xdd, 0xdd, 0xdd},
		"parent hash a list":      {0x92, 0x00, 0x91, 0x93, 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd', 0x90, 0x91, 0x01},
		// Regression (found by an audit): a field the decoder skips (here data_parallel_rank)
		// holding lists nested 16 Mi deep overflowed the goroutine's stack in the msgpack
		// module's recursive Skip, a fatal error no recover catches.
		"a skipped field nested 16 Mi deep": nested([]byte{0x93, 0x00, 0x90}, MaxPayloadBytes-16),
		"a skipped field nested too deep":   nested([]byte{0x93, 0x00, 0x90}, maxSkipDepth+1),
	} {
		_, err := Decode(payload)
		assert.True(t, errors.Is(err, ErrMalformed), "%s: %v", name, err)
	}
}

// nested is prefix, then depth one-element lists around a nil.
func nested(prefix []byte, depth int) []byte {
	return append(append(prefix, bytes.Repeat([]byte{0x91}, depth)...), 0xc0)
}

func TestDecodeSkipsFieldsItDoesNotRead(t *testing.T) {
	// data_parallel_rank as lists (and a map) nested as deep as a skipped field may be.
	for _, payload := range [][]byte{
		nested([]byte{0x93, 0x00, 0x90}, maxSkipDepth),
		{0x93, 0x00, 0x90, 0x82, 0x01, 0x91, 0x02, 0xa1, 'k', 0x80},
	} {
		b, err := Decode(payload)
		require.NoError(t, err)
		assert.Empty(t, b.Events)
	}
}

func tokenBytes(ids ...uint32) []byte {
	out := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(out[4*i:], id)
	}
	return out
}

// indexRouter is a cache_aware router over urls whose index keeps blocksPerWorker blocks a worker.
func indexRouter(t *testing.T, blocksPerWorker int, urls ...string) *core.Router {
	t.Helper()
	r, err := core.NewRouter(core.Config{WorkerURLs: urls, Policy: core.Policy{Kind: core.PolicyCacheAware, MaxLoadSkew: 1.5, MinLoadGap: 2, CacheAware: core.CacheAwareSettings{BlocksPerWorker: blocksPerWorker, CacheThreshold: 0.3}}, VirtualNodes: 150})
	require.NoError(t, err)
	return r
}

// Applied to a router, the stored blocks are named as prefix_blocks names the whole prompt:
// a request routed by the prompt's blocks finds them.
func TestApplyNamesBlocksByThePromptsPrefixHashes(t *testing.T) {
	urls := []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}
	r := indexRouter(t, 64, urls...)
	prompt := make([]uint64, 3)
	_, err := core.HashPrefixBlocks(tokenBytes(1, 2, 3, 4, 5, 6), 8, prompt)
	require.NoError(t, err)

	var c Counts
	first, err := Decode(storedBatch) // blocks [1,2] [3,4] as 11, 12
	require.NoError(t, err)
	require.NoError(t, Apply(r, urls[1], first, &c))
	then := Batch{Events: []Event{{Kind: Stored, BlockHashes: []uint64{13}, Parent: 12, HasParent: true, TokenIDs: []uint32{5, 6}, BlockSize: 2}}}
	require.NoError(t, Apply(r, urls[1], then, &c))
	for i, engine := range []uint64{11, 12, 13} {
		block, ok := r.ReportedBlock(urls[1], engine)
		require.True(t, ok)
		assert.Equal(t, prompt[i], block, "block %d", i)
	}
	d := r.Select(&core.Request{PrefixBlocks: prompt})
	assert.Equal(t, urls[1], d.WorkerURL)
	assert.Equal(t, core.BranchCacheAwarePrefixHit, d.Branch)

	orphan := Batch{Events: []Event{{Kind: Stored, BlockHashes: []uint64{99}, Parent: 98, HasParent: true, TokenIDs: []uint32{7, 8}, BlockSize: 2}}}
	adapter := Batch{Events: []Event{{Kind: Stored, BlockHashes: []uint64{97}, TokenIDs: []uint32{7, 8}, BlockSize: 2, Adapter: true}}}
	require.NoError(t, Apply(r, urls[1], orphan, &c))
	require.NoError(t, Apply(r, urls[1], adapter, &c))
	require.NoError(t, Apply(r, urls[1], Batch{Events: []Event{{Kind: Removed, BlockHashes: []uint64{13, 12}}}, UnknownEvents: 2}, &c))
	assert.Equal(t, 1, r.Workers()[1].IndexedBlocks)
	require.NoError(t, Apply(r, urls[1], Batch{Events: []Event{{Kind: Cleared}}}, &c))
	assert.Equal(t, 0, r.Workers()[1].IndexedBlocks)
	assert.Equal(t, Counts{Stored: 2, Removed: 1, Cleared: 1, UnknownParent: 1, Adapter: 1, UnknownTag: 2}, c)
}

// Whatever arrives, Decode returns a batch or an error wrapping ErrMalformed, and never panics;
// a batch it returns passes its own checks (tokens filling the stored blocks).
func FuzzDecode(f *testing.F) {
	f.Add(storedBatch)
	f.Add(storedBatch[:20])
	f.Add([]byte{0x92, 0x00, 0x90})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}) // an array claiming 4 Gi elements
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := Decode(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !strings.Contains(err.Error(), "event") {
				t.Fatalf("an error that is not ErrMalformed: %v", err)
			}
			return
		}
		for _, e := range b.Events {
			if e.Kind == Stored && len(e.TokenIDs) != len(e.BlockHashes)*e.BlockSize {
				t.Fatalf("a stored event whose tokens do not fill its blocks: %+v", e)
			}
		}
	})
}
