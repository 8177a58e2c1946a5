package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bounded-router/bounded-router/core"
)

// exchange is one proxied request: the context the request to the worker runs under (the
// client's, cancellable by the gateway) and what the hooks of the ReverseProxy need.
type exchange struct {
	context.Context
	router   *core.Router
	cancel   context.CancelFunc
	client   context.Context // the client connection's context: done when the client left
	decision core.Decision
	target   *target
	// request is the routing request, kept for a retry; tried lists the workers it was sent to
	// and outcome how the latest try ended (see failover).
	request core.Request
	tried   []uint32
	outcome core.Outcome
	readErr error
	// triedSpace holds tried without an allocation for up to its length of tries.
	triedSpace [4]uint32
	rawPath    string
	rawQuery   string
	hasQuery   bool
	body       []byte
	// firstBody reads body to the first worker without allocating a reader; getBody makes the
	// others.
	firstBody bytes.Reader
	start     time.Time

	// timer cancels the request when the worker is silent too long: before its response
	// headers (first-byte timeout), then while a read of its body waits (idle-stream timeout;
	// the writes to the client pause it), and at the latest at deadline (request_timeout_secs).
	// One timer for the three saves the context.WithTimeout (a second timer and its
	// allocations) on every request.
	timer    *time.Timer
	timedOut atomic.Int32 // notTimedOut, or which timeout cancelled the request
	// writing is set once the worker's answer has begun, except while a read of its body waits:
	// the gateway is then writing to the client, and the deadline passing then is the client's.
	writing   atomic.Bool
	idle      time.Duration
	deadline  time.Time
	upstream  io.ReadCloser // the worker's response body
	status    int
	sent      int64
	aborted   bool
	errorText string
}

// exchangeOf finds the exchange of a request to a worker.
func exchangeOf(ctx context.Context) *exchange {
	if ex, ok := ctx.(*exchange); ok {
		return ex
	}
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

type exchangeKey struct{}

func (ex *exchange) Value(key any) any {
	if key == (exchangeKey{}) {
		return ex
	}
	return ex.Context.Value(key)
}

// Which timeout cancelled a request (exchange.timedOut).
const (
	notTimedOut     = iota
	phaseTimedOut   // first_byte_timeout or idle_timeout
	requestTimedOut // request_timeout_secs, while the gateway waited for the worker
	clientTimedOut  // request_timeout_secs, while the gateway wrote the answer to the client
)

func (ex *exchange) expire() {
	reason := int32(phaseTimedOut)
	switch {
	case time.Now().Before(ex.deadline):
	case ex.writing.Load():
		reason = clientTimedOut
	default:
		reason = requestTimedOut
	}
	// The timer fires again on every arm or pause once the deadline has passed: the first
	// reason is the one that cut the request.
	if ex.timedOut.CompareAndSwap(notTimedOut, reason) {
		ex.cancel()
	}
}

// arm sets the timer to the phase timeout d, or to the request's deadline if that comes first.
func (ex *exchange) arm(d time.Duration) { ex.timer.Reset(min(d, time.Until(ex.deadline))) }

// Read and Close make the exchange the response body the ReverseProxy copies to the client.
// The worker's first body byte marks the lease's first token (contract: Prefill load).
func (ex *exchange) Read(p []byte) (int, error) {
	ex.arm(ex.idle)
	ex.writing.Store(false)
	n, err := ex.upstream.Read(p)
	ex.writing.Store(true)
	ex.pause()
	if n > 0 && ex.sent == 0 {
		ex.router.FirstToken(ex.decision.Lease)
	}
	ex.sent += int64(n)
	if err != nil && err != io.EOF {
		ex.readErr = err
	}
	return n, err
}

// pause stops the idle timeout, which runs only while a read of the worker's body waits (Read):
// while the client is written to, whose pace is not the worker's, only the request's deadline
// runs, on both proxy steps.
func (ex *exchange) pause() { ex.timer.Reset(time.Until(ex.deadline)) }

func (ex *exchange) Close() error { return ex.upstream.Close() }

// target is a worker URL split into what a forwarded request needs.
type target struct {
	scheme, host, pathPrefix string
}

func (g *Gateway) targetOf(workerURL string) (*target, error) {
	if t, ok := g.targets.Load(workerURL); ok {
		return t.(*target), nil
	}
	u, err := parseWorkerURL(workerURL)
	if err != nil {
		return nil, err
	}
	t := &target{scheme: u.Scheme, host: u.Host, pathPrefix: strings.TrimRight(u.EscapedPath(), "/")}
	g.targets.Store(workerURL, t)
	return t, nil
}

// parseWorkerURL reads a worker URL the gateway can forward to: http:// or https:// with a host.
func parseWorkerURL(workerURL string) (*url.URL, error) {
	u, err := url.Parse(workerURL)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, errors.New("the worker URL is not an http:// or https:// URL with a host")
	}
	return u, nil
}

