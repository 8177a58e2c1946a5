package httpcheck

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestParity sends every case of the corpus (corpus_test.go, 240 hostile requests)
// to net/http set up as the gateway sets it up and to fasthttp with this package, and asserts
// that both do the same: the same answers (statuses, and for each request served the same
// method, target, version, Host, framing, body, headers, trailers and routing inputs) and the
// same end of the connection. Error texts are not compared (the contract, "HTTP proxies" step
// 2, lets the server refuse with its own). The cases in knownDifferences are the exceptions.
func TestParity(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 240 cases to two servers")
	}
	reference, checked := startNetHTTP(t), startFasthttp(t)
	cases := corpus()
	got := make([][2]outcome, len(cases))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 24) // connections at once
	for i, c := range cases {
		for s, addr := range []string{reference, checked} {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				got[i][s] = send(addr, c)
			}()
		}
	}
	wg.Wait()

	same, reset := 0, 0
	for i, c := range cases {
		a, b := key(got[i][0]), key(got[i][1])
		why, known := knownDifferences[c.Name]
		switch {
		case known && why == needsLinger:
			// Same but for a reset, which can also lose the answers the client had not read.
			if b != a && strings.ReplaceAll(b, "| reset", "| closed") != a && got[i][1].End != "reset" {
				t.Errorf("%s: differs beyond the reset (%s):\n net/http %s\n fasthttp %s", c.Name, why, a, b)
			}
		case known && a == b:
			t.Errorf("%s: known to differ (%s), but both answer %s: take it out of knownDifferences", c.Name, why, a)
		case !known && a != b:
			t.Errorf("%s: differs\n net/http %s\n fasthttp %s", c.Name, a, b)
		}
		switch {
		case a == b:
			same++
		case why == needsLinger:
			reset++
		}
	}
	t.Logf("%d of %d cases the same; %d differ by a reset only; %d in knownDifferences", same, len(cases), reset, len(knownDifferences))
	for name := range knownDifferences {
		if !inCorpus(cases, name) {
			t.Errorf("knownDifferences names %q, which is not in the corpus", name)
		}
	}
}

func inCorpus(cases []wireCase, name string) bool {
	for _, c := range cases {
		if c.Name == name {
			return true
		}
	}
	return false
}

// skipped are the headers compared through echo's own fields (Host, the framing) or that the
// gateway drops as hop-by-hop, whose effect on the connection is compared instead.
var skipped = map[string]bool{"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Trailer": true}

// key is an outcome as the comparison sees it: each answer's status, with the echo of a
// request served, and how the connection ended.
func key(o outcome) string {
	var parts []string
	for _, a := range o.Answers {
		s := strconv.Itoa(a.Status)
		if e := a.Echo; a.Status == 200 && e != nil {
			s += fmt.Sprintf(" %s %q %s host=%q te=%q body=%d:%q hdr%q trailers%q routing%q", e.Method, e.Target, e.Proto,
				e.Host, strings.ToLower(e.TE), e.BodyLen, e.Body, kept(e.Headers), e.Trailers, e.Routing)
		}
		parts = append(parts, s)
	}
	if o.Garbage {
		parts = append(parts, "garbage")
	}
	return strings.Join(parts, " ; ") + " | " + o.End
}

func kept(lines [][2]string) [][2]string {
	var out [][2]string
	for _, l := range lines {
		if !skipped[l[0]] {
			out = append(out, l)
		}
	}
	return out
}
