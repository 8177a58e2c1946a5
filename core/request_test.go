package core

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

func fromHeaders(pairs ...string) Request { return RequestFromHeaders(headers(pairs...)) }

func TestRequestFromNoHeaders(t *testing.T) {
	assert.Equal(t, Request{}, fromHeaders())
	assert.Equal(t, Request{}, fromHeaders("Content-Type", "application/json", "Accept", "*/*"))
}

func TestRequestHeaderNamesAreCaseInsensitive(t *testing.T) {
	for _, name := range []string{"X-SMG-Routing-Key", "x-smg-routing-key", "X-SMG-ROUTING-KEY", "x-SmG-rOuTiNg-KeY"} {
		req := fromHeaders(name, "k1")
		assert.Equal(t, []byte("k1"), req.RoutingKey, name)
	}
	for _, name := range []string{"X-SMG-Target-Worker", "x-smg-target-worker", "X-SMG-TARGET-WORKER"} {
		req := fromHeaders(name, "3")
		assert.True(t, req.HasTarget, name)
		assert.Equal(t, 3, req.TargetIndex, name)
	}
	for _, name := range []string{"authorization", "AUTHORIZATION", "x-forwarded-for", "X-FORWARDED-FOR", "cookie", "COOKIE", "CoOkIe"} {
		req := fromHeaders(name, "v")
		assert.Equal(t, []byte("v"), req.ImplicitKey, name)
	}
}

func TestRequestNameLookalikesDoNotMatch(t *testing.T) {
	// U+212A KELVIN SIGN folds to 'k' under Unicode rules; HTTP names are ASCII.
	for _, name := range []string{"Coo\u212Aie", "X-SMG-Routing-\u212Aey", "X-SMG-Routing-Key ", " Cookie", "X-SMG-Routing_Key", "X-SMG-Target-Workers", "Authorizatio", "\u0130-SMG-Target-Worker"} {
		assert.Equal(t, Request{}, fromHeaders(name, "7"), "%q", name)
	}
}

func TestRequestRepeatedHeadersFirstOccurrenceWins(t *testing.T) {
	req := fromHeaders("X-SMG-Routing-Key", "first", "x-smg-routing-key", "second", "X-SMG-ROUTING-KEY", "third")
	assert.Equal(t, []byte("first"), req.RoutingKey)

	req = fromHeaders("x-smg-target-worker", "1", "X-SMG-Target-Worker", "2")
	assert.Equal(t, 1, req.TargetIndex)

	req = fromHeaders("cookie", "c1", "Cookie", "c2")
	assert.Equal(t, []byte("c1"), req.ImplicitKey)

	// The first occurrence wins even when it is empty or invalid: the header counts as absent.
	req = fromHeaders("X-SMG-Routing-Key", "", "X-SMG-Routing-Key", "later")
	assert.Empty(t, req.RoutingKey)
	req = fromHeaders("x-smg-target-worker", "nope\x01", "X-SMG-Target-Worker", "0")
	assert.False(t, req.HasTarget)
}

func TestRequestInvalidValuesCountAsAbsent(t *testing.T) {
	for _, bad := range []string{"", "k\x00", "\x1f", "k\x7f", "k\r\n", "caf\xc3\xa9", "\xff", "line\nbreak"} {
		req := fromHeaders("X-SMG-Routing-Key", bad, "X-SMG-Target-Worker", bad)
		assert.Empty(t, req.RoutingKey, "%q", bad)
		assert.False(t, req.HasTarget, "%q", bad)
		assert.Equal(t, 0, req.TargetIndex, "%q", bad)
	}
	// An absent explicit key falls through to the implicit key.
	req := fromHeaders("X-SMG-Routing-Key", "", "Authorization", "Bearer t")
	assert.Empty(t, req.RoutingKey)
	assert.Equal(t, []byte("Bearer t"), req.ImplicitKey)
}

func TestRequestValidValues(t *testing.T) {
	for _, good := range []string{"k", "a\tb", "\t", " ", " key ", "~!@#$%^&*()", "x y z"} {
		req := fromHeaders("X-SMG-Routing-Key", good)
		assert.Equal(t, []byte(good), req.RoutingKey, "%q", good)
	}
	assert.True(t, ValidHeaderValue([]byte("\t")))
	assert.True(t, ValidHeaderValue([]byte(" ~")))
	assert.False(t, ValidHeaderValue(nil))
	assert.False(t, ValidHeaderValue([]byte{}))
	assert.False(t, ValidHeaderValue([]byte{0x19}))
	assert.False(t, ValidHeaderValue([]byte{0x7f}))
	assert.False(t, ValidHeaderValue([]byte{0x80}))
	assert.False(t, ValidHeaderValue([]byte("ok\v")))
}

