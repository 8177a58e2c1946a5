package core

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoutingKeyHeadersDefaultIsTodaysHeader(t *testing.T) {
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, workerURLs(2))
	assert.Equal(t, []string{HeaderRoutingKey}, r.RoutingKeyHeaders())
	h := headers("x-smg-routing-key", "k", "Authorization", "a")
	assert.Equal(t, RequestFromHeaders(h), r.RequestFromHeaders(h))
}

func TestRoutingKeyHeadersFirstConfiguredValidValueWins(t *testing.T) {
	names := []string{"X-Session-Id", "X-SMG-Routing-Key"}
	cases := []struct {
		pairs []string
		want  string
	}{
		{[]string{"x-smg-routing-key", "b", "x-session-id", "a"}, "a"}, // configured order, not header order
		{[]string{"X-Session-Id", "", "x-smg-routing-key", "b"}, "b"},  // an empty value falls through
		{[]string{"X-Session-Id", "a\x01", "x-smg-routing-key", "b"}, "b"},
		{[]string{"X-Session-Id", "a", "X-Session-Id", "second"}, "a"},   // first occurrence of a name
		{[]string{"X-Session-Id", "\x7f", "X-Session-Id", "second"}, ""}, // ...even when invalid
		{[]string{"X-Other", "z"}, ""},
	}
	for _, c := range cases {
		req := requestFromHeaders(names, headers(c.pairs...))
		assert.Equal(t, c.want, string(req.RoutingKey), "%q", c.pairs)
	}
	// Without X-SMG-Routing-Key among the names, that header is an ordinary header.
	req := requestFromHeaders([]string{"x-session-id"}, headers("X-SMG-Routing-Key", "k", "Cookie", "c"))
	assert.Empty(t, req.RoutingKey)
	assert.Equal(t, "c", string(req.ImplicitKey))
}

func TestRoutingKeyHeadersKeepTheOtherInputs(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"} // the most allowed
	req := requestFromHeaders(names, headers("h", "key", "X-SMG-Target-Worker", "1", "Cookie", "c", "X-Forwarded-For", "f"))
	assert.Equal(t, Request{HasTarget: true, TargetIndex: 1, RoutingKey: []byte("key"), ImplicitKey: []byte("f")}, req)
	// A key passed directly still overrides the headers.
	req = requestFrom(names, []byte("direct"), headers("a", "key"))
	assert.Equal(t, "direct", string(req.RoutingKey))
}

func TestRoutingKeyHeadersAreValidated(t *testing.T) {
	many := strings.Split(strings.Repeat("x,", MaxRoutingKeyHeaders+1), ",")[:MaxRoutingKeyHeaders+1]
	for i := range many {
		many[i] += strings.Repeat("y", i)
	}
	cases := map[string][]string{
		"from 1 to 8":            {},
		"got 9":                  many,
		"is not a header name":   {"X-Key", ""},
		"[0] \"x key\"":          {"x key"},
		"\"x:key\" is not":       {"x:key"},
		"already carries":        {"x-smg-target-worker"},
		"(Cookie)":               {"COOKIE"},
		"repeats \"X-Key\"":      {"X-Key", "x-key"},
		"\"k\\xe9\" is not a he": {"k\xe9"},
	}
	for want, names := range cases {
		err := CheckRoutingKeyHeaders(names)
		require.ErrorIs(t, err, ErrInvalidConfig, want)
		assert.Contains(t, err.Error(), want)
		assert.Contains(t, err.Error(), "routing_key_headers")
	}
	assert.NoError(t, CheckRoutingKeyHeaders([]string{"X-Session-Id", "x-smg-routing-key", "a!#$%&'*+-.^_`|~9"}))
}

func TestRoutingKeyHeadersFromConfigJSON(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"worker_urls": ["http://w0"], "routing_key_headers": ["X-Session-Id"]}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"X-Session-Id"}, cfg.RoutingKeyHeaders)
	r, err := NewRouter(cfg)
	require.NoError(t, err)
	assert.Equal(t, "s", string(r.RequestFrom(nil, headers("x-session-id", "s")).RoutingKey))
	assert.Empty(t, r.RequestFrom(nil, headers("X-SMG-Routing-Key", "k")).RoutingKey)

	out, err := cfg.MarshalJSON()
	require.NoError(t, err)
	again, err := ParseConfig(out)
	require.NoError(t, err)
	assert.Equal(t, cfg, again)

	for _, bad := range []string{`[]`, `null`, `"X-Key"`, `[1]`, `["a b"]`} {
		_, err := ParseConfig([]byte(`{"worker_urls": [], "routing_key_headers": ` + bad + `}`))
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
		assert.Contains(t, err.Error(), "routing_key_headers", bad)
	}
}

// firstValues is a RequestFromValues lookup over name/value pairs, as an HTTP server's parsed
// headers answer it: the first value of a name, names compared without regard to ASCII case.
func firstValues(names []string, pairs ...string) func(int) (string, bool) {
	return func(slot int) (string, bool) {
		for i := 0; i < len(pairs); i += 2 {
			if strings.EqualFold(pairs[i], names[slot]) {
				return pairs[i+1], true
			}
		}
		return "", false
	}
}

func TestRequestFromValuesReadsAsRequestFromHeaders(t *testing.T) {
	keyHeaders := []string{"X-Session-Id", "X-SMG-Routing-Key"}
	r, err := NewRouter(Config{WorkerURLs: workerURLs(2), Policy: Policy{Kind: PolicyConsistentHashing}, VirtualNodes: DefaultVirtualNodes, RoutingKeyHeaders: keyHeaders})
	require.NoError(t, err)
	names := r.RoutingHeaderNames()
	assert.Equal(t, []string{HeaderTargetWorker, "X-Session-Id", "X-SMG-Routing-Key", HeaderAuthorization, HeaderForwardedFor, HeaderCookie}, names)
	for _, pairs := range [][]string{
		{"x-smg-routing-key", "b", "x-session-id", "a"},
		{"X-Session-Id", "", "x-smg-routing-key", "b"},
		{"X-Session-Id", "a\x01", "x-smg-routing-key", "b", "cookie", "c"},
		{"X-Session-Id", "\x7f", "X-Session-Id", "second"},
		{"X-SMG-Target-Worker", "+12", "Authorization", "", "Cookie", "c"},
		{"X-SMG-Target-Worker", "x", "X-Forwarded-For", "f", "Cookie", "c"},
		{"X-Other", "z"},
	} {
		assert.Equal(t, r.RequestFromHeaders(headers(pairs...)), r.RequestFromValues(firstValues(names, pairs...)), "%q", pairs)
	}
}

func TestRequestFromValuesCopiesOnlyTheKeysItKeeps(t *testing.T) {
	r := newTestRouter(t, Policy{Kind: PolicyConsistentHashing}, workerURLs(2))
	lookup := firstValues(r.RoutingHeaderNames(), "X-SMG-Routing-Key", "key", "Cookie", "c", "X-SMG-Target-Worker", "z")
	// Two copies: the routing key and the implicit key; the invalid target is parsed in place.
	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() { r.RequestFromValues(lookup) }))
}
