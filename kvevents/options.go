package kvevents

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bounded-router/bounded-router/internal/zmqguard"

	"github.com/bounded-router/bounded-router/internal/strictjson"
)

// Options is the JSON form of a router's KV event subscriptions, as bindings pass them:
// {"endpoints": {worker URL: "tcp://host:5557"}, "replay_endpoints": {worker URL:
// "tcp://host:5558"}, "topic": "", "stale_after_ms": 10000}.
type Options struct {
	Endpoints       map[string]string `json:"endpoints"`
	ReplayEndpoints map[string]string `json:"replay_endpoints"`
	Topic           string            `json:"topic"`
	StaleAfterMs    int64             `json:"stale_after_ms"`
}

// DefaultStaleAfter: a worker whose last batch is older than this is reported stale. An engine
// under load publishes a batch per scheduler step; an idle one publishes nothing, so stale
// says only that routing rests on this router's own routes for that worker.
const DefaultStaleAfter = 10 * time.Second

// optionFields are the keys of Options, for strictjson.
var optionFields = strictjson.FieldsOf(Options{})

// ParseOptions reads Options, refusing unknown fields, and returns one subscriber per worker
// (sorted by URL, their Index to be set) and the stale age.
func ParseOptions(data []byte) ([]*Subscriber, time.Duration, error) {
	var o Options
	if err := strictjson.Decode(data, &o, optionFields); err != nil {
		return nil, 0, fmt.Errorf("kv_events options: %w", err)
	}
	if len(o.Endpoints) == 0 {
		return nil, 0, fmt.Errorf("kv_events options: endpoints must name at least one worker")
	}
	for worker := range o.ReplayEndpoints {
		if _, ok := o.Endpoints[worker]; !ok {
			return nil, 0, fmt.Errorf("kv_events options: replay_endpoints names %q, which has no endpoint", worker)
		}
	}
	for worker, endpoint := range o.Endpoints {
		if err := zmqguard.CheckEndpoint(endpoint, false); err != nil {
			return nil, 0, fmt.Errorf("kv_events options: the endpoint of %q %v", worker, err)
		}
		if replay, ok := o.ReplayEndpoints[worker]; ok {
			if err := zmqguard.CheckEndpoint(replay, false); err != nil {
				return nil, 0, fmt.Errorf("kv_events options: the replay endpoint of %q %v", worker, err)
			}
		}
	}
	if o.StaleAfterMs < 0 {
		return nil, 0, fmt.Errorf("kv_events options: stale_after_ms must not be negative, got %d", o.StaleAfterMs)
	}
	stale := time.Duration(o.StaleAfterMs) * time.Millisecond
	if stale == 0 {
		stale = DefaultStaleAfter
	}
	var subs []*Subscriber
	for worker, endpoint := range o.Endpoints {
		subs = append(subs, &Subscriber{Worker: worker, Endpoint: endpoint, ReplayEndpoint: o.ReplayEndpoints[worker], Topic: o.Topic})
	}
	slices.SortFunc(subs, func(a, b *Subscriber) int { return strings.Compare(a.Worker, b.Worker) })
	return subs, stale, nil
}
