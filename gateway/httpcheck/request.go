package httpcheck

import (
	"bytes"
	"net/url"

	"github.com/valyala/fasthttp"
)

// Refusal is net/http's answer to a request its server refuses before any handler runs. The
// connection closes after it, as net/http closes it: the rest of what the client sent may not
// be framed as the client meant.
type Refusal struct {
	Status int
	Text   string
}

// The refusals, shared and never written to: Request allocates nothing. The texts are
// net/http's reasons, in the contract's words (section "HTTP proxies", step 2).
var (
	refusedVersion  = &Refusal{fasthttp.StatusHTTPVersionNotSupported, "unsupported protocol version: only HTTP/1.x is served"}
	refusedTarget   = &Refusal{fasthttp.StatusBadRequest, "invalid request target (a bad percent-escape, or not a URL)"}
	refusedName     = &Refusal{fasthttp.StatusBadRequest, "invalid header name: not a token"}
	refusedNoHost   = &Refusal{fasthttp.StatusBadRequest, "missing required Host header"}
	refusedHost     = &Refusal{fasthttp.StatusBadRequest, "malformed Host header"}
	refusedExpect   = &Refusal{fasthttp.StatusExpectationFailed, "unsupported Expect: only 100-continue is served"}
	refusedTransfer = &Refusal{fasthttp.StatusNotImplemented, "unsupported Transfer-Encoding: only chunked is served"}
)

var (
	http1       = []byte("HTTP/1.")
	nameTE      = []byte("Transfer-Encoding")
	nameHost    = []byte("Host")
	nameExpect  = []byte("Expect")
	chunked     = []byte("chunked")
	continue100 = []byte("100-continue")
)

// Request applies the rules of net/http's server that fasthttp's parser does not, to a request
// fasthttp parsed: nil, or the refusal net/http would answer, the first in net/http's order
// (request.go readRequest, then server.go readRequest and serve). It makes one pass over the
// raw header lines, and allocates nothing for a target that starts with '/' and no Host,
// Expect or Transfer-Encoding value folded over several lines.
func Request(h *fasthttp.RequestHeader) *Refusal {
	if !validTarget(h.Method(), h.RequestURI()) {
		return refusedTarget
	}
	f := checkFields(h.RawHeaders())
	switch {
	case f.transfer:
		return refusedTransfer
	// net/http serves HTTP/1.x only (server.go http1ServerSupportsRequest); fasthttp takes
	// HTTP/2.0 and HTTP/3.0 request lines as some version before 1.1.
	case !bytes.HasPrefix(h.Protocol(), http1):
		return refusedVersion
	// fasthttp asks for a Host in HTTP/1.1 only, net/http from HTTP/1.1 on (HTTP/1.2 too).
	case !f.hasHost && string(h.Protocol()) > "HTTP/1.0" && string(h.Method()) != "CONNECT":
		return refusedNoHost
	case f.host:
		return refusedHost
	case f.name:
		return refusedName
	case f.expect:
		return refusedExpect
	}
	return nil
}

// findings are what checkFields found that net/http refuses: which refusal comes first
// depends on which of them the request has.
type findings struct{ name, transfer, hasHost, host, expect bool }

// checkFields is Request's pass over the raw header lines, where fasthttp's parsed view hides
// what net/http refuses: a name with a space (fasthttp refuses the other non-token bytes), a
// Host with bytes outside httpguts' set, an Expect other than 100-continue, and
// Transfer-Encoding: identity, which fasthttp takes as "no body" and so parses the body as the
// next request (the smuggling hole net/http's 501 closes).
func checkFields(b []byte) (found findings) {
	var buf [64]byte
	seenExpect := false
	for f, rest, ok := nextField(b); ok; f, rest, ok = nextField(rest) {
		found.name = found.name || !f.token
		switch len(f.name) { // the length first: most names are none of the three
		case len(nameTE):
			if bytes.EqualFold(f.name, nameTE) && !bytes.EqualFold(f.unfolded(buf[:0]), chunked) {
				found.transfer = true
			}
		case len(nameHost):
			if !found.hasHost && bytes.EqualFold(f.name, nameHost) { // a second one fasthttp refuses
				found.hasHost = true
				found.host = !validHost(f.unfolded(buf[:0]))
			}
		case len(nameExpect):
			if !seenExpect && bytes.EqualFold(f.name, nameExpect) { // net/http reads the first
				seenExpect = true
				v := f.unfolded(buf[:0])
				found.expect = len(v) > 0 && !hasToken(v, continue100)
			}
		}
	}
	return found
}

// validTarget is net/http's url.ParseRequestURI of the target (request.go readRequest), which
// fasthttp does not make: for a path, every escape must be valid; any other form (absolute,
// authority, "*"), rare and refused by the gateway's path rule anyway, is parsed as net/http
// parses it.
func validTarget(method, target []byte) bool {
	if len(target) > 0 && target[0] == '/' {
		return validEscapes(target)
	}
	s := string(target)
	if string(method) == "CONNECT" { // an authority, which net/http parses as a URL's
		s = "http://" + s
	}
	_, err := url.ParseRequestURI(s)
	return err == nil
}

// validEscapes: every '%' before the query starts a two-digit hex escape.
func validEscapes(target []byte) bool {
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		target = target[:q]
	}
	for i := bytes.IndexByte(target, '%'); i >= 0; i = bytes.IndexByte(target, '%') {
		if i+2 >= len(target) || !isHex(target[i+1]) || !isHex(target[i+2]) {
			return false
		}
		target = target[i+3:]
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hasToken is net/http's hasToken (header.go): token appears in v, case aside, between
// list separators (space, tab, comma) or v's ends.
func hasToken(v, token []byte) bool {
	for i := 0; i+len(token) <= len(v); i++ {
		end := i + len(token)
		if (i == 0 || isBoundary(v[i-1])) && (end == len(v) || isBoundary(v[end])) && bytes.EqualFold(v[i:end], token) {
			return true
		}
	}
	return false
}

func isBoundary(c byte) bool { return c == ' ' || c == ',' || c == '\t' }
