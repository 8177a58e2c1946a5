package peerroutes

import (
	"fmt"

	"github.com/bounded-router/bounded-router/internal/zmqguard"

	"github.com/bounded-router/bounded-router/internal/strictjson"
)

// Options is the JSON form of a route sharing feed, as bindings pass it: {"publish":
// "tcp://host:port" (bound; "" for none), "peers": ["tcp://host:port", ...] (connected), "topic":
// ""}. At least one of publish and peers is given.
type Options struct {
	Publish string   `json:"publish"`
	Peers   []string `json:"peers"`
	Topic   string   `json:"topic"`
}

// MaxPeers bounds the peers one feed follows (each has its own connection and counters).
const MaxPeers = 256

// optionFields are the keys of Options, for strictjson.
var optionFields = strictjson.FieldsOf(Options{})

// ParseOptions reads Options, refusing unknown fields, and checks every endpoint.
func ParseOptions(data []byte) (Options, error) {
	var o Options
	if err := strictjson.Decode(data, &o, optionFields); err != nil {
		return Options{}, fmt.Errorf("peer routes options: %w", err)
	}
	if o.Publish == "" && len(o.Peers) == 0 {
		return Options{}, fmt.Errorf("peer routes options: give publish, peers or both")
	}
	if len(o.Peers) > MaxPeers {
		return Options{}, fmt.Errorf("peer routes options: peers may name at most %d endpoints, got %d", MaxPeers, len(o.Peers))
	}
	if o.Publish != "" {
		if err := zmqguard.CheckEndpoint(o.Publish, true); err != nil {
			return Options{}, fmt.Errorf("peer routes options: publish %w", err)
		}
	}
	seen := map[string]bool{}
	for _, p := range o.Peers {
		if err := zmqguard.CheckEndpoint(p, false); err != nil {
			return Options{}, fmt.Errorf("peer routes options: peers %w", err)
		}
		if seen[p] {
			return Options{}, fmt.Errorf("peer routes options: peers names %q twice", p)
		}
		seen[p] = true
	}
	return o, nil
}
