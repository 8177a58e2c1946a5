package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
)

// forward is the proxy step of a request that does not ask for an upgrade: what
// httputil.ReverseProxy does for it, without its request clone (a deep copy of every header),
// its second pass over the headers and its trace closures (their cost: BENCHMARKS.md, "The
// proxy step without httputil.ReverseProxy"). The rules are the
// ReverseProxy's: hop-by-hop headers and those named in Connection are dropped both ways,
// nothing is added (an absent User-Agent stays absent), 1xx answers are passed on, a stream
// (text/event-stream, or a body of unknown length) is flushed per write, trailers follow the
// body, and a body cut short aborts the client's connection so that the cut shows. An upgrade
// (WebSocket and the like) still goes through the ReverseProxy, which hijacks the connection.
// Contract: HTTP proxies, steps 5 and 7.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, ex *exchange) {
	if upgradeType(r.Header) != "" {
		// The ReverseProxy logs a broken body itself but not a read its timeout cancelled; the
		// deferred call also runs when it aborts the handler.
		defer func() {
			if ex.readErr != nil && ex.timedOut.Load() != notTimedOut {
				g.bodyCut(ex, ex.readErr)
			}
		}()
		g.proxy.ServeHTTP(w, r.WithContext(ex))
		return
	}
	informational := informationalWriter{w: w, stopped: !r.ProtoAtLeast(1, 1)}
	out := ex.outgoing(r, httptrace.WithClientTrace(ex, &httptrace.ClientTrace{Got1xxResponse: informational.write}))
	res, err := failover{g}.RoundTrip(out)
	informational.stop()
	if err != nil {
		g.proxyError(w, out, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Nothing was asked for: refused, as the ReverseProxy refuses a switch to another
		// protocol than the one asked for (it would take an unnamed one as asked).
		g.modifyResponse(res)
		res.Body.Close()
		g.proxyError(w, out, fmt.Errorf("backend tried to switch protocol %q when %q was requested", upgradeType(res.Header), ""))
		return
	}
	removeHopByHop(res.Header)
	g.modifyResponse(res)
	g.answer(w, r, ex, res)
}

// outgoing is the request to the exchange's worker under ctx: the client's method, headers
// (hop-by-hop ones removed; the map is new, the values are the client's), framing and the
// buffered body, aimed at the worker.
func (ex *exchange) outgoing(r *http.Request, ctx context.Context) *http.Request {
	header := make(http.Header, len(r.Header))
	for name, values := range r.Header {
		header[name] = values
	}
	removeHopByHop(header)
	// The gateway has the whole body already; an Expect: 100-continue was for this hop.
	delete(header, "Expect")
	if _, ok := header["User-Agent"]; !ok {
		header["User-Agent"] = []string{""} // else net/http would add Go's
	}
	out := (&http.Request{
		Method: r.Method, URL: &url.URL{}, Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		Header: header,
	}).WithContext(ctx)
	ex.aim(out)
	ex.attachBody(out)
	return out
}

