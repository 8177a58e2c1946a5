package core

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
)

// decodeHeaderPairs turns fuzz input into header pairs: repeatedly a length byte, the name, a
// length byte, the value (a short or missing tail is cut short). Any bytes can appear in names
// and values.
func decodeHeaderPairs(data []byte) (names, values [][]byte) {
	next := func() ([]byte, bool) {
		if len(data) == 0 {
			return nil, false
		}
		n := int(data[0])
		data = data[1:]
		n = min(n, len(data))
		field := data[:n]
		data = data[n:]
		return field, true
	}
	for {
		name, ok := next()
		if !ok {
			return
		}
		value, _ := next()
		names, values = append(names, name), append(values, value)
	}
}

func encodeHeaderPairs(pairs ...string) []byte {
	var out []byte
	for _, p := range pairs {
		out = append(out, byte(len(p)))
		out = append(out, p...)
	}
	return out
}

// refLowerASCII lowers A-Z only: HTTP header names compare by ASCII case.
func refLowerASCII(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

func refValid(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		if !(c == '\t' || (c >= 0x20 && c <= 0x7e)) {
			return false
		}
	}
	return true
}

func refTargetIndex(v []byte) int {
	s := string(v)
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
	}
	if s == "" {
		return -1
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return -1
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return int(n)
}

var fuzzRouterOnce = sync.OnceValue(func() *Router {
	r, err := NewRouter(Config{WorkerURLs: workerURLs(3), Policy: boundedPolicy(1.5, 2), VirtualNodes: 20})
	if err != nil {
		panic(err)
	}
	return r
})

// FuzzRequestFromHeaders checks header parsing and key extraction (contract: "Inputs and precedence") against a direct
// reading of the rules, and that a request built from any headers routes to a branch that
// matches its inputs.
func FuzzRequestFromHeaders(f *testing.F) {
	for _, pairs := range [][]string{
		{},
		{"X-SMG-Target-Worker", "1"},
		{"x-smg-target-worker", "+0002", "X-SMG-Routing-Key", "k"},
		{"X-SMG-Target-Worker", "99999999999999999999", "Cookie", "c"},
		{"X-SMG-Routing-Key", "", "Authorization", "Bearer t", "Cookie", "c"},
		{"X-SMG-Routing-Key", "a\tb", "x-smg-routing-key", "second"},
		{"Authorization", "", "X-Forwarded-For", "10.0.0.1"},
		{"COOKIE", "caf\xc3\xa9", "Authorization", "x"},
		{"X-Forwarded-For", "1.2.3.4", "Cookie", "c"},
		{"Coo\xe2\x84\xaaie", "k"},
		{"X-SMG-Target-Worker", "-1", "X-SMG-Routing-Key", "k\x00"},
		{"X-SMG-Routing-Key", "b", "x-session-id", "a"},
		{"X-Session-Id", "", "X-SMG-Routing-Key", "b", "X-Session-Id", "late"},
	} {
		f.Add(encodeHeaderPairs(pairs...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		names, values := decodeHeaderPairs(data)
		req := RequestFromHeaders(func(yield func([]byte, []byte) bool) {
			for i := range names {
				if !yield(names[i], values[i]) {
					return
				}
			}
		})

		first := map[string][]byte{}
		present := map[string]bool{}
		for i, name := range names {
			lower := refLowerASCII(name)
			if !present[lower] {
				present[lower], first[lower] = true, values[i]
			}
		}
		target, hasTarget := first["x-smg-target-worker"]
		wantHasTarget := hasTarget && refValid(target)
		if req.HasTarget != wantHasTarget {
			t.Fatalf("HasTarget %v, want %v", req.HasTarget, wantHasTarget)
		}
		if wantHasTarget && req.TargetIndex != refTargetIndex(target) {
			t.Fatalf("TargetIndex of %q: %d, want %d", target, req.TargetIndex, refTargetIndex(target))
		}
		if got := ParseTargetIndex(data); got != refTargetIndex(data) {
			t.Fatalf("ParseTargetIndex(%q) = %d, want %d", data, got, refTargetIndex(data))
		}
		var wantKey []byte
		if v, ok := first["x-smg-routing-key"]; ok && refValid(v) {
			wantKey = v
		}
		if !bytes.Equal(req.RoutingKey, wantKey) {
			t.Fatalf("RoutingKey %q, want %q", req.RoutingKey, wantKey)
		}
		// With routing_key_headers, the first configured name whose first value is valid gives
		// the key; the other inputs are read as before.
		configured := requestFromHeaders([]string{"X-Session-Id", "X-SMG-Routing-Key"}, func(yield func([]byte, []byte) bool) {
			for i := range names {
				if !yield(names[i], values[i]) {
					return
				}
			}
		})
		var wantConfigured []byte
		for _, name := range []string{"x-session-id", "x-smg-routing-key"} {
			if v, ok := first[name]; ok && refValid(v) {
				wantConfigured = v
				break
			}
		}
		if !bytes.Equal(configured.RoutingKey, wantConfigured) {
			t.Fatalf("RoutingKey with routing_key_headers %q, want %q", configured.RoutingKey, wantConfigured)
		}
		if configured.HasTarget != req.HasTarget || configured.TargetIndex != req.TargetIndex || !bytes.Equal(configured.ImplicitKey, req.ImplicitKey) {
			t.Fatalf("routing_key_headers changed another input: %+v vs %+v", configured, req)
		}
		var wantImplicit []byte
		for _, name := range []string{"authorization", "x-forwarded-for", "cookie"} {
			if present[name] {
				if refValid(first[name]) {
					wantImplicit = first[name]
				}
				break
			}
		}
		if !bytes.Equal(req.ImplicitKey, wantImplicit) {
			t.Fatalf("ImplicitKey %q, want %q", req.ImplicitKey, wantImplicit)
		}

		// The decision follows the precedence.
		d := fuzzRouterOnce().Select(&req)
		var want []Branch
		switch {
		case req.HasTarget && req.TargetIndex >= 0 && req.TargetIndex < 3:
			want = []Branch{BranchTargetWorkerHit}
		case req.HasTarget:
			want = []Branch{BranchTargetWorkerMiss}
		case len(req.RoutingKey) > 0:
			want = []Branch{BranchExplicitRoutingKeyHit} // the router is idle: never spills
		case len(req.ImplicitKey) > 0:
			want = []Branch{BranchImplicitRoutingKeyHit}
		default:
			want = []Branch{BranchRandomFallback}
		}
		if d.Branch != want[0] {
			t.Fatalf("branch %v for %+v, want %v", d.Branch, req, want[0])
		}
		if d.Branch.ChoseWorker() != (d.WorkerURL != "") || d.Lease != 0 {
			t.Fatalf("decision %+v", d)
		}
		if req.HasTarget && d.Branch == BranchTargetWorkerHit && d.WorkerURL != workerURLs(3)[req.TargetIndex] {
			t.Fatalf("target %d chose %s", req.TargetIndex, d.WorkerURL)
		}
	})
}
