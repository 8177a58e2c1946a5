// Package httpcheck holds net/http's request rules for a gateway served by fasthttp: the
// server options that make fasthttp's parser agree with net/http's (Configure), the refusals
// net/http's server makes that fasthttp's does not (Request), net/http's answer to a request
// fasthttp's parser refused (ParseError), and the client's header lines as net/http hands
// them to a handler (Headers). parity_test.go sends a corpus of hostile requests to both
// servers and names every case that still differs (docs/contract.md, "HTTP proxies").
//
// Wired into a server:
//
//	s := &fasthttp.Server{Handler: serve, MaxRequestBodySize: maxBodySize, ReadTimeout: ...}
//	httpcheck.Configure(s, maxHeaderBytes)
//	s.ErrorHandler = func(ctx *fasthttp.RequestCtx, err error) {
//		status, text, silent := httpcheck.ParseError(err)
//		if silent {
//			ctx.Conn().Close() // before fasthttp writes an answer of its own
//			return
//		}
//		ctx.Error(text, status)
//	}
//
// and serve begins with
//
//	if r := httpcheck.Request(&ctx.Request.Header); r != nil {
//		ctx.Error(r.Text, r.Status)
//		ctx.SetConnectionClose() // after Error, which resets the response
//		return
//	}
//
// then forwards the lines httpcheck.Headers yields (less the hop-by-hop ones).
package httpcheck

import "github.com/valyala/fasthttp"

// readSlack is what net/http reads past MaxHeaderBytes before it answers 431 (net/http
// server.go initialReadLimitSize): fasthttp refuses a header block that does not fit its read
// buffer, so the buffer is that much larger to refuse at the same size.
const readSlack = 4096

// Configure sets the fasthttp.Server options and the ExpectHandler that the contract's HTTP
// rules need; the gateway sets Handler, ErrorHandler, MaxRequestBodySize and the timeouts itself.
func Configure(s *fasthttp.Server, maxHeaderBytes int) {
	s.ReadBufferSize = maxHeaderBytes + readSlack
	// Normalised names are what makes Peek("X-SMG-Routing-Key") find the header in any case.
	s.DisableHeaderNamesNormalizing = false
	// The parser's errors are then its sentinels, which ParseError tells apart.
	s.SecureErrorLogMessage = true
	// A proxy adds nothing of its own to the worker's answer, and reads no form itself.
	s.NoDefaultServerHeader = true
	s.NoDefaultContentType = true
	s.DisablePreParseMultipartForm = true
	// net/http sends 100 Continue only once the handler reads the body, so a request refused
	// on its headers gets its refusal alone; fasthttp sends 100 and reads the body first.
	s.ExpectHandler = func(ctx *fasthttp.RequestCtx) int { return continueStatus(&ctx.Request.Header, s.MaxRequestBodySize) }
}

// continueStatus is 100 for a request that asks for 100-continue and may send its body, else
// the refusal net/http's server, or the gateway's body rule, answers before any of the body.
func continueStatus(h *fasthttp.RequestHeader, maxBodySize int) int {
	if maxBodySize <= 0 {
		maxBodySize = fasthttp.DefaultMaxRequestBodySize // as fasthttp reads a zero limit
	}
	switch r := Request(h); {
	case r != nil:
		return r.Status
	case h.ContentLength() > maxBodySize:
		return fasthttp.StatusRequestEntityTooLarge
	}
	return fasthttp.StatusContinue
}