// answer writes the worker's answer to the client: headers (announcing trailers), status, the
// body (flushed per write for a stream), then the trailers. A body that fails midway aborts the
// client's connection (http.ErrAbortHandler) when a server runs the handler, as the
// ReverseProxy does.
func (g *Gateway) answer(w http.ResponseWriter, r *http.Request, ex *exchange, res *http.Response) {
	header := w.Header()
	addHeaders(header, res.Header)
	if _, typed := res.Header["Content-Type"]; !typed {
		header["Content-Type"] = nil // net/http would sniff one from the body (contract: HTTP proxies, step 7)
	}
	announced := len(res.Trailer)
	if announced > 0 {
		names := make([]string, 0, announced)
		for name := range res.Trailer {
			names = append(names, name)
		}
		header.Add("Trailer", strings.Join(names, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if err := g.copyBody(w, ex, res); err != nil {
		res.Body.Close()
		if r.Context().Value(http.ServerContextKey) != nil {
			panic(http.ErrAbortHandler) // the server closes the connection
		}
		return
	}
	res.Body.Close() // now, so that res.Trailer is filled in
	if len(res.Trailer) == 0 {
		return
	}
	http.NewResponseController(w).Flush()
	for name, values := range res.Trailer {
		if len(res.Trailer) != announced {
			name = http.TrailerPrefix + name // trailers that were not announced
		}
		for _, v := range values {
			header.Add(name, v)
		}
	}
}

// copyBody copies the answer's body to the client through a pooled buffer, flushing after every
// write (and once before the first) when the answer is a stream, so each event arrives as the
// worker sends it; a body of known length goes through the server's buffer. A body cut short is
// logged (bodyCut).
func (g *Gateway) copyBody(w http.ResponseWriter, ex *exchange, res *http.Response) error {
	var flush func() error // nil unless the answer is a stream
	if res.ContentLength == -1 || isEventStream(res.Header.Get("Content-Type")) {
		flush = http.NewResponseController(w).Flush
		flush()
	}
	buf := g.proxy.BufferPool.Get()
	defer g.proxy.BufferPool.Put(buf)
	for {
		n, rerr := res.Body.Read(buf)
		if rerr != nil && rerr != io.EOF {
			g.bodyCut(ex, rerr)
		}
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if flush != nil {
				flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// bodyCut logs why the worker's body ended before its end, and keeps the reason for the access
// log: one of the gateway's timeouts (which cancel the try, contract: HTTP proxies, step 7), or
// the read's own error, logged as the ReverseProxy logs it. A client that left is not logged.
func (g *Gateway) bodyCut(ex *exchange, err error) {
	if ex.client.Err() != nil {
		return
	}
	var cut string
	switch ex.timedOut.Load() {
	case clientTimedOut:
		g.proxy.ErrorLog.Printf("the client did not take worker %s's answer within request_timeout_secs (%v)", ex.decision.WorkerURL, seconds(g.opts.RequestTimeout))
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
		g.proxy.ErrorLog.Printf("httputil: ReverseProxy read error during body copy: %v", err)
		ex.errorText = "stream cut: " + err.Error()
		return
	}
	g.proxy.ErrorLog.Printf("worker %s's stream was cut: it %s", ex.decision.WorkerURL, cut)
	ex.errorText = "stream cut: the worker " + cut
}

func isEventStream(contentType string) bool {
	if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream") {
		return false // the common case, without parsing
	}
	base, _, _ := mime.ParseMediaType(contentType)
	return base == "text/event-stream"
}

// informationalWriter passes a worker's 1xx answers (103 Early Hints and the like) on to the
// client until stop: a late one, after the try ended, is dropped, and so is every one to an
// HTTP/1.0 client, which must get none (RFC 9110, 15.2).
type informationalWriter struct {
	w       http.ResponseWriter
	mu      sync.Mutex
	stopped bool
}

func (i *informationalWriter) write(code int, header textproto.MIMEHeader) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return nil
	}
	h := i.w.Header()
	addHeaders(h, http.Header(header))
	i.w.WriteHeader(code)
	clear(h)
	return nil
}

func (i *informationalWriter) stop() {
	i.mu.Lock()
	i.stopped = true
	i.mu.Unlock()
}

// addHeaders appends every value of src to dst's (the ReverseProxy's copyHeader; the values are
// copied, not shared).
func addHeaders(dst, src http.Header) {
	for name, values := range src {
		dst[name] = append(dst[name], values...)
	}
}

// hopByHop are the headers that describe one connection, never forwarded (RFC 9110, 7.6.1, and
// the ReverseProxy's list).
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop deletes the hop-by-hop headers and those named in Connection.
func removeHopByHop(h http.Header) {
	for _, value := range h["Connection"] {
		for _, name := range strings.Split(value, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		delete(h, name)
	}
}

// upgradeType is the protocol a request or answer asks to switch to ("" for none): its Upgrade
// header, when Connection names "upgrade".
func upgradeType(h http.Header) string {
	for _, value := range h["Connection"] {
		for _, token := range strings.Split(value, ",") {
			if strings.EqualFold(textproto.TrimString(token), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}