// checkWorkerURL is the worker API's rule for a new worker: parseWorkerURL's, written in the
// form the gateway forwards to (lowercase scheme, no user info, query or fragment).
func checkWorkerURL(workerURL string) error {
	u, err := parseWorkerURL(workerURL)
	switch {
	case err != nil:
		return err
	case !strings.HasPrefix(workerURL, u.Scheme+"://"):
		return errors.New("the scheme must be written in lowercase, http:// or https://")
	case u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return errors.New("a worker URL has no user info, query or fragment")
	}
	return nil
}

// routingHeadersOf lists the canonical forms (http.Header's keys) of the headers that carry
// routing inputs for router, in the order of Router.RoutingHeaderNames.
func routingHeadersOf(router *core.Router) []string {
	names := router.RoutingHeaderNames()
	for i, h := range names {
		names[i] = http.CanonicalHeaderKey(h)
	}
	return names
}

// routingRequest reads a request's routing inputs as Router.RequestFromHeaders does for
// Router.route(headers=...) in Python: the first value of each routing header, looked up in
// the headers the server has parsed.
func (g *Gateway) routingRequest(h http.Header) core.Request {
	return g.router.RequestFromValues(func(i int) (string, bool) {
		if v := h[g.routingHeaders[i]]; len(v) > 0 {
			return v[0], true
		}
		return "", false
	})
}

// ServeHTTP checks, reads and routes a request, then proxies it to the chosen worker.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.inflight.Add(1)
	defer g.inflight.Add(-1)
	if g.control.probe(w, r) {
		return
	}
	if g.apiOnProxyPort && isAPIPath(r.URL.Path) {
		g.control.serveAPI(w, r)
		return
	}
	ex := &exchange{router: g.router, client: r.Context(), outcome: core.OutcomeNeutral}
	if g.accessLog != nil {
		ex.start = time.Now()
	}
	ex.rawPath, ex.rawQuery, ex.hasQuery = splitTarget(r.RequestURI)
	if err := checkPath(ex.rawPath); err != nil {
		g.refuse(w, r, ex, http.StatusBadRequest, err.Error())
		return
	}
	if r.ContentLength > g.opts.MaxBodySize {
		g.refuse(w, r, ex, http.StatusRequestEntityTooLarge, g.tooLarge())
		return
	}
	if status, text := g.readBody(w, r, ex); status != 0 {
		g.refuse(w, r, ex, status, text)
		return
	}
	ex.request = g.routingRequest(r.Header)
	ex.request.PrefixBlocks = requestPrefixBlocks(&g.opts, ex.body)
	ex.decision = g.router.Route(&ex.request)
	if ex.decision.Lease == 0 {
		g.refuse(w, r, ex, http.StatusServiceUnavailable, "no worker available")
		return
	}
	var err error
	if ex.target, err = g.targetOf(ex.decision.WorkerURL); err != nil {
		g.router.Release(ex.decision.Lease, false)
		g.refuse(w, r, ex, http.StatusBadGateway, "worker unreachable")
		return
	}
	ex.tried = append(ex.triedSpace[:0], ex.decision.WorkerID)
	ex.Context, ex.cancel = context.WithCancel(r.Context())
	ex.idle = seconds(g.opts.IdleTimeout)
	ex.deadline = time.Now().Add(seconds(g.opts.RequestTimeout))
	ex.timer = time.AfterFunc(min(seconds(g.opts.FirstByteTimeout), seconds(g.opts.RequestTimeout)), ex.expire)
	defer g.finish(r, ex)
	g.forward(w, r, ex)
}

// finish ends a proxied request, also when the ReverseProxy aborts it with a panic: it
// releases the lease (the one place a proxied request's lease is released) and logs.
func (g *Gateway) finish(r *http.Request, ex *exchange) {
	p := recover()
	ex.timer.Stop()
	ex.cancel()
	g.health.Finish(ex.decision.Lease, ex.finalOutcome())
	if p != nil {
		ex.aborted = true
	}
	if g.accessLog != nil {
		g.logRequest(r, ex)
	}
	if p != nil {
		panic(p) // http.ErrAbortHandler: the server closes the client connection
	}
}

