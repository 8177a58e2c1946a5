package httpcheck

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The two servers of the parity test, each answering a request it serves with an echo of what
// it understood. Both have the gateway's defaults (gateway/options.go) but for the timeouts,
// 1 s for the headers and the body instead of 10 s and 60 s, so that they fire within connBound.
const (
	maxHeaderBytes = 64 << 10 // Defaults.MaxHeaderBytes
	maxBodySize    = 4 << 20  // Defaults.MaxBodySize
	readTimeout    = 1 * time.Second
	keepAlive      = 120 * time.Second      // Defaults.KeepAliveTimeout
	maxDrain       = 256 << 10              // gateway/proxy.go maxDrain
	refusalDrain   = 500 * time.Millisecond // gateway/proxy.go refusalDrain
)

// routingHeaders are core.RoutingHeaders() (core/request.go).
var routingHeaders = []string{"X-SMG-Target-Worker", "X-SMG-Routing-Key", "Authorization", "X-Forwarded-For", "Cookie"}

// echo is what a handler understood of one request.
type echo struct {
	Method, Target, Proto, Host string
	TE                          string      // the transfer coding the server framed the body by
	Body                        string      // its first 64 bytes
	BodyLen                     int         //
	Headers                     [][2]string // as a proxy would forward them: names, values in order
	Trailers                    [][2]string
	Routing                     []string // the routing headers' first values, as the gateway looks them up
}

func writeEcho(set func(k, v string), e *echo) []byte {
	j, _ := json.Marshal(e)
	set("X-Echo", base64.StdEncoding.EncodeToString(j))
	set("Content-Type", "application/json")
	return j
}

func (e *echo) setBody(b []byte) {
	e.BodyLen, e.Body = len(b), string(b[:min(len(b), 64)])
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startNetHTTP is the reference: http.Server as gateway/gateway.go New sets it up, and the
// gateway's body rules (gateway/proxy.go ServeHTTP, readBody, refuse, drainRefused) in the handler.
func startNetHTTP(t *testing.T) string {
	ln := listen(t)
	hs := &http.Server{Handler: http.HandlerFunc(referenceEcho), ReadHeaderTimeout: readTimeout, IdleTimeout: keepAlive,
		MaxHeaderBytes: maxHeaderBytes, DisableGeneralOptionsHandler: true, ErrorLog: log.New(io.Discard, "", 0)}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

func referenceEcho(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > maxBodySize {
		refuse(w, r, http.StatusRequestEntityTooLarge)
		return
	}
	body, status := readBody(w, r)
	if status != 0 {
		refuse(w, r, status)
		return
	}
	e := &echo{Method: r.Method, Target: r.RequestURI, Proto: r.Proto, Host: r.Host, TE: strings.Join(r.TransferEncoding, ",")}
	e.setBody(body)
	for _, n := range routingHeaders {
		e.Routing = append(e.Routing, r.Header.Get(n))
	}
	e.Headers, e.Trailers = sorted(r.Header), sorted(r.Trailer)
	w.Write(writeEcho(w.Header().Set, e))
}

// readBody is gateway/proxy.go readBody's rule: the body within body_timeout and max_body_size.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, int) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, 0
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(readTimeout))
	defer rc.SetReadDeadline(time.Time{})
	var body []byte
	var err error
	if r.ContentLength > 0 {
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodySize))
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return body, 0
	case errors.As(err, &tooLarge):
		return nil, http.StatusRequestEntityTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout
	default:
		return nil, http.StatusBadRequest
	}
}

// refuse is gateway/proxy.go refuse and drainRefused: close, once what is left of the body is read.
func refuse(w http.ResponseWriter, r *http.Request, status int) {
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(refusalDrain))
	if r.ContentLength > maxDrain {
		return
	}
	rc.Flush()
	io.CopyN(io.Discard, r.Body, maxDrain)
}

// sorted is a net/http header's lines by name, each name's values in order.
func sorted(h http.Header) [][2]string {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	sort.Strings(names)
	var lines [][2]string
	for _, n := range names {
		for _, v := range h[n] {
			lines = append(lines, [2]string{n, v})
		}
	}
	return lines
}

// startFasthttp is the server under test: Configure, Request in the handler, ParseError in the
// ErrorHandler, and the headers taken from Headers, as the gateway on fasthttp is to use them.
func startFasthttp(t *testing.T) string {
	ln := listen(t)
	fs := &fasthttp.Server{Handler: fastEcho, ErrorHandler: fastParseError, MaxRequestBodySize: maxBodySize,
		ReadTimeout: readTimeout, IdleTimeout: keepAlive, Logger: log.New(io.Discard, "", 0)}
	Configure(fs, maxHeaderBytes)
	go fs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), connBound)
		defer cancel()
		fs.ShutdownWithContext(ctx)
	})
	return ln.Addr().String()
}

func fastParseError(ctx *fasthttp.RequestCtx, err error) {
	status, text, silent := ParseError(err)
	if silent {
		ctx.Conn().Close() // before fasthttp writes an answer of its own
		return
	}
	ctx.Error(text, status)
}

func fastEcho(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	if r := Request(h); r != nil {
		ctx.Error(r.Text, r.Status)
		ctx.SetConnectionClose() // after Error, which resets the response
		return
	}
	e := &echo{Method: string(h.Method()), Target: string(h.RequestURI()), Proto: string(h.Protocol()), Host: string(ctx.Host()),
		TE: string(h.Peek("Transfer-Encoding"))}
	e.setBody(ctx.PostBody())
	for _, n := range routingHeaders {
		e.Routing = append(e.Routing, string(h.Peek(n)))
	}
	Headers(h, func(name, value []byte) bool {
		e.Headers = append(e.Headers, [2]string{string(name), string(value)})
		return true
	})
	sort.SliceStable(e.Headers, func(i, j int) bool { return e.Headers[i][0] < e.Headers[j][0] })
	for k := range h.Trailers() { // the trailer section's values, found by Peek after the headers'
		if v := h.PeekBytes(k); v != nil {
			e.Trailers = append(e.Trailers, [2]string{textproto.CanonicalMIMEHeaderKey(string(k)), string(v)})
		}
	}
	ctx.SetBody(writeEcho(func(k, v string) { ctx.Response.Header.Set(k, v) }, e))
}
