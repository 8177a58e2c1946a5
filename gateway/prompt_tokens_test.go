package gateway

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bounded-router/bounded-router/core"
)

// tokenVector is a case of tests/testdata/token_prefix_blocks.json, whose blocks are
// bounded_router.prefix_blocks of ids chosen by hand (scripts/token_block_vectors.py).
type tokenVector struct {
	Name      string   `json:"name"`
	Body      string   `json:"body"`
	BlockSize int      `json:"block_size"`
	MaxBytes  int      `json:"max_bytes"`
	Blocks    []string `json:"blocks"`
}

func TestTokenBlocksMatchTheSharedVectors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "tests", "testdata", "token_prefix_blocks.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []tokenVector
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		var want []uint64
		for _, b := range c.Blocks {
			v, err := strconv.ParseUint(b, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
		if got := bodyTokenBlocks([]byte(c.Body), c.BlockSize, c.MaxBytes); !slices.Equal(got, want) {
			t.Errorf("%s: %x, want %x", c.Name, got, want)
		}
	}
}

// tokenHashes is core.HashPrefixBlocks of ids as little-endian uint32s.
func tokenHashes(t testing.TB, ids []uint32, blockSize int) []uint64 {
	data := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(data[4*i:], id)
	}
	return hashes(t, string(data), 4*blockSize)
}

