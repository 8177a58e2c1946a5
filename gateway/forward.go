package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"

	"github.com/valyala/fasthttp"
)

// forward is the proxy step: the request goes to its worker (failover retries it elsewhere),
// and the worker's answer becomes the client's. The rules are the ReverseProxy's: hop-by-hop
// headers and those named in Connection are dropped both ways, nothing is added (an absent
// User-Agent stays absent), 1xx answers are passed on, a stream (text/event-stream, or a body of
// unknown length) is flushed per write, trailers follow the body, and a body cut short aborts the
// client's connection so that the cut shows. Contract: HTTP proxies, steps 5 and 7.
func (g *Gateway) forward(ctx *fasthttp.RequestCtx, ex *exchange) {
	if upgrade := upgradeType(&ctx.Request.Header); upgrade != nil {
		g.upgrade(ctx, ex, upgrade)
		return
	}
	ex.out.head = ctx.IsHead()
	if ctx.Request.Header.IsHTTP11() { // an HTTP/1.0 client must get no 1xx (RFC 9110, 15.2)
		ex.out.informational = func(h *fasthttp.ResponseHeader) error { return writeInformational(ctx, h) }
	}
	if !g.send(ctx, ex) {
		return
	}
	if ex.answer.StatusCode() == fasthttp.StatusSwitchingProtocols {
		// Nothing was asked for: refused, as the ReverseProxy refuses a switch to another
		// protocol than the one asked for.
		g.proxyError(ctx, ex, fmt.Errorf("backend tried to switch protocol %q when %q was requested", ex.answer.Header.Peek("Upgrade"), ""))
		return
	}
	g.answer(ctx, ex)
}

// send sends the request to its worker, retried elsewhere as failover says (roundTrips), and
// keeps the answer's head and body in the exchange; it answers a request no worker answered and
// returns false.
func (g *Gateway) send(ctx *fasthttp.RequestCtx, ex *exchange) bool {
	ex.out.target = ex.target
	ex.out.header = &ctx.Request.Header
	ex.out.named = connectionNamed(ex.out.header) // once, for every try
	ex.answer = fasthttp.AcquireResponse()
	body, err := g.roundTrips(ex)
	if err != nil {
		g.proxyError(ctx, ex, err)
		return false
	}
	ex.upstream = body
	return true
}

// answer makes the worker's answer the client's: its status, its headers less the hop-by-hop
// ones, and the exchange as its body, which the server copies after the handler returns and
// closes at the end (finish).
func (g *Gateway) answer(ctx *fasthttp.RequestCtx, ex *exchange) {
	up := &ex.answer.Header
	ex.status = up.StatusCode()
	res := &ctx.Response
	res.SetStatusCode(ex.status)
	ex.reply = &res.Header
	copyAnswerHeaders(&res.Header, up)
	if g.opts.ExposeRoutingHeaders {
		res.Header.Set(HeaderWorker, ex.decision.WorkerURL)
		res.Header.Set(HeaderBranch, ex.decision.Branch.String())
	}
	if ex.answer.SkipBody || ex.status == fasthttp.StatusNoContent || ex.status == fasthttp.StatusNotModified {
		// No body: the head goes alone, with the length the worker gave (a HEAD's, a 304's) or
		// none, and nothing is left to copy.
		if length := up.Peek("Content-Length"); len(length) > 0 {
			res.Header.SetBytesV("Content-Length", length)
		}
		g.finish(ex)
		return
	}
	length := up.ContentLength()
	if length < 0 {
		length = -1
	}
	ex.writing.Store(true)
	ex.pause() // the head goes to the client; each read of the body arms the idle timeout
	if length < 0 && !ctx.Request.Header.IsHTTP11() && !ex.answer.SkipBody {
		g.answerUntilClose(ctx, ex)
		return
	}
	// A stream's head goes at once, and each piece the worker sends is written as it comes
	// (fasthttp flushes every chunk, and copies a known length straight to the socket once the
	// head has gone); a body of known length otherwise goes through the server's buffer.
	res.ImmediateHeaderFlush = length < 0 || isEventStream(up.ContentType())
	res.SetBodyStream(ex, length)
}

// answerUntilClose sends an answer of unknown length to an HTTP/1.0 client, which cannot read
// chunks, as net/http does: the body as it comes, ended by the close of the connection. fasthttp
// would chunk it, so the gateway writes it on the connection itself (hijack).
func (g *Gateway) answerUntilClose(ctx *fasthttp.RequestCtx, ex *exchange) {
	ctx.Response.Header.SetContentLength(-2) // no length, no chunks: Connection: close
	g.hijack(ctx, ex, func(client net.Conn) { io.Copy(writerOnly{client}, ex) })
}

// writerOnly hides a connection's ReadFrom, so that a copy reads into its buffer and writes each
// piece at once.
type writerOnly struct{ io.Writer }

