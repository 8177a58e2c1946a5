package kvevents

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOptionsRefusesBadInputByName(t *testing.T) {
	for options, want := range map[string]string{
		`{}`: `kv_events options: endpoints must name at least one worker`,
		`{"endpoints": {"w": "tcp://h:1"}, "x": 1}`: `kv_events options: json: unknown field "x"`,
		`{"endpoints": {"w": "ipc:///tmp/e"}}`:      `kv_events options: the endpoint of "w" must be tcp://host:port, got "ipc:///tmp/e"`,
		// Regression (found by an audit): only the tcp:// prefix was checked, and replay
		// endpoints not at all, so these failed later as dial errors in the log.
		`{"endpoints": {"w": "tcp://127.0.0.1"}}`:                                   `kv_events options: the endpoint of "w" must be tcp://host:port, got "tcp://127.0.0.1"`,
		`{"endpoints": {"w": "tcp://h:70000"}}`:                                     `kv_events options: the endpoint of "w" must be tcp://host:port, got "tcp://h:70000"`,
		`{"endpoints": {"w": "tcp://h:1"}, "replay_endpoints": {"w": "tcp://h"}}`:   `kv_events options: the replay endpoint of "w" must be tcp://host:port, got "tcp://h"`,
		`{"endpoints": {"w": "tcp://h:1"}, "replay_endpoints": {"v": "tcp://h:2"}}`: `kv_events options: replay_endpoints names "v", which has no endpoint`,
		`{"endpoints": {"w": "tcp://h:1"}, "stale_after_ms": -1}`:                   `kv_events options: stale_after_ms must not be negative, got -1`,
		`{"ENDPOINTS": {"w": "tcp://h:1"}}`:                                         `kv_events options: unknown field "ENDPOINTS" (field names are case-sensitive: "endpoints")`,
	} {
		_, _, err := ParseOptions([]byte(options))
		assert.EqualError(t, err, want, options)
	}
	subs, stale, err := ParseOptions([]byte(`{"endpoints": {"b": "tcp://h:1", "a": "tcp://[::1]:2"}, "replay_endpoints": {"a": "tcp://h:3"}}`))
	require.NoError(t, err)
	require.Len(t, subs, 2)
	assert.Equal(t, []string{"a", "b"}, []string{subs[0].Worker, subs[1].Worker})
	assert.Equal(t, "tcp://h:3", subs[0].ReplayEndpoint)
	assert.Equal(t, DefaultStaleAfter, stale)
}
