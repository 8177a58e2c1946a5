package core

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzParseConfig feeds any bytes to the configuration parser (the JSON that crosses the C
// API). It must never panic; whatever it accepts must obey every rule, survive a round trip
// through MarshalJSON unchanged, and build a router; whatever it rejects must be a typed error
// with a message.
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		`{"worker_urls": ["http://w0:8000", "http://w1:8000"]}`,
		`{"worker_urls": [], "policy": {"type": "bounded_consistent_hashing", "max_load_skew": 1.5, "min_load_gap": 2}, "virtual_nodes": 150}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "random"}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "round_robin"}, "virtual_nodes": 1}`,
		`{"worker_urls": ["http://a", "http://b"], "policy": {"type": "consistent_hashing"}}`,
		`{"worker_urls": ["http://a", "http://b"], "policy": {"type": "consistent_hashing", "hash_ring": "smg"}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "hash_ring": "xxh64"}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "round_robin", "hash_ring": "smg"}}`,
		`{"worker_urls": ["http://a", "http://a"]}`,
		`{"worker_urls": [""]}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "max_load_skew": 1e999}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "max_load_skew": "NaN"}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "min_load_gap": 2.0}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "min_load_gap": true}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "min_load_gap": 9223372036854775808}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "random", "max_load_skew": 2}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "random", "seed": 18446744073709551615}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "random", "seed": -1}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "consistent_hashing", "seed": 7}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "spill_target": "least_loaded", "key_memory": 4096}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "spill_target": "nearest", "key_memory": -1}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "bounded_consistent_hashing", "key_memory": 4194305}}`,
		`{"worker_urls": ["http://a"], "policy": {"type": "round_robin", "spill_target": "clockwise"}}`,
		`{"worker_urls": ["http://a"], "virtual_nodes": 65537}`,
		`{"worker_urls": ["http://a"], "virtual_nodes": null}`,
		`{"worker_urls": ["http://a"], "extra": 1}`,
		`{"worker_urls": ["\u00e9\ud800"]}`,
		"{\"worker_urls\": [\"\xff\"]}",
		`{"worker_urls": ["http://a"]}}`,
		`["a", "b"]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if urls, err := ParseWorkerURLs(data); err == nil {
			for _, u := range urls {
				if !utf8.ValidString(u) {
					t.Fatalf("ParseWorkerURLs accepted a URL that is not UTF-8: %q", u)
				}
			}
		} else if !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("ParseWorkerURLs error is not ErrInvalidConfig: %v", err)
		}

		cfg, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) && !errors.Is(err, ErrDuplicateWorker) {
				t.Fatalf("untyped error: %v", err)
			}
			if len(err.Error()) < len("invalid configuration: x") {
				t.Fatalf("error without a message: %q", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
		p := cfg.Policy
		if p.Kind == PolicyBoundedConsistentHashing {
			if math.IsNaN(p.MaxLoadSkew) || math.IsInf(p.MaxLoadSkew, 0) || p.MaxLoadSkew < 1 || p.MinLoadGap < 0 ||
				p.SpillTarget > SpillLeastLoaded || p.KeyMemory < 0 || p.KeyMemory > MaxKeyMemory {
				t.Fatalf("accepted bad settings %+v", p)
			}
		} else if p.MaxLoadSkew != 0 || p.MinLoadGap != 0 || p.SpillTarget != SpillClockwise || p.KeyMemory != 0 {
			t.Fatalf("settings on policy %v: %+v", p.Kind, p)
		}
		if (p.HasSeed || p.Seed != 0) && p.Kind != PolicyRandom {
			t.Fatalf("a seed on policy %v: %+v", p.Kind, p)
		}
		if cfg.VirtualNodes < 1 || cfg.VirtualNodes > MaxVirtualNodes {
			t.Fatalf("accepted virtual_nodes %d", cfg.VirtualNodes)
		}
		seen := map[string]bool{}
		for _, u := range cfg.WorkerURLs {
			if u == "" || seen[u] || !utf8.ValidString(u) {
				t.Fatalf("accepted worker URL %q in %q", u, cfg.WorkerURLs)
			}
			seen[u] = true
		}

		text, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		again, err := ParseConfig(text)
		if err != nil {
			t.Fatalf("round trip of %s: %v", text, err)
		}
		if len(cfg.WorkerURLs) == 0 {
			cfg.WorkerURLs = nil
		}
		if len(again.WorkerURLs) == 0 {
			again.WorkerURLs = nil
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("round trip changed the config: %+v -> %s -> %+v", cfg, text, again)
		}
		if len(cfg.WorkerURLs)*cfg.VirtualNodes <= 1<<16 && cfg.Policy.KeyMemory <= 1<<16 {
			r, err := NewRouter(cfg)
			if err != nil {
				t.Fatalf("NewRouter of an accepted config: %v", err)
			}
			if got := len(r.Workers()); got != len(cfg.WorkerURLs) {
				t.Fatalf("%d workers, want %d", got, len(cfg.WorkerURLs))
			}
		}
	})
}
