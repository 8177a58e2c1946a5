package loadpoll

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bounded-router/bounded-router/internal/strictjson"
)

// Options is the JSON form of a poller's settings, as bindings pass them:
// {"endpoints": {worker URL: load endpoint URL}, "format": "sglang", "sglang_loads" or "vllm",
// "interval_ms": 200, "timeout_ms": 0, "expiry_ms": 0, "lease_weights": "requests" or "tokens"}
// (0 and "": the defaults of Config).
type Options struct {
	Endpoints    map[string]string `json:"endpoints"`
	Format       Format            `json:"format"`
	IntervalMs   int64             `json:"interval_ms"`
	TimeoutMs    int64             `json:"timeout_ms"`
	ExpiryMs     int64             `json:"expiry_ms"`
	LeaseWeights string            `json:"lease_weights"`
}

// optionFields are the keys of Options, for strictjson.
var optionFields = strictjson.FieldsOf(Options{})

// ParseOptions reads Options, refusing unknown fields, and returns the targets (sorted by
// worker URL) and the config.
func ParseOptions(data []byte) ([]Target, Config, error) {
	var o Options
	if err := strictjson.Decode(data, &o, optionFields); err != nil {
		return nil, Config{}, fmt.Errorf("load poll options: %w", err)
	}
	if len(o.Endpoints) == 0 {
		return nil, Config{}, fmt.Errorf("load poll options: endpoints must name at least one worker")
	}
	if !slices.Contains(Formats, o.Format) {
		return nil, Config{}, fmt.Errorf("load poll options: %w", errUnknownFormat(o.Format))
	}
	if o.LeaseWeights != "" && o.LeaseWeights != "requests" && o.LeaseWeights != "tokens" {
		return nil, Config{}, fmt.Errorf("load poll options: lease_weights must be one of requests, tokens, got %q", o.LeaseWeights)
	}
	for name, ms := range map[string]int64{"interval_ms": o.IntervalMs, "timeout_ms": o.TimeoutMs, "expiry_ms": o.ExpiryMs} {
		if ms < 0 || ms > int64(time.Hour/time.Millisecond) {
			return nil, Config{}, fmt.Errorf("load poll options: %s must be from 0 to 3600000, got %d", name, ms)
		}
	}
	targets := make([]Target, 0, len(o.Endpoints))
	for worker, endpoint := range o.Endpoints {
		targets = append(targets, Target{Worker: worker, Endpoint: endpoint, Format: o.Format})
	}
	slices.SortFunc(targets, func(a, b Target) int { return strings.Compare(a.Worker, b.Worker) })
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return targets, Config{Interval: ms(o.IntervalMs), Timeout: ms(o.TimeoutMs), Expiry: ms(o.ExpiryMs), TokenWeights: o.LeaseWeights == "tokens"}, nil
}
