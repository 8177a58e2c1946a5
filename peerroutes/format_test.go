package peerroutes

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oneRoute is [origin 2^63, [["http://a", 2, [11, 300]]]], assembled byte by byte from the
// msgpack specification (docs/contract.md, "Sharing routes over the wire").
var oneRoute = []byte{
	0x92,                            // the batch: [origin, routes]
	0xcf, 0x80, 0, 0, 0, 0, 0, 0, 0, // origin, uint 64
	0x91,                                         // routes: 1
	0x93,                                         // [worker_url, weight, blocks]
	0xa8, 'h', 't', 't', 'p', ':', '/', '/', 'a', // worker_url, a str of 8
	0x02,       // weight
	0x92, 0x0b, // blocks: 2, the first 11 (a positive fixint)
	0xcd, 0x01, 0x2c, // 300, uint 16
}

func TestEncodeWritesTheDeclaredFormat(t *testing.T) {
	b := Batch{Origin: 1 << 63, Routes: []Route{{URL: "http://a", Weight: 2, Blocks: []uint64{11, 300}}}}
	assert.Equal(t, oneRoute, Encode(b))
	got, err := Decode(oneRoute)
	require.NoError(t, err)
	assert.Equal(t, b, got)
}

func TestDecodeRoutesWithoutBlocksAndLargeValues(t *testing.T) {
	b := Batch{Origin: 5, Routes: []Route{{URL: "http://127.0.0.1:1", Weight: 1 << 30}, {URL: "", Weight: -1, Blocks: []uint64{1<<64 - 1}}}}
	got, err := Decode(Encode(b))
	require.NoError(t, err)
	assert.Equal(t, b, got, "a weight out of range decodes: PeerRoute refuses it, counted invalid")
	empty, err := Decode([]byte{0x92, 0x00, 0x90})
	require.NoError(t, err)
	assert.Equal(t, Batch{Routes: []Route{}}, empty)
}

func TestDecodeMalformed(t *testing.T) {
	for name, payload := range map[string][]byte{
		"empty":               {},
		"truncated":           oneRoute[:15],
		"trailing bytes":      append(append([]byte{}, oneRoute...), 0x00),
		"not a list":          {0x81, 0x00, 0x00},
		"three fields":        {0x93, 0x00, 0x90, 0x00},
		"origin a string":     {0x92, 0xa1, 'x', 0x90},
		"routes nil":          {0x92, 0x00, 0xc0},
		"route of two":        {0x92, 0x00, 0x91, 0x92, 0xa0, 0x01},
		"url an int":          {0x92, 0x00, 0x91, 0x93, 0x01, 0x01, 0x90},
		"weight a string":     {0x92, 0x00, 0x91, 0x93, 0xa0, 0xa0, 0x90},
		"block a string":      {0x92, 0x00, 0x91, 0x93, 0xa0, 0x01, 0x91, 0xa0},
		"claims 4 Gi routes":  {0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"claims 64 Ki blocks": {0x92, 0x00, 0x91, 0x93, 0xa0, 0x01, 0xdc, 0xff, 0xff},
		"too many blocks":     append([]byte{0x92, 0x00, 0x91, 0x93, 0xa0, 0x01, 0xdd, 0x00, 0x01, 0x00, 0x01}, make([]byte, MaxBlocks+1)...),
		"too large":           make([]byte, MaxPayloadBytes+1),
		// Regressions (found by a review): msgpack's typed reads take nil for a zero and a
		// negative integer for its two's complement, so these were read as routes.
		"origin nil":     {0x92, 0xc0, 0x90},
		"origin -1":      {0x92, 0xff, 0x90},
		"url nil":        {0x92, 0x00, 0x91, 0x93, 0xc0, 0x01, 0x90},
		"weight nil":     {0x92, 0x00, 0x91, 0x93, 0xa0, 0xc0, 0x90},
		"block nil":      {0x92, 0x00, 0x91, 0x93, 0xa0, 0x01, 0x91, 0xc0},
		"block -1":       {0x92, 0x00, 0x91, 0x93, 0xa0, 0x01, 0x91, 0xff},
		"origin a float": {0x92, 0xca, 0x3f, 0x80, 0x00, 0x00, 0x90},
	} {
		_, err := Decode(payload)
		assert.True(t, errors.Is(err, ErrMalformed), "%s: %v", name, err)
	}
}

// Whatever arrives, Decode returns a batch within the bounds or an error wrapping ErrMalformed,
// and never panics; what it returns encodes back to the same batch.
func FuzzDecode(f *testing.F) {
	f.Add(oneRoute)
	f.Add(oneRoute[:15])
	f.Add([]byte{0x92, 0x00, 0x90})
	f.Add([]byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := Decode(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("an error that is not ErrMalformed: %v", err)
			}
			return
		}
		if len(b.Routes) > MaxRoutes {
			t.Fatalf("%d routes", len(b.Routes))
		}
		for _, r := range b.Routes {
			if len(r.Blocks) > MaxBlocks {
				t.Fatalf("%d blocks", len(r.Blocks))
			}
		}
		again, err := Decode(Encode(b))
		if err != nil {
			t.Fatalf("a decoded batch does not decode once encoded: %v", err)
		}
		if len(again.Routes) != len(b.Routes) || again.Origin != b.Origin {
			t.Fatalf("round trip changed the batch: %+v, %+v", b, again)
		}
	})
}

// Regression (found by a review): the strict read of each block allocated (DecodeInterfaceLoose),
// 4,229 allocations for a batch of 64 routes of 64 blocks, 132 before.
func TestDecodeDoesNotAllocatePerBlock(t *testing.T) {
	batch := Batch{Origin: 1 << 40}
	for i := 0; i < 64; i++ {
		r := Route{URL: "http://127.0.0.1:8000", Weight: 1}
		for j := 0; j < 64; j++ {
			r.Blocks = append(r.Blocks, uint64(i*j+1)<<40|uint64(j))
		}
		batch.Routes = append(batch.Routes, r)
	}
	payload := Encode(batch)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := Decode(payload); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 64*4 {
		t.Fatalf("Decode of 4,096 blocks: %.0f allocations", allocs)
	}
}
