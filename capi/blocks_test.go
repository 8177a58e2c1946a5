package main

import (
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Header blocks, key blocks and argument checks against encoders and vectors written here from
// capi/bounded_router.h's description, not from the decoders under test.

type header struct{ name, value string }

// encodeHeaders writes a header block as the public header describes it: for each header a
// little-endian uint32 name length, the name, a little-endian uint32 value length, the value.
func encodeHeaders(headers []header) []byte {
	var block []byte
	for _, h := range headers {
		block = binary.LittleEndian.AppendUint32(block, uint32(len(h.name)))
		block = append(block, h.name...)
		block = binary.LittleEndian.AppendUint32(block, uint32(len(h.value)))
		block = append(block, h.value...)
	}
	return block
}

func decodeAll(t *testing.T, block []byte) []header {
	t.Helper()
	require.NoError(t, checkHeaderBlock(block))
	got := []header{}
	for name, value := range headerPairs(block) {
		got = append(got, header{string(name), string(value)})
	}
	return got
}

func randomText(rng *rand.Rand, max int) string {
	b := make([]byte, rng.IntN(max+1))
	for i := range b {
		b[i] = byte(rng.UintN(256)) // any byte, NUL and 0xff included
	}
	return string(b)
}

func TestHeaderBlocksRoundTripFromAnIndependentEncoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1)) // fixed seed: the same blocks on every run
	for trial := 0; trial < 500; trial++ {
		headers := make([]header, rng.IntN(6))
		for i := range headers {
			headers[i] = header{randomText(rng, 12), randomText(rng, 40)}
		}
		block := encodeHeaders(headers)
		assert.Equal(t, headers, decodeAll(t, block), "%q", block)
		// Every cut inside a header leaves a truncated block; a cut at a boundary a shorter one.
		boundaries := map[int]bool{0: true}
		for i := range headers {
			boundaries[len(encodeHeaders(headers[:i+1]))] = true
		}
		for cut := 0; cut < len(block); cut++ {
			err := checkHeaderBlock(block[:cut])
			if boundaries[cut] {
				assert.NoError(t, err, "cut %d of %q", cut, block)
			} else {
				require.ErrorIs(t, err, errInvalidArgument, "cut %d of %q", cut, block)
			}
		}
	}
}

func TestHeaderBlockVectors(t *testing.T) {
	for _, c := range []struct {
		block string
		want  []header
	}{
		{"", []header{}},
		{"\x00\x00\x00\x00\x00\x00\x00\x00", []header{{"", ""}}},
		{"\x01\x00\x00\x00a\x02\x00\x00\x00bc\x01\x00\x00\x00a\x00\x00\x00\x00", []header{{"a", "bc"}, {"a", ""}}},
		// lengths are little-endian: 0x0100 = 256 bytes of value
		{"\x01\x00\x00\x00k\x00\x01\x00\x00" + strings.Repeat("v", 256), []header{{"k", strings.Repeat("v", 256)}}},
	} {
		assert.Equal(t, c.want, decodeAll(t, []byte(c.block)), "%q", c.block)
	}
	for _, bad := range []string{
		"\x00\x00\x00",                         // a length cut short
		"\x00\x00\x00\x00",                     // a name without its value length
		"\x00\x01\x00\x00k",                    // big-endian 1 read as 256: truncated
		"\x01\x00\x00\x00a\x01\x00\x00\x00",    // a value one byte short
		"\x00\x00\x00\x00\x00\x00\x00\x00\x01", // a whole header, then one stray byte
		"\xff\xff\xff\xff",                     // a name of 4 GiB
	} {
		err := checkHeaderBlock([]byte(bad))
		require.ErrorIs(t, err, errInvalidArgument, "%q", bad)
		assert.Contains(t, err.Error(), "headers: the block is truncated")
	}
}

func TestHeaderPairsStopsWhenTheConsumerStops(t *testing.T) {
	block := encodeHeaders([]header{{"a", "1"}, {"b", "2"}, {"c", "3"}})
	var seen []string
	for name := range headerPairs(block) {
		seen = append(seen, string(name))
		if len(seen) == 2 {
			break
		}
	}
	assert.Equal(t, []string{"a", "b"}, seen)
}

func TestKeySplitterCutsTheBlockAtTheLengths(t *testing.T) {
	for _, c := range []struct {
		block   string
		lengths []uint32
		want    []string
	}{
		{"abcd", []uint32{1, 0, 3}, []string{"a", "", "bcd"}},
		{"", []uint32{0, 0}, []string{"", ""}},
		{"key-0key-1", []uint32{5, 5}, []string{"key-0", "key-1"}},
		{"\x00\xff", []uint32{2}, []string{"\x00\xff"}},
	} {
		require.NoError(t, checkKeyBlock([]byte(c.block), c.lengths))
		next := keySplitter([]byte(c.block), c.lengths)
		got := make([]string, len(c.lengths))
		for i := range c.lengths {
			got[i] = string(next(i))
		}
		assert.Equal(t, c.want, got)
	}
}

