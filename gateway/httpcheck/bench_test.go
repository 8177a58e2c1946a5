package httpcheck

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// llmRequest is the header of a chat completion as the OpenAI Python client sends it through
// the gateway: 15 lines.
const llmRequest = "POST /v1/chat/completions HTTP/1.1\r\n" +
	"Host: gateway.internal:30000\r\n" +
	"Accept-Encoding: gzip, deflate\r\n" +
	"Connection: keep-alive\r\n" +
	"Accept: application/json\r\n" +
	"Content-Type: application/json\r\n" +
	"User-Agent: OpenAI/Python 1.54.4\r\n" +
	"X-Stainless-Lang: python\r\n" +
	"X-Stainless-Package-Version: 1.54.4\r\n" +
	"X-Stainless-Os: Linux\r\n" +
	"X-Stainless-Arch: x64\r\n" +
	"X-Stainless-Runtime: CPython\r\n" +
	"X-Stainless-Runtime-Version: 3.11.10\r\n" +
	"Authorization: Bearer sk-0123456789abcdef0123456789abcdef\r\n" +
	"X-SMG-Routing-Key: session-7f3a9c\r\n" +
	"Content-Length: 1843\r\n\r\n"

// BenchmarkParse is fasthttp's own parse of the same header, the cost Request adds to.
func BenchmarkParse(b *testing.B) {
	var h fasthttp.RequestHeader
	r := strings.NewReader(llmRequest)
	br := bufio.NewReaderSize(r, 4096)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(llmRequest)
		br.Reset(r)
		if err := h.Read(br); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRequest(b *testing.B) {
	h := parsed(b, llmRequest)
	b.ReportAllocs()
	for b.Loop() {
		if r := Request(h); r != nil {
			b.Fatal(r.Text)
		}
	}
}

func BenchmarkHeaders(b *testing.B) {
	h := parsed(b, llmRequest)
	n := 0
	count := func(name, value []byte) bool { n += len(value); return true }
	b.ReportAllocs()
	for b.Loop() {
		Headers(h, count)
	}
}

// BenchmarkAll is fasthttp's parsed view of the same header, what Headers stands in for.
func BenchmarkAll(b *testing.B) {
	h := parsed(b, llmRequest)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for _, value := range h.All() {
			n += len(value)
		}
	}
}

// Request and Headers run on every request: neither allocates for a header with no folded
// Host, Expect or Transfer-Encoding.
func TestRequestAndHeadersAllocateNothing(t *testing.T) {
	h := parsed(t, llmRequest)
	count := func(name, value []byte) bool { return true }
	if n := testing.AllocsPerRun(100, func() { Request(h) }); n != 0 {
		t.Errorf("Request allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(100, func() { Headers(h, count) }); n != 0 {
		t.Errorf("Headers allocates %v times per call", n)
	}
}
