package gateway

import (
	"bufio"
	"bytes"
	"strconv"

	"github.com/bounded-router/bounded-router/gateway/httpcheck"
	"github.com/valyala/fasthttp"
)

// outgoing is one try's request to a worker, as upstream writes it: the client's method, raw
// target, header lines and buffered body, aimed at the try's worker.
type outgoing struct {
	target *target
	method []byte
	// rawTarget is the client's raw path and query, forwarded byte for byte after the worker
	// URL's path prefix (contract: HTTP proxies, step 1).
	rawTarget string
	header    *fasthttp.RequestHeader // the client's
	named     []byte                  // the headers its Connection lines name (connectionNamed)
	body      []byte
	head      bool   // a HEAD: its answer has no body
	upgrade   []byte // the protocol the client asked to switch to; nil for none
	// informational takes the worker's 1xx answers (the final answer excepted) as they come.
	informational func(*fasthttp.ResponseHeader) error
}

// replayable says whether the request may be sent again after the worker took it and answered
// nothing (net/http's rule): an idempotent method, or an Idempotency-Key.
func (o *outgoing) replayable() bool {
	switch string(o.method) {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return o.header.Peek("Idempotency-Key") != nil || o.header.Peek("X-Idempotency-Key") != nil
}

// writeRequest writes o to a worker: the request line with the worker's path prefix and the
// client's raw target, the worker's Host, the client's header lines except the hop-by-hop ones,
// those named in Connection, Expect (the body is read already: it was for this hop), Host and the
// framing, then the body with its length and without the client's chunked framing or trailers
// (contract: HTTP proxies, step 5). Nothing else is added: an absent User-Agent stays absent.
func writeRequest(w *bufio.Writer, o *outgoing) error {
	w.Write(o.method)
	w.WriteByte(' ')
	w.WriteString(o.target.pathPrefix)
	w.WriteString(o.rawTarget)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(o.target.host)
	w.WriteString("\r\n")
	for name, value := range clientHeaders(o.header) {
		if skipOnRequest(name) || (o.named != nil && tokenListHas(o.named, name)) {
			continue
		}
		writeHeaderLine(w, name, value)
	}
	if o.upgrade != nil {
		w.WriteString("Connection: Upgrade\r\n")
		writeHeaderLine(w, []byte("Upgrade"), o.upgrade)
	}
	if len(o.body) > 0 || sendsZeroLength(o.method) {
		var n [20]byte
		writeHeaderLine(w, []byte("Content-Length"), strconv.AppendInt(n[:0], int64(len(o.body)), 10))
	}
	w.WriteString("\r\n")
	_, err := w.Write(o.body)
	return err
}

// sendsZeroLength: net/http's Transport writes "Content-Length: 0" for a request without a body
// only when its method usually has one.
func sendsZeroLength(method []byte) bool {
	switch string(method) {
	case "POST", "PUT", "PATCH":
		return true
	}
	return false
}

func writeHeaderLine(w *bufio.Writer, name, value []byte) {
	w.Write(name)
	w.WriteString(": ")
	w.Write(value)
	w.WriteString("\r\n")
}

// clientHeaders yields the client's header lines as net/http would hand them over: every line,
// in order, with its canonical name (package httpcheck).
func clientHeaders(h *fasthttp.RequestHeader) func(yield func(name, value []byte) bool) {
	return func(yield func(name, value []byte) bool) { httpcheck.Headers(h, yield) }
}

// skipOnRequest names the client's headers the worker never gets: the hop-by-hop ones (RFC
// 9110, 7.6.1, and the ReverseProxy's list), Host (the worker's is written), the framing
// (Content-Length is written anew) and Expect.
func skipOnRequest(name []byte) bool {
	return isHopByHop(name) || nameIs(name, "Host") || nameIs(name, "Content-Length") || nameIs(name, "Expect")
}

// hopByHop are the headers that describe one connection, never forwarded either way.
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func isHopByHop(name []byte) bool {
	for _, h := range hopByHop {
		if nameIs(name, h) {
			return true
		}
	}
	return false
}

// connectionNamed is the client's Connection header's token list, the names of more
// hop-by-hop headers ("close" and "keep-alive" name none); nil when there is none.
func connectionNamed(h *fasthttp.RequestHeader) []byte {
	if h.Peek("Connection") == nil { // fasthttp keeps every Connection line but a bare "close"
		return nil
	}
	return connectionTokens(clientHeaders(h))
}

// connectionTokens joins the values of every Connection line of a header into one list.
func connectionTokens(lines func(yield func(name, value []byte) bool)) []byte {
	var list []byte
	for name, value := range lines {
		if nameIs(name, "Connection") {
			list = append(append(list, value...), ',')
		}
	}
	return list
}

// tokenListHas says whether a comma-separated list holds name, compared without case.
func tokenListHas(list, name []byte) bool {
	for len(list) > 0 {
		i := bytes.IndexByte(list, ',')
		if i < 0 {
			i = len(list)
		}
		if token := bytes.TrimSpace(list[:i]); len(token) > 0 && bytes.EqualFold(token, name) {
			return true
		}
		list = list[min(i+1, len(list)):]
	}
	return false
}

// nameIs says whether a header name is want, compared without ASCII case.
func nameIs(name []byte, want string) bool {
	if len(name) != len(want) {
		return false
	}
	for i, c := range name {
		if lowerASCII(c) != lowerASCII(want[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