// readBody reads the whole request body into ex.body; on failure it returns the status to
// answer and why.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, ex *exchange) (int, string) {
	if r.Body == nil || r.Body == http.NoBody {
		return 0, ""
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(seconds(g.opts.BodyTimeout)))
	defer rc.SetReadDeadline(time.Time{})
	var err error
	if r.ContentLength > 0 {
		ex.body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, ex.body)
	} else {
		ex.body, err = readUnknownLength(http.MaxBytesReader(w, r.Body, g.opts.MaxBodySize))
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, g.tooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout, "request body did not arrive within body_timeout (" + seconds(g.opts.BodyTimeout).String() + ")"
	default:
		return http.StatusBadRequest, "the request body could not be read"
	}
}

// readUnknownLength reads a body sent without Content-Length (chunked) in pieces that double
// from 4 KiB to 256 KiB, joined once at the end: unlike io.ReadAll, which copies the whole body
// each time its buffer doubles, it leaves no chain of copies behind, which is what bounds the
// memory of several large uploads refused at the limit.
func readUnknownLength(r io.Reader) ([]byte, error) {
	var pieces [][]byte
	total, size := 0, 4<<10
	for {
		piece := make([]byte, size)
		n, err := fill(r, piece)
		total += n
		if n > 0 {
			pieces = append(pieces, piece[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err // io.ErrUnexpectedEOF too: the client left in the middle of the body
		}
		size = min(2*size, 256<<10)
	}
	if len(pieces) == 1 {
		return pieces[0], nil
	}
	body := make([]byte, 0, total)
	for _, p := range pieces {
		body = append(body, p...)
	}
	return body, nil
}

// fill reads into p until it is full (nil error) or r ends (io.EOF) or fails.
func fill(r io.Reader, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// rewrite turns the client's request for an upgrade (the one kind forward leaves to the
// ReverseProxy) into the worker's: the worker's scheme and host, the raw
// path and query, the buffered body, and the client's headers as the ReverseProxy left them
// (hop-by-hop ones removed) with the forwarding headers it strips put back as the client sent
// them: the proxy adds nothing.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	ex := exchangeOf(pr.In.Context())
	out := pr.Out
	ex.aim(out)
	for _, name := range [...]string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := pr.In.Header[name]; ok {
			out.Header[name] = v
		}
	}
	// The gateway has the whole body already; an Expect: 100-continue was for this hop. TE is
	// hop-by-hop (ReverseProxy keeps "TE: trailers" for gRPC, which workers do not speak).
	out.Header.Del("Expect")
	out.Header.Del("Te")
	ex.attachBody(out)
}

// attachBody gives a request to the worker the buffered body (none when it is empty), with its
// length and without the client's chunked framing or trailers, on both proxy steps (contract:
// HTTP proxies, step 5): a trailer named Host would reach the worker, one named Content-Length
// would fail the write.
func (ex *exchange) attachBody(out *http.Request) {
	out.TransferEncoding, out.Trailer = nil, nil
	out.ContentLength = int64(len(ex.body))
	if len(ex.body) == 0 {
		out.Body, out.GetBody = nil, nil
		return
	}
	// A NopCloser around a *bytes.Reader: net/http knows it does not block and writes the
	// headers and the body in one write (isKnownInMemoryReader); any other type costs one
	// more write per request.
	ex.firstBody.Reset(ex.body)
	out.Body = io.NopCloser(&ex.firstBody)
	out.GetBody = ex.getBody // lets the transport retry on a keep-alive connection the worker closed
}

// aim points a request to the worker at the exchange's target: its scheme, host and path
// prefix, then the client's raw path and query.
func (ex *exchange) aim(out *http.Request) {
	t := ex.target
	out.URL.Scheme, out.URL.Host, out.Host = t.scheme, t.host, ""
	if path := t.pathPrefix + ex.rawPath; !strings.HasPrefix(path, "//") {
		out.URL.Opaque = path // written on the request line as it is
	} else {
		// An opaque "//..." would be read as a scheme-relative URL.
		out.URL.Opaque, out.URL.RawPath = "", path
		out.URL.Path, _ = url.PathUnescape(path)
	}
	out.URL.RawQuery, out.URL.ForceQuery = ex.rawQuery, ex.hasQuery && ex.rawQuery == ""
}

func (ex *exchange) getBody() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(ex.body)), nil
}

// modifyResponse notes the worker's status, adds the routing headers when exposed and puts
// the exchange between the worker's body and the client, for the idle-stream timeout.
func (g *Gateway) modifyResponse(res *http.Response) error {
	ex := exchangeOf(res.Request.Context())
	ex.status = res.StatusCode
	if g.opts.ExposeRoutingHeaders {
		res.Header.Set(HeaderWorker, ex.decision.WorkerURL)
		res.Header.Set(HeaderBranch, ex.decision.Branch.String())
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection is the client's and the worker's to close, within the deadline.
		ex.timer.Reset(time.Until(ex.deadline))
		return nil
	}
	ex.upstream, res.Body = res.Body, ex
	ex.writing.Store(true)
	ex.pause() // the headers go to the client; each read of the body arms the idle timeout
	return nil
}