// copyAnswerHeaders copies a worker's answer headers to the client's answer, less the hop-by-hop
// ones and those named in Connection; Trailer announces the trailers that follow a chunked body
// (only such a body has any), and the length is the body stream's.
func copyAnswerHeaders(dst *fasthttp.ResponseHeader, src *fasthttp.ResponseHeader) {
	named := connectionTokens(src.All())
	for name, value := range src.All() {
		switch {
		case nameIs(name, "Trailer") && src.ContentLength() == -1:
		case isHopByHop(name), nameIs(name, "Content-Length"), named != nil && tokenListHas(named, name):
			continue
		}
		dst.AddBytesKV(name, value)
	}
}

// writeInformational passes a worker's 1xx answer (103 Early Hints and the like) on to the
// client, before its final answer.
func writeInformational(ctx *fasthttp.RequestCtx, h *fasthttp.ResponseHeader) error {
	b := make([]byte, 0, 256)
	b = fmt.Appendf(b, "HTTP/1.1 %d %s\r\n", h.StatusCode(), fasthttp.StatusMessage(h.StatusCode()))
	for name, value := range h.All() {
		b = append(append(append(append(b, name...), ": "...), value...), "\r\n"...)
	}
	b = append(b, "\r\n"...)
	ctx.Conn().Write(b) // a client that left is noticed by the watch
	return nil
}

// trailersAtEnd copies the trailers the worker sent after its body to the client's answer,
// those it did not announce too (they follow the body, as net/http sends them).
func (ex *exchange) trailersAtEnd() {
	for name := range ex.answer.Header.Trailers() {
		if v := ex.answer.Header.Peek(string(name)); v != nil {
			ex.reply.AddTrailerBytes(name) // announced already: a no-op
			ex.reply.SetBytesKV(name, v)
		}
	}
}

// proxyError answers a request the worker did not answer: 504 past the first-byte timeout,
// 502 otherwise; nothing when the client has left.
func (g *Gateway) proxyError(ctx *fasthttp.RequestCtx, ex *exchange, err error) {
	ex.errorText = err.Error()
	switch {
	case ex.left.Load():
		ex.status = 499 // the client closed the connection; nobody to answer
		closeWithoutAnswer(ctx)
	case ex.timedOut.Load() == requestTimedOut:
		g.writeError(ctx, ex, fasthttp.StatusGatewayTimeout, "worker sent no response within request_timeout_secs ("+seconds(g.opts.RequestTimeout).String()+")")
	case ex.timedOut.Load() == phaseTimedOut:
		g.writeError(ctx, ex, fasthttp.StatusGatewayTimeout, "worker sent no response within first_byte_timeout ("+seconds(g.opts.FirstByteTimeout).String()+")")
	default:
		g.writeError(ctx, ex, fasthttp.StatusBadGateway, "worker did not answer")
	}
	g.finish(ex)
}

// bodyCut logs why the worker's body ended before its end, and keeps the reason for the access
// log: one of the gateway's timeouts (which cancel the try, contract: HTTP proxies, step 7), or
// the read's own error. A client that left is not logged.
func (g *Gateway) bodyCut(ex *exchange, err error) {
	if ex.left.Load() {
		return
	}
	var cut string
	switch ex.timedOut.Load() {
	case clientTimedOut:
		g.errorLog.Printf("the client did not take worker %s's answer within request_timeout_secs (%v)", ex.decision.WorkerURL, seconds(g.opts.RequestTimeout))
		ex.errorText = "stream cut: the client did not take the answer within request_timeout_secs"
		return
	case phaseTimedOut:
		cut = "sent nothing for idle_timeout (" + seconds(g.opts.IdleTimeout).String() + ")"
	case requestTimedOut:
		cut = "did not end within request_timeout_secs (" + seconds(g.opts.RequestTimeout).String() + ")"
	default:
		if errors.Is(err, context.Canceled) {
			return
		}
		g.errorLog.Printf("read error during body copy from worker %s: %v", ex.decision.WorkerURL, err)
		ex.errorText = "stream cut: " + err.Error()
		return
	}
	g.errorLog.Printf("worker %s's stream was cut: it %s", ex.decision.WorkerURL, cut)
	ex.errorText = "stream cut: the worker " + cut
}

func isEventStream(contentType []byte) bool {
	const eventStream = "text/event-stream"
	if ct := bytes.TrimLeft(contentType, " \t"); len(ct) < len(eventStream) || !nameIs(ct[:len(eventStream)], eventStream) {
		return false // the common case, without parsing or a copy
	}
	base, _, _ := mime.ParseMediaType(string(contentType))
	return base == "text/event-stream"
}

// upgradeType is the protocol a request asks to switch to (nil for none): its Upgrade header,
// when a Connection line names "upgrade" (with "close" beside it too).
func upgradeType(h *fasthttp.RequestHeader) []byte {
	if h.Peek("Upgrade") == nil || !tokenListHas(connectionNamed(h), []byte("upgrade")) {
		return nil
	}
	return h.Peek("Upgrade")
}

var _ io.ReadCloser = (*exchange)(nil)
