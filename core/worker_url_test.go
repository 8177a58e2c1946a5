package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// contract: "Workers and membership": the normal form of a worker URL, written by hand.
func TestNormalizeWorkerURL(t *testing.T) {
	for raw, want := range map[string]string{
		"http://w0:8000":             "http://w0:8000", // already normal: unchanged, so the ring does not move
		"https://10.0.0.1:8443":      "https://10.0.0.1:8443",
		"http://[::1]:8000":          "http://[::1]:8000",
		"http://w0:8000/":            "http://w0:8000",
		"http://w0:8000///":          "http://w0:8000",
		"HTTP://W0:8000":             "http://w0:8000",
		"http://w0:80":               "http://w0",
		"http://w0:80/":              "http://w0",
		"https://w0:443":             "https://w0",
		"https://w0:80":              "https://w0:80", // default only for http
		"http://w0:443":              "http://w0:443",
		"http://[::1]:80":            "http://[::1]",
		"http://w0:":                 "http://w0",
		"http://w0:8000/engine0":     "http://w0:8000/engine0", // a path is a prefix the proxies keep
		"http://w0:8000/engine0/":    "http://w0:8000/engine0",
		"http://w0:8000/Engine%2F0/": "http://w0:8000/Engine%2F0",
		"http://w0:8000/a b":         "http://w0:8000/a%20b",
	} {
		got, err := NormalizeWorkerURL(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
		again, err := NormalizeWorkerURL(got)
		require.NoError(t, err, got)
		assert.Equal(t, got, again, "the normal form is a fixed point")
	}
}

// contract: "Workers and membership": each refusal names the URL and its rule.
func TestNormalizeWorkerURLRefuses(t *testing.T) {
	for raw, rule := range map[string]string{
		"":                           "must not be empty",
		"http://a\xff":               "not valid UTF-8",
		"127.0.0.1:18101":            "has no scheme: write it as http://127.0.0.1:18101",
		"w0":                         "has no scheme",
		"http://a:1,http://b:2":      "contains a comma",
		"http://a:1, http://b:2":     "contains a comma",
		"ftp://w0:21":                `the scheme must be http or https, not "ftp"`,
		"grpc://w0:50051":            "the scheme must be http or https",
		"http://":                    "has no host",
		"http:///v1":                 "has no host",
		"http://:8000":               "has no host",
		"http://user@w0:8000":        "must not contain user info",
		"http://user:secret@w0:8000": "must not contain user info",
		"http://w0:8000?x=1":         "must not have a query",
		"http://w0:8000?":            "must not have a query",
		"http://w0:8000#frag":        "must not have a fragment",
		"http://w0:8000#":            "must not have a fragment",
		"http://w0:0":                "the port must be from 1 to 65535, not 0",
		"http://w0:65536":            "the port must be from 1 to 65535, not 65536",
		"http://w0:x":                "is not a URL",
		"http://w 0:8000":            "is not a URL",
		"http://w0:8000/\x7f":        "is not a URL",
	} {
		_, err := NormalizeWorkerURL(raw)
		require.ErrorIs(t, err, ErrInvalidConfig, "%q", raw)
		assert.Contains(t, err.Error(), rule, "%q", raw)
		if raw != "" {
			assert.Contains(t, err.Error(), fmt.Sprintf("%q", raw), "the error names the URL")
		}
	}
}

// Every entry point compares members in their normal form: a worker cannot be listed twice
// under two spellings, and a member is found under any spelling of its URL.
func TestMembershipUsesTheNormalForm(t *testing.T) {
	_, err := NewRouter(DefaultConfig("http://w0:8000", "http://W0:8000/"))
	require.ErrorIs(t, err, ErrDuplicateWorker)
	assert.Contains(t, err.Error(), `"http://w0:8000" and "http://W0:8000/" are the same worker`)

	r, err := NewRouter(DefaultConfig("http://w0:80/", "http://w1:8000"))
	require.NoError(t, err)
	assert.Equal(t, []string{"http://w0", "http://w1:8000"}, memberURLs(r))

	err = r.AddWorker("http://w1:8000/")
	require.ErrorIs(t, err, ErrDuplicateWorker)
	assert.Contains(t, err.Error(), `"http://w1:8000/" is already a member, as "http://w1:8000"`)
	require.ErrorIs(t, r.AddWorker("w2:8000"), ErrInvalidConfig)
	require.ErrorIs(t, r.SetWorkers([]string{"http://w0", "http://w0:80"}), ErrDuplicateWorker)
	require.ErrorIs(t, r.SetWorkers([]string{"http://w0?x"}), ErrInvalidConfig)

	require.NoError(t, r.SetHealthy("HTTP://w0:80/", false))
	assert.False(t, r.Workers()[0].Healthy)
	lease, state, err := r.Acquire("http://w1:8000/", nil)
	require.NoError(t, err)
	assert.Equal(t, "http://w1:8000", state.URL)
	r.Release(lease, false)
	require.ErrorIs(t, r.SetHealthy("w0", true), ErrUnknownWorker, "an unparsable URL is no member")
	require.NoError(t, r.RemoveWorker("http://w1:8000/"))
	require.NoError(t, r.SetWorkers([]string{"http://w0:80", "http://w9:8000/"}))
	assert.Equal(t, []string{"http://w0", "http://w9:8000"}, memberURLs(r))
	assert.False(t, r.Workers()[0].Healthy, "w0 stayed a member under another spelling, with its health")
}

// The ring hashes the normal form: a router given URLs in another spelling routes every key
// where one given the normal form does.
func TestRingHashesTheNormalForm(t *testing.T) {
	normal, err := NewRouter(DefaultConfig("http://w0:8000", "http://w1:8000", "http://w2"))
	require.NoError(t, err)
	other, err := NewRouter(DefaultConfig("HTTP://W0:8000/", "http://w1:8000/", "http://w2:80"))
	require.NoError(t, err)
	for i := range 500 {
		key := fmt.Sprintf("key-%d", i)
		assert.Equal(t, selectKey(normal, key).WorkerURL, selectKey(other, key).WorkerURL, key)
	}
}

func memberURLs(r *Router) []string {
	var urls []string
	for _, w := range r.Workers() {
		urls = append(urls, w.URL)
	}
	return urls
}
