package peerroutes

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions([]byte(`{"publish": "tcp://127.0.0.1:0", "peers": ["tcp://127.0.0.1:5601", "tcp://10.0.0.2:5601"], "topic": "routes"}`))
	require.NoError(t, err)
	assert.Equal(t, Options{Publish: "tcp://127.0.0.1:0", Peers: []string{"tcp://127.0.0.1:5601", "tcp://10.0.0.2:5601"}, Topic: "routes"}, o)
	o, err = ParseOptions([]byte(`{"peers": ["tcp://[::1]:5601"]}`))
	require.NoError(t, err)
	assert.Equal(t, "", o.Publish)

	tooMany := `{"peers": ["tcp://127.0.0.1:1"` + strings.Repeat(`, "tcp://127.0.0.1:1"`, MaxPeers) + `]}`
	for text, want := range map[string]string{
		`{}`:                                    "peer routes options: give publish, peers or both",
		`{"publish": "", "peers": []}`:          "peer routes options: give publish, peers or both",
		`{"publish": "ipc:///tmp/x"}`:           `peer routes options: publish must be tcp://host:port, got "ipc:///tmp/x"`,
		`{"publish": "tcp://127.0.0.1"}`:        `peer routes options: publish must be tcp://host:port, got "tcp://127.0.0.1"`,
		`{"publish": "tcp://:5601"}`:            `peer routes options: publish must be tcp://host:port, got "tcp://:5601"`,
		`{"peers": ["tcp://127.0.0.1:0"]}`:      `peer routes options: peers must be tcp://host:port, got "tcp://127.0.0.1:0"`,
		`{"peers": ["tcp://h:65536"]}`:          `peer routes options: peers must be tcp://host:port, got "tcp://h:65536"`,
		`{"peers": ["tcp://h:1", "tcp://h:1"]}`: `peer routes options: peers names "tcp://h:1" twice`,
		`{"peer": ["tcp://h:1"]}`:               `peer routes options: json: unknown field "peer"`,
		tooMany:                                 "peer routes options: peers may name at most 256 endpoints, got 257",
		// Regression (found by an audit): read more loosely than the contract's "Validation".
		`{"publish": "tcp://127.0.0.1:0", "peers": null}`: "peer routes options: peers must be a list, not null",
		`{"Peers": ["tcp://h:1"]}`:                        `peer routes options: unknown field "Peers" (field names are case-sensitive: "peers")`,
		`{"peers": ["tcp://h:1"], "topic": "\ud800"}`:     `peer routes options: \uD800 is a lone UTF-16 surrogate, not a character`,
	} {
		_, err := ParseOptions([]byte(text))
		assert.EqualError(t, err, want, text)
	}
}