func TestRequestValuesAreNotTrimmed(t *testing.T) {
	padded := fromHeaders("X-SMG-Routing-Key", " key ")
	plain := fromHeaders("X-SMG-Routing-Key", "key")
	assert.Equal(t, []byte(" key "), padded.RoutingKey)
	assert.NotEqual(t, padded.RoutingKey, plain.RoutingKey)
	assert.NotEqual(t, HashRingXXH64.Position(padded.RoutingKey), HashRingXXH64.Position(plain.RoutingKey))

	// A padded target is not an index (but the header is present): target_worker_miss.
	req := fromHeaders("X-SMG-Target-Worker", " 1")
	assert.True(t, req.HasTarget)
	assert.Equal(t, -1, req.TargetIndex)
}

func TestRequestTargetInvalidIndexIsPresentButMiss(t *testing.T) {
	req := fromHeaders("X-SMG-Target-Worker", "abc")
	assert.True(t, req.HasTarget)
	assert.Equal(t, -1, req.TargetIndex)
}

func TestRequestImplicitKeyPrecedence(t *testing.T) {
	cases := []struct {
		name  string
		pairs []string
		want  string // "" = absent
	}{
		{"authorization only", []string{"Authorization", "a"}, "a"},
		{"forwarded only", []string{"X-Forwarded-For", "10.0.0.1"}, "10.0.0.1"},
		{"cookie only", []string{"Cookie", "sid=1"}, "sid=1"},
		{"authorization beats the others", []string{"Cookie", "c", "X-Forwarded-For", "f", "Authorization", "a"}, "a"},
		{"forwarded beats cookie", []string{"Cookie", "c", "X-Forwarded-For", "f"}, "f"},
		{"empty authorization does not fall through", []string{"Authorization", "", "X-Forwarded-For", "f", "Cookie", "c"}, ""},
		{"invalid authorization does not fall through", []string{"Authorization", "\x01", "Cookie", "c"}, ""},
		{"empty forwarded does not fall through", []string{"Cookie", "c", "X-Forwarded-For", ""}, ""},
		{"non-ASCII cookie", []string{"Cookie", "\xe2\x82\xac"}, ""},
		{"repeated authorization: first wins even if empty", []string{"authorization", "", "Authorization", "a"}, ""},
		{"value used whole", []string{"Authorization", "Bearer abc def"}, "Bearer abc def"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := fromHeaders(tc.pairs...)
			if tc.want == "" {
				assert.Empty(t, req.ImplicitKey)
			} else {
				assert.Equal(t, []byte(tc.want), req.ImplicitKey)
			}
			assert.Empty(t, req.RoutingKey)
			assert.False(t, req.HasTarget)
		})
	}
}

func TestRequestAllInputsTogether(t *testing.T) {
	req := fromHeaders("Cookie", "c", "X-SMG-Routing-Key", "rk", "X-SMG-Target-Worker", "+2", "Host", "x")
	assert.Equal(t, Request{HasTarget: true, TargetIndex: 2, RoutingKey: []byte("rk"), ImplicitKey: []byte("c")}, req)
}

func TestRequestConsumesEveryPairOnce(t *testing.T) {
	n := 0
	seq := func(yield func([]byte, []byte) bool) {
		for _, p := range [][2]string{{"A", "1"}, {"Cookie", "c"}, {"B", "2"}} {
			n++
			if !yield([]byte(p[0]), []byte(p[1])) {
				return
			}
		}
	}
	req := RequestFromHeaders(seq)
	assert.Equal(t, 3, n)
	assert.Equal(t, []byte("c"), req.ImplicitKey)
}

func TestKeyRequest(t *testing.T) {
	assert.Equal(t, Request{RoutingKey: []byte("k")}, KeyRequest([]byte("k")))
	assert.Equal(t, Request{}, KeyRequest(nil))
}

func TestParseTargetIndex(t *testing.T) {
	ok := map[string]int{
		"0": 0, "7": 7, "+1": 1, "+0": 0, "00": 0, "0007": 7, "42": 42,
	}
	if strconv.IntSize == 64 {
		ok["9223372036854775807"] = 9223372036854775807 // the largest int
	}
	for in, want := range ok {
		assert.Equal(t, want, ParseTargetIndex([]byte(in)), "%q", in)
	}
	bad := []string{
		"", "+", "++1", " 1", "1 ", "\t1", "-1", "-0", "1a", "a1", "0x1", "1.0", "1e2", "1_000",
		"\u0661",               // ARABIC-INDIC DIGIT ONE
		"\uff11",               // FULLWIDTH DIGIT ONE
		"99999999999999999999", // overflow
		"9223372036854775808",  // max int + 1
		"18446744073709551616",
	}
	for _, in := range bad {
		assert.Equal(t, -1, ParseTargetIndex([]byte(in)), "%q", in)
	}
	assert.Equal(t, -1, ParseTargetIndex(nil))
}