func TestKeyBlockLengthsMustCoverTheBlockExactly(t *testing.T) {
	assert.NoError(t, checkKeyBlock(nil, nil))
	for _, c := range []struct {
		block   string
		lengths []uint32
	}{
		{"abcd", []uint32{1, 2}},         // one byte left over
		{"abcd", []uint32{4, 1}},         // one byte missing
		{"a", nil},                       // bytes and no keys
		{"", []uint32{1 << 31, 1 << 31}}, // 2^32: zero if added in 32 bits
		{"ab", []uint32{1 << 31, 1 << 31, 2}},
	} {
		err := checkKeyBlock([]byte(c.block), c.lengths)
		require.ErrorIs(t, err, errInvalidArgument, "%q %v", c.block, c.lengths)
		assert.Contains(t, err.Error(), "keys_len is ")
	}
}

// callBytesArg calls bytesArg with p (possibly nil) as its *C.char and n as its C.size_t; a test
// file cannot name cgo's types, so the values are made with reflection from bytesArg's own
// parameter types.
func callBytesArg(p unsafe.Pointer, n uint64, name string) ([]byte, error) {
	fn := reflect.ValueOf(bytesArg)
	ptr := reflect.Zero(fn.Type().In(0))
	if p != nil {
		ptr = reflect.NewAt(fn.Type().In(0).Elem(), p)
	}
	out := fn.Call([]reflect.Value{ptr, reflect.ValueOf(n).Convert(fn.Type().In(1)), reflect.ValueOf(name)})
	err, _ := out[1].Interface().(error)
	return out[0].Interface().([]byte), err
}

func TestBytesArgChecksPointerAndLength(t *testing.T) {
	buf := []byte("routing-key")
	got, err := callBytesArg(unsafe.Pointer(&buf[0]), uint64(len(buf)), "key")
	require.NoError(t, err)
	assert.Equal(t, "routing-key", string(got))
	assert.Equal(t, unsafe.Pointer(&buf[0]), unsafe.Pointer(&got[0]), "a view, not a copy")

	got, err = callBytesArg(unsafe.Pointer(&buf[0]), 3, "key")
	require.NoError(t, err)
	assert.Equal(t, "rou", string(got), "exactly n bytes")

	got, err = callBytesArg(nil, 0, "key") // NULL with length 0 is the empty argument
	assert.NoError(t, err)
	assert.Empty(t, got)

	_, err = callBytesArg(nil, 5, "headers")
	require.ErrorIs(t, err, errInvalidArgument)
	assert.Equal(t, "invalid argument: headers is NULL but headers_len is 5", err.Error())

	got, err = callBytesArg(unsafe.Pointer(&buf[0]), maxArgLen+1, "key")
	require.ErrorIs(t, err, errInvalidArgument)
	assert.Contains(t, err.Error(), "key_len is")
	assert.Contains(t, err.Error(), "more than the largest accepted length")
	assert.Nil(t, got)
	// The largest accepted length itself is accepted: a view over 2 GiB - 1 of memory reserved
	// (never touched) outside Go's heap.
	reserved, err := syscall.Mmap(-1, 0, maxArgLen, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	require.NoError(t, err)
	defer syscall.Munmap(reserved)
	got, err = callBytesArg(unsafe.Pointer(&reserved[0]), maxArgLen, "key")
	require.NoError(t, err)
	assert.Equal(t, maxArgLen, len(got))
	// 2^63 and more: a length that is negative as a signed size must not wrap to a small one
	_, err = callBytesArg(unsafe.Pointer(&buf[0]), 1<<63, "key")
	require.ErrorIs(t, err, errInvalidArgument)
}

func TestOutArgRefusesNull(t *testing.T) {
	fn := reflect.ValueOf(outArg)
	out := fn.Call([]reflect.Value{reflect.Zero(fn.Type().In(0)), reflect.ValueOf(2), reflect.ValueOf("io")})
	err, _ := out[1].Interface().(error)
	require.ErrorIs(t, err, errInvalidArgument)
	assert.Equal(t, "invalid argument: io must not be NULL", err.Error())
}

// callTakePrevious calls takePrevious on io (or NULL), typed as its *C.uint64_t parameter.
func callTakePrevious(io []uint64) uint64 {
	fn := reflect.ValueOf(takePrevious)
	ptr := reflect.Zero(fn.Type().In(0))
	if io != nil {
		ptr = reflect.NewAt(fn.Type().In(0).Elem(), unsafe.Pointer(&io[0]))
	}
	return fn.Call([]reflect.Value{ptr})[0].Uint()
}

func TestTakePreviousClearsTheLeaseSlots(t *testing.T) {
	// io[2] is the lease to release first; it and io[0] are cleared before anything can fail, so
	// a failed br_release_then_* call leaves no lease id for the caller to take as its own.
	io := []uint64{7, 8, 9}
	assert.Equal(t, uint64(9), callTakePrevious(io))
	assert.Equal(t, []uint64{0, 8, 0}, io)
	assert.Zero(t, callTakePrevious(io), "nothing to release the second time")
	assert.Zero(t, callTakePrevious(nil), "NULL io: nothing released")
}
