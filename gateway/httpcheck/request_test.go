package httpcheck

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"golang.org/x/net/http/httpguts"
)

// parsed is raw read by fasthttp's parser as its server reads a request.
func parsed(t testing.TB, raw string) *fasthttp.RequestHeader {
	t.Helper()
	h := new(fasthttp.RequestHeader)
	if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatalf("fasthttp refused %q: %v", raw, err)
	}
	return h
}

// The expected statuses are net/http's answers to the same bytes (net/http server.go readRequest
// and serve, transfer.go; each rule named beside its vectors), 0 where net/http serves the request.
// TestVectorsAreNetHTTPs sends each to net/http to make sure.
const getHead = "GET /v1/x HTTP/1.1\r\nHost: h\r\n"

var requestVectors = []struct {
	name, raw string
	status    int
}{
	{"plain", getHead + "\r\n", 0},
	{"HTTP/1.0 without Host", "GET /v1/x HTTP/1.0\r\n\r\n", 0},
	// http1ServerSupportsRequest: major version 1 only
	{"HTTP/2.0", "GET /v1/x HTTP/2.0\r\nHost: h\r\n\r\n", 505},
	{"HTTP/3.0", "GET /v1/x HTTP/3.0\r\nHost: h\r\n\r\n", 505},
	{"HTTP/1.2", "GET /v1/x HTTP/1.2\r\nHost: h\r\n\r\n", 0},
	// request.go readRequest's url.ParseRequestURI: escapes before the query
	{"bad escape", "GET /v1/a%zzb HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	{"cut escape", "GET /a%2 HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	{"lone percent", "GET /a% HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	{"good escapes", "GET /v1/%2F%e9%C3%A9 HTTP/1.1\r\nHost: h\r\n\r\n", 0},
	{"bad escape in the query", "GET /v1/x?%zz HTTP/1.1\r\nHost: h\r\n\r\n", 0},
	{"bad escape in an absolute target", "GET http://a/b%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	{"absolute target", "GET http://a:1/b?%zz HTTP/1.1\r\nHost: h\r\n\r\n", 0},
	{"absolute target with a bad port", "GET http://a:b/ HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", 0},
	{"authority", "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", 0},
	{"authority not a URL's", "CONNECT #0 HTTP/1.1\r\nHost: h\r\n\r\n", 400},
	// server.go readRequest: a Host from HTTP/1.1 on, except for CONNECT
	{"HTTP/1.2 without Host", "GET /v1/x HTTP/1.2\r\n\r\n", 400},
	{"CONNECT in HTTP/1.2 without Host", "CONNECT a:443 HTTP/1.2\r\n\r\n", 0},
	// the order: the target, then Transfer-Encoding (request.go), the version, Host, names, Expect (server.go)
	{"target before version", "CONNECT #0 HTTP/2.0\r\nHost: h\r\n\r\n", 400},
	{"identity before a bad name", "POST /v1/x HTTP/1.1\r\nHost: h\r\nX A: 1\r\nTransfer-Encoding: identity\r\n\r\n", 501},
	{"version before a bad name", "GET /v1/x HTTP/2.0\r\nHost: h\r\nX A: 1\r\n\r\n", 505},
	{"bad name before Expect", "GET /v1/x HTTP/1.1\r\nHost: h\r\nExpect: foo\r\nX A: 1\r\n\r\n", 400},
	// httpguts.ValidHeaderFieldName on every name
	{"space in a name", getHead + "X A: 1\r\n\r\n", 400},
	{"token punctuation in a name", getHead + "X!#$%&'*+-.^_`|~: 1\r\n\r\n", 0},
	// httpguts.ValidHostHeader
	{"Host with userinfo", "GET /v1/x HTTP/1.1\r\nHost: u@a\r\n\r\n", 400},
	{"Host IPv6 and port", "GET /v1/x HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", 0},
	{"Host folded onto a space", "GET /v1/x HTTP/1.1\r\nHost: a\r\n b\r\n\r\n", 400},
	// serve: hasToken(first Expect, "100-continue"), else any Expect is 417
	{"Expect 100-continue", "POST /v1/x HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 0\r\n\r\n", 0},
	{"Expect listing 100-continue", "POST /v1/x HTTP/1.1\r\nHost: h\r\nExpect: foo, 100-continue\r\nContent-Length: 0\r\n\r\n", 0},
	{"Expect other", "POST /v1/x HTTP/1.1\r\nHost: h\r\nExpect: foo\r\nContent-Length: 0\r\n\r\n", 417},
	{"Expect 100-continuex", getHead + "Expect: 100-continuex\r\n\r\n", 417},
	{"Expect empty", getHead + "Expect: \r\n\r\n", 0},
	{"second Expect not read", getHead + "Expect: 100-continue\r\nExpect: foo\r\n\r\n", 0},
	{"Expect other in HTTP/1.0", "GET /v1/x HTTP/1.0\r\nExpect: foo\r\n\r\n", 417},
	// transfer.go parseTransferEncoding: exactly "chunked", else 501
	{"chunked", "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: Chunked\r\n\r\n", 0},
	{"identity", "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", 501},
	{"identity with a length", "POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\n", 501},
	{"IDENTITY", "POST /v1/x HTTP/1.1\r\nHost: h\r\ntransfer-encoding: IDENTITY\r\n\r\n", 501},
}

func TestRequest(t *testing.T) {
	for _, c := range requestVectors {
		t.Run(c.name, func(t *testing.T) {
			got := 0
			if r := Request(parsed(t, c.raw)); r != nil {
				got = r.Status
			}
			if got != c.status {
				t.Errorf("Request(%q) = %d, want %d", c.raw, got, c.status)
			}
		})
	}
}

func TestByteSetsAreHttpguts(t *testing.T) {
	for c := 0; c < 256; c++ {
		if tokenBytes[c] != httpguts.IsTokenRune(rune(c)) {
			t.Errorf("token byte %#x: %v, httpguts %v", c, tokenBytes[c], !tokenBytes[c])
		}
		if hostBytes[c] != httpguts.ValidHostHeader(string([]byte{byte(c)})) {
			t.Errorf("host byte %#x: %v, httpguts %v", c, hostBytes[c], !hostBytes[c])
		}
	}
}

type timeout struct{}

func (timeout) Error() string   { return "i/o timeout" }
func (timeout) Timeout() bool   { return true }
func (timeout) Temporary() bool { return true }

// The statuses net/http answers for the same failures (server.go serve: 413 from MaxBytesReader
// in the gateway's readBody, 431 errTooLarge, 501 for an unsupported coding, 408 from the gateway's
// body_timeout; a read timeout within the headers closes without an answer). The errors have
// the forms fasthttp's server hands over (server.go serveConn, header.go tryRead).
func TestParseError(t *testing.T) {
	readTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	cases := []struct {
		name   string
		err    error
		status int
		silent bool
	}{
		{"body too large", fasthttp.ErrBodyTooLarge, 413, false},
		{"header too large", &fasthttp.ErrSmallBuffer{}, 431, false},
		{"header too large, wrapped", fmt.Errorf("reading: %w", &fasthttp.ErrSmallBuffer{}), 431, false},
		{"unsupported coding", fasthttp.ErrUnsupportedTransferEncoding, 501, false},
		{"headers cut by the timeout", fmt.Errorf("error when reading request headers: %w", readTimeout), 0, true},
		{"headers cut by a timeout of another type", fmt.Errorf("error when reading request headers: %w", timeout{}), 0, true},
		{"body cut by the timeout", readTimeout, 408, false},
		{"two lengths", fasthttp.ErrDuplicateContentLength, 400, false},
		{"anything else", errors.New("malformed mime header line"), 400, false},
	}
	for _, c := range cases {
		status, text, silent := ParseError(c.err)
		if status != c.status || silent != c.silent || (text == "") != silent {
			t.Errorf("%s: ParseError = %d %q silent=%v, want %d silent=%v", c.name, status, text, silent, c.status, c.silent)
		}
	}
}

type line struct{ name, value string }

func headerLines(h *fasthttp.RequestHeader) []line {
	var got []line
	Headers(h, func(name, value []byte) bool {
		got = append(got, line{string(name), string(value)})
		return true
	})
	return got
}

// Expected: r.Header of a net/http server for the same bytes, in the order sent (textproto
// canonical names, obs-fold joined by one space, Host and Transfer-Encoding taken out).
func TestHeaders(t *testing.T) {
	raw := "POST /v1/x HTTP/1.1\r\nhost: h\r\ncookie: a=1\r\nUser-Agent: a\r\nx-smg-routing-key: k\r\n" +
		"Cookie: b=2; c=3\r\nuser-agent: b\r\nContent-Type: a/b\r\nCONTENT-TYPE: c/d\r\n" +
		"X-Fold: 1 \r\n \t2\r\n\t 3  \r\nTransfer-Encoding: chunked\r\nX-Empty:\r\nx-trace: a\r\nX-TRACE: b\r\n" +
		"X-Fold-Empty:\r\n 1\r\nX-Fold-Blank: 1\r\n \r\n\r\n"
	want := []line{{"Cookie", "a=1"}, {"User-Agent", "a"}, {"X-Smg-Routing-Key", "k"}, {"Cookie", "b=2; c=3"},
		{"User-Agent", "b"}, {"Content-Type", "a/b"}, {"Content-Type", "c/d"}, {"X-Fold", "1 2 3"}, {"X-Empty", ""},
		{"X-Trace", "a"}, {"X-Trace", "b"}, {"X-Fold-Empty", "1"}, {"X-Fold-Blank", "1 "}}
	got := headerLines(parsed(t, raw))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Headers:\n got %q\nwant %q", got, want)
	}
}

func TestHeadersStopsWhenYieldDoes(t *testing.T) {
	h := parsed(t, "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n\r\n")
	var n int
	Headers(h, func(name, value []byte) bool { n++; return false })
	if n != 1 {
		t.Errorf("yield called %d times after returning false, want 1", n)
	}
}