// proxyError answers a request the worker did not answer: 504 past the first-byte timeout,
// 502 otherwise; nothing when the client has left.
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeOf(r.Context())
	ex.errorText = err.Error()
	switch {
	case ex.client.Err() != nil:
		ex.status = 499 // the client closed the connection; nobody to answer
	case ex.timedOut.Load() == requestTimedOut:
		g.writeError(w, ex, http.StatusGatewayTimeout, "worker sent no response within request_timeout_secs ("+seconds(g.opts.RequestTimeout).String()+")")
	case ex.timedOut.Load() == phaseTimedOut:
		g.writeError(w, ex, http.StatusGatewayTimeout, "worker sent no response within first_byte_timeout ("+seconds(g.opts.FirstByteTimeout).String()+")")
	default:
		g.writeError(w, ex, http.StatusBadGateway, "worker did not answer")
	}
}

// tooLarge is the text of a 413, naming the option the body broke.
func (g *Gateway) tooLarge() string {
	return "request body is larger than max_body_size (" + itoa(g.opts.MaxBodySize) + " bytes)"
}

// refuse answers a request that is not proxied.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, ex *exchange, status int, text string) {
	// Before a 503 or 502 the body was read whole; before any other refusal it may be unread:
	// close rather than wait for it, once what is left is read (drainRefused).
	unread := status != http.StatusServiceUnavailable && status != http.StatusBadGateway
	if unread {
		w.Header().Set("Connection", "close")
	}
	g.writeError(w, ex, status, text)
	if unread {
		g.drainRefused(w, r)
	}
	if g.accessLog != nil {
		g.logRequest(r, ex)
	}
}

// What is left of a refused body is read before the close, up to net/http's own bound
// (maxPostHandlerReadBytes, past which it gives up on a clean close too) and for at most as long
// as net/http waits before it closes.
const (
	maxDrain     = 256 << 10
	refusalDrain = 500 * time.Millisecond
)

// drainRefused reads what is left of a refused request's body after its answer, so that the
// connection closes cleanly: closed with bytes unread it is reset, and a reset can lose the
// answer; the deadline cuts a client that stopped sending. net/http reads it itself, except
// when the request asked to close (Connection: close, HTTP/1.0).
func (g *Gateway) drainRefused(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(min(seconds(g.opts.BodyTimeout), refusalDrain)))
	if r.ContentLength > maxDrain {
		return
	}
	rc.Flush()
	io.CopyN(io.Discard, r.Body, maxDrain)
}

type errorBody struct {
	Error  string `json:"error"`
	Branch string `json:"branch,omitempty"`
	Worker string `json:"worker,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// writeError writes a JSON error body. It names the branch of a routed request, and the
// worker and the error only with Options.ExposeRoutingHeaders.
func (g *Gateway) writeError(w http.ResponseWriter, ex *exchange, status int, text string) {
	ex.status = status
	body := errorBody{Error: text}
	if status == http.StatusServiceUnavailable || ex.decision.Lease != 0 {
		body.Branch = ex.decision.Branch.String()
	}
	if g.opts.ExposeRoutingHeaders && ex.decision.WorkerURL != "" {
		body.Worker, body.Detail = ex.decision.WorkerURL, ex.errorText
		w.Header().Set(HeaderWorker, ex.decision.WorkerURL)
		w.Header().Set(HeaderBranch, ex.decision.Branch.String())
	}
	text2, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", itoa(int64(len(text2))))
	w.WriteHeader(status)
	w.Write(text2)
}

func (g *Gateway) logRequest(r *http.Request, ex *exchange) {
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", ex.rawPath),
		slog.Int("status", ex.status),
		slog.Float64("duration_ms", float64(time.Since(ex.start).Microseconds())/1000),
		slog.Int64("bytes", ex.sent),
	}
	if ex.decision.WorkerURL != "" || ex.status == http.StatusServiceUnavailable {
		attrs = append(attrs, slog.String("branch", ex.decision.Branch.String()), slog.String("worker", ex.decision.WorkerURL))
	}
	if ex.aborted {
		attrs = append(attrs, slog.Bool("aborted", true))
	}
	if ex.errorText != "" {
		attrs = append(attrs, slog.String("error", ex.errorText))
	}
	g.accessLog.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
