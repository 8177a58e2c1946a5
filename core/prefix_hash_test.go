package core

import (
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"
)

// chainedReference hashes each block by concatenating the bytes HashPrefixBlocks documents,
// one allocation per block, with xxhash.Sum64 instead of a reused digest.
func chainedReference(data []byte, blockLen int) []uint64 {
	var hashes []uint64
	for i := 0; (i+1)*blockLen <= len(data); i++ {
		var input []byte
		if i > 0 {
			input = binary.LittleEndian.AppendUint64(input, hashes[i-1])
		}
		input = append(input, data[i*blockLen:(i+1)*blockLen]...)
		hashes = append(hashes, xxhash.Sum64(input))
	}
	return hashes
}

func hashAll(t *testing.T, data string, blockLen int) []uint64 {
	t.Helper()
	out := make([]uint64, len(data)/blockLen)
	n, err := HashPrefixBlocks([]byte(data), blockLen, out)
	if err != nil {
		t.Fatal(err)
	}
	return out[:n]
}

func TestHashPrefixBlocksMatchesTheDocumentedChain(t *testing.T) {
	data := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20))
	for _, blockLen := range []int{1, 3, 16, 64, len(data), len(data) + 1} {
		want := chainedReference(data, blockLen)
		got := hashAll(t, string(data), blockLen)
		if len(got) != len(want) {
			t.Fatalf("block_len %d: %d blocks, want %d", blockLen, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("block_len %d, block %d: %#x, want %#x", blockLen, i, got[i], want[i])
			}
		}
	}
}

func TestHashPrefixBlocksEqualPrefixesShareBlocksUntilTheyDiverge(t *testing.T) {
	a := hashAll(t, "aaaabbbbccccdddd", 4)
	b := hashAll(t, "aaaabbbbXcccdddd", 4)
	if a[0] != b[0] || a[1] != b[1] {
		t.Fatalf("equal first two blocks hash apart: %x %x", a, b)
	}
	// Block 3 is equal in both texts, but it names a prefix that differs in block 2.
	if a[2] == b[2] || a[3] == b[3] {
		t.Fatalf("blocks after the divergence still match: %x %x", a, b)
	}
}

func TestHashPrefixBlocksDropsThePartialLastBlock(t *testing.T) {
	full := hashAll(t, "aaaabbbb", 4)
	partial := hashAll(t, "aaaabbbbcc", 4)
	if len(partial) != 2 || partial[0] != full[0] || partial[1] != full[1] {
		t.Fatalf("a partial block changed the answer: %x vs %x", partial, full)
	}
}

func TestHashPrefixBlocksRefusesBadArgumentsNamingThem(t *testing.T) {
	cases := []struct {
		name     string
		dataLen  int
		blockLen int
		outLen   int
		field    string
	}{
		{"zero block", 8, 0, 8, "block_len"},
		{"negative block", 8, -4, 8, "block_len"},
		{"too many blocks", MaxPrefixBlocks + 1, 1, MaxPrefixBlocks + 1, "prefix_blocks"},
		{"out too small", 8, 4, 1, "out"},
	}
	for _, c := range cases {
		_, err := HashPrefixBlocks(make([]byte, c.dataLen), c.blockLen, make([]uint64, c.outLen))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: got %v, want an error naming %s", c.name, err, c.field)
		}
	}
	if n, err := HashPrefixBlocks(make([]byte, MaxPrefixBlocks), 1, make([]uint64, MaxPrefixBlocks)); err != nil || n != MaxPrefixBlocks {
		t.Fatalf("MaxPrefixBlocks blocks: %d, %v", n, err)
	}
}

func BenchmarkHashPrefixBlocks(b *testing.B) {
	data := make([]byte, 128*16*4) // 128 blocks of 16 uint32 token ids
	out := make([]uint64, 128)
	b.ReportAllocs()
	for range b.N {
		if _, err := HashPrefixBlocks(data, 16*4, out); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzHashPrefixBlocks(f *testing.F) {
	f.Add([]byte("abcdefghij"), 4)
	f.Add([]byte{}, 1)
	f.Add([]byte("x"), 0)
	f.Fuzz(func(t *testing.T, data []byte, blockLen int) {
		out := make([]uint64, len(data)+1)
		n, err := HashPrefixBlocks(data, blockLen, out)
		if blockLen <= 0 {
			if err == nil || !strings.Contains(err.Error(), "block_len") {
				t.Fatalf("block_len %d: got %v, want an error naming block_len", blockLen, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("block_len %d over %d bytes: %v", blockLen, len(data), err)
		}
		want := chainedReference(data, blockLen)
		if n != len(want) {
			t.Fatalf("%d blocks, want %d", n, len(want))
		}
		for i := range want {
			if out[i] != want[i] {
				t.Fatalf("block %d: %#x, want %#x", i, out[i], want[i])
			}
		}
	})
}

// A text written to a PrefixHasher in pieces of any size hashes as HashPrefixBlocks hashes it
// whole (itself checked against the vectors above), and blocks past the limit are left out.
func TestPrefixHasherTakesTheTextInAnyPieces(t *testing.T) {
	data := make([]byte, 1000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	want := make([]uint64, len(data)/24)
	n, err := HashPrefixBlocks(data, 24, want)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 5))
	for round := 0; round < 50; round++ {
		room := rng.IntN(n + 5)
		h := NewPrefixHasher(24, room, []uint64{})
		for rest := data; len(rest) > 0; {
			k := min(len(rest), rng.IntN(60))
			written, _ := h.Write(rest[:k])
			require.Equal(t, k, written)
			rest = rest[k:]
		}
		require.Equal(t, want[:min(n, room)], h.Blocks(), "room %d", room)
		require.Equal(t, room <= n, h.Full())
	}
}

// Hashing the blocks after a prefix, chained on the prefix's last hash, gives the whole
// prompt's hashes of those blocks.
func TestChainPrefixBlocksContinuesAPrompt(t *testing.T) {
	data := []byte("abcdefghijklmnopqrstuvwx")
	whole := make([]uint64, 6)
	n, err := HashPrefixBlocks(data, 4, whole)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	rest := make([]uint64, 4)
	n, err = ChainPrefixBlocks(whole[1], true, data[8:], 4, rest)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, whole[2:], rest)
	n, err = ChainPrefixBlocks(12345, false, data[:16], 4, rest) // no previous: previous is ignored
	require.NoError(t, err)
	require.Equal(t, whole[:4], rest[:n])
}
