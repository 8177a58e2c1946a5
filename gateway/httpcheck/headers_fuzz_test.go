package httpcheck

import (
	"bufio"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzHeadersMatchNetHTTP: for a header block that fasthttp's parser and net/http's both accept
// and Request lets through, Headers yields what net/http's reader puts in r.Header: the same
// names, each with the same values in the same order (Host and Transfer-Encoding out).
func FuzzHeadersMatchNetHTTP(f *testing.F) {
	for _, s := range []string{
		"A: 1\r\n 2\r\n", "X-A: 1\r\n\t2\r\n  3 \r\n", "cookie: a=1\r\nCookie: b=2; c=3\r\n", "User-Agent: a\r\nuser-agent: b\r\n",
		"Content-Type: a/b\r\nCONTENT-TYPE: c/d\r\n", "x-smg-routing-key: k\r\nX-SMG-ROUTING-KEY: k2\r\n", "X: \t v \t\r\n",
		"X:\r\n", "X: a\r\n\t\r\n", "Transfer-Encoding: chunked\r\n", "Expect: 100-continue\r\n", "A: 1\nB: 2\n",
		"Connection: keep-alive, X-P\r\nX-P: 1\r\n", "Content-Length: 0\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, block string) {
		// net/http adds Cache-Control: no-cache to r.Header beside a Pragma: no-cache (request.go
		// fixPragmaCacheControl): a line the client did not send, which Headers does not invent.
		if strings.Contains(strings.ToLower(block), "pragma") {
			return
		}
		raw := "POST / HTTP/1.1\r\nHost: h\r\n" + block + "\r\n\r\n"
		h := new(fasthttp.RequestHeader)
		if h.Read(bufio.NewReader(strings.NewReader(raw))) != nil || Request(h) != nil {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return // net/http refuses it: the parity test's business
		}
		got := http.Header{}
		Headers(h, func(name, value []byte) bool {
			got[string(name)] = append(got[string(name)], string(value))
			return true
		})
		want := r.Header.Clone()
		delete(want, "Host")
		if !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("block %q:\nHeaders %q\nnet/http %q", block, got, want)
		}
	})
}