func idsJSON(ids []uint32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(uint64(id), 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// A prompt over MaxPrefixBlocks blocks is routed by its first MaxPrefixBlocks, and the blocks
// are all a large body costs: no copy of the body (642 KB) or of its ids (262 KB). The counter is
// the process's, so other goroutines of the test binary only add to it: the least of five runs
// is the call's own, within the slack.
func TestALongTokenPromptIsCutToMaxPrefixBlocksInPlace(t *testing.T) {
	ids := make([]uint32, core.MaxPrefixBlocks+100)
	for i := range ids {
		ids[i] = uint32(i * 7919)
	}
	body := []byte(`{"prompt": ` + idsJSON(ids) + `}`)
	allocated := uint64(math.MaxUint64)
	for range 5 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		got := bodyTokenBlocks(body, 1, 1<<30)
		runtime.ReadMemStats(&after)
		if !slices.Equal(got, tokenHashes(t, ids[:core.MaxPrefixBlocks], 1)) {
			t.Fatalf("%d blocks, want the first %d", len(got), core.MaxPrefixBlocks)
		}
		allocated = min(allocated, after.TotalAlloc-before.TotalAlloc)
	}
	if blocks := uint64(8 * core.MaxPrefixBlocks); allocated > blocks+64<<10 {
		t.Fatalf("%d bytes allocated for a %d-byte body, %d of them blocks", allocated, len(body), blocks)
	}
}

// The gateway's reading of any body the fuzzer makes against encoding/json's: the ids of
// "input_ids" when it is an array, else of "prompt", each an integer in range.
func FuzzTokenBlocksMatchEncodingJSON(f *testing.F) {
	for _, seed := range []string{`{"prompt": [1, 2, 3, 4]}`, `{"input_ids": [0, 4294967295], "prompt": "x"}`, `{"input_ids": null, "prompt": [-0, 1e2, 3]}`,
		`{"prompt": [1, 2.5]}`, `{"prompt": [[1]]}`, ` {"prompt" : [ 5 ,6 ] } `, `{"prompt": [4294967296]}`} {
		f.Add([]byte(seed), 1, 1<<20)
	}
	f.Fuzz(func(t *testing.T, body []byte, blockSize, maxBytes int) {
		blockSize, maxBytes = 1+abs(blockSize)%8, abs(maxBytes)%(1<<22)
		var want []uint64
		if ids, ok := referenceTokenIDs(body); ok {
			want = tokenHashes(t, ids[:min(len(ids), maxBytes/4, core.MaxPrefixBlocks*blockSize)], blockSize)
		}
		if got := bodyTokenBlocks(body, blockSize, maxBytes); !slices.Equal(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Fatalf("%q: %x, want %x", body, got, want)
		}
	})
}

// referenceTokenIDs reads a body's token ids with encoding/json.
func referenceTokenIDs(body []byte) ([]uint32, bool) {
	var document map[string]json.RawMessage
	if json.Unmarshal(body, &document) != nil || !strings.HasPrefix(strings.TrimLeft(string(body), " \t\r\n"), "{") {
		return nil, false
	}
	field := document["input_ids"]
	if !strings.HasPrefix(string(field), "[") {
		field = document["prompt"]
	}
	var numbers []json.Number
	if !strings.HasPrefix(string(field), "[") || json.Unmarshal(field, &numbers) != nil {
		return nil, false
	}
	ids := make([]uint32, len(numbers))
	for i, n := range numbers {
		v, err := strconv.ParseUint(strings.TrimPrefix(string(n), "-"), 10, 32)
		if err != nil || (strings.HasPrefix(string(n), "-") && v != 0) {
			return nil, false
		}
		ids[i] = uint32(v)
	}
	return ids, true
}

func TestTokenPrefixBlockOptions(t *testing.T) {
	o, err := ParseOptions([]byte(`{"prefix_blocks": "tokens", "prefix_block_size": 4}`))
	if err != nil || o.PrefixBlocks != "tokens" || o.PrefixBlockSize != 4 {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err = ParseOptions(nil); err != nil || o.PrefixBlockSize != 16 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	for text, field := range map[string]string{`{"prefix_blocks": "ids"}`: `prefix_blocks must be "off", "text" or "tokens"`, `{"prefix_block_size": -1}`: "prefix_block_size",
		// Regression: 2**62 ids a block made the block 0 bytes long (4 x 2**62 overflows) and every
		// request panicked dividing by it.
		`{"prefix_blocks": "tokens", "prefix_block_size": 4611686018427387904}`:           "prefix_block_size must be at most prefix_max_bytes / 4 (262144 token ids)",
		`{"prefix_blocks": "text", "prefix_block_bytes": 2048, "prefix_max_bytes": 1024}`: "prefix_block_bytes must be at most prefix_max_bytes (1024)",
	} {
		if _, err := ParseOptions([]byte(text)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v", text, err)
		}
	}
}

// Under cache_aware, a worker that reports holding a prompt's blocks (as its KV events would,
// named by the chained hash of its token ids) gets the request that sends those ids.
func TestTokenPrefixBlocksMatchWhatAWorkerReports(t *testing.T) {
	r, urls := cacheAwareRouter(t, 3)
	ids := []uint32{11, 22, 33, 44, 55, 66, 77, 88, 99}
	held := urls[2]
	if err := r.StoreBlocks(held, tokenHashes(t, ids[:8], 4), nil); err != nil {
		t.Fatal(err)
	}
	g := start(t, r, Options{PrefixBlocks: "tokens", PrefixBlockSize: 4, ExposeRoutingHeaders: true})
	for _, body := range []string{`{"prompt": ` + idsJSON(ids) + `}`, `{"input_ids": ` + idsJSON(ids) + `, "sampling_params": {}}`} {
		res, err := client().Post("http://"+g.Addr()+"/generate", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		waitLeases(t, r, 0)
		if got, branch := res.Header.Get(HeaderWorker), res.Header.Get(HeaderBranch); got != held || branch != "cache_aware_prefix_hit" {
			t.Fatalf("%s: %s %s, want %s", body, got, branch, held)
		}
	}
	if s := r.Stats(); s.PrefixBlocks != 4 || s.PrefixBlocksMatched != 4 {
		t.Fatalf("router counted %d blocks, %d matched; want 4 and 4", s.PrefixBlocks, s.PrefixBlocksMatched)
	}
}

// BenchmarkBodyTokenBlocks is the option's cost per body of ids.
func BenchmarkBodyTokenBlocks(b *testing.B) {
	for _, n := range []int{1 << 10, 32 << 10} {
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = uint32(i * 7919 % 151000)
		}
		body := []byte(`{"model": "m", "prompt": ` + idsJSON(ids) + `}`)
		b.Run(fmt.Sprintf("ids=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for range b.N {
				bodyTokenBlocks(body, 16, 1<<20)
			}
		})
	}
}
