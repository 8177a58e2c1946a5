package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/gateway/httpcheck"
	"github.com/valyala/fasthttp"
	"golang.org/x/net/idna"
)

// exchange is one proxied request: its cancellation (when the client leaves, by a timeout, or by
// a shutdown past its bound), its current try's, and what the proxy step needs to route, retry,
// time and log it.
type exchange struct {
	g       *Gateway
	router  *core.Router
	stopped canceller // the request's: its hook cancels the current try
	try     canceller // the current try's: its hook closes the try's connection
	// left is set when the client closed its connection (contract: Release): its answer then
	// has nobody to go to. stopWatch ends the watch that sets it.
	left      atomic.Bool
	stopWatch func() bool
	decision  core.Decision
	// downsSeen is the gateway's count of workers gone down when the decision was taken.
	downsSeen uint64
	target    *target
	// request is the routing request, kept for a retry; tried lists the workers it was sent to
	// and outcome how the latest try ended (see failover).
	request core.Request
	tried   []uint32
	outcome core.Outcome
	readErr error
	// triedSpace holds tried without an allocation for up to its length of tries.
	triedSpace [4]uint32
	out        outgoing // the try's request to its worker
	rawPath    string
	start      time.Time

	// timer cancels the request when the worker is silent too long: before its response
	// headers (first-byte timeout), then while a read of its body waits (idle-stream timeout;
	// the writes to the client pause it), and at the latest at deadline (request_timeout_secs).
	timer    *time.Timer
	timedOut atomic.Int32 // notTimedOut, or which timeout cancelled the request
	// writing is set once the worker's answer has begun, except while a read of its body waits:
	// the gateway is then writing to the client, and the deadline passing then is the client's.
	writing   atomic.Bool
	idle      time.Duration
	deadline  time.Time
	answer    *fasthttp.Response       // the worker's answer: its head, and its body as a stream
	reply     *fasthttp.ResponseHeader // the client's answer's head, which takes the trailers
	upstream  answerBody               // the worker's answer body
	status    int
	sent      int64
	aborted   bool
	errorText string
	finished  atomic.Bool
	hijacking atomic.Int32 // notHijacked, or where the hijacked connection is (upgrade.go)
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
		ex.stopped.cancel(nil)
	}
	if reason != phaseTimedOut && ex.hijacking.CompareAndSwap(hijackPending, hijackAbandoned) {
		ex.g.finish(ex) // the hijack never ran
	}
}

// clientLeft is the watch's call when the client closes its connection: the request is
// cancelled, and its lease released as it ends.
func (ex *exchange) clientLeft() {
	ex.left.Store(true)
	ex.stopped.cancel(nil)
}

// arm sets the timer to the phase timeout d, or to the request's deadline if that comes first.
func (ex *exchange) arm(d time.Duration) { ex.timer.Reset(min(d, time.Until(ex.deadline))) }

// Read and Close make the exchange the answer's body stream, which the server copies to the
// client after the handler returns. The worker's first body byte marks the lease's first token
// (contract: Prefill load).
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
	if err == io.EOF {
		ex.trailersAtEnd()
	}
	if err != nil && err != io.EOF {
		ex.readErr = err
		ex.g.bodyCut(ex, err)
		ex.aborted = true
	}
	return n, err
}

// pause stops the idle timeout, which runs only while a read of the worker's body waits (Read):
// while the client is written to, whose pace is not the worker's, only the request's deadline
// runs.
func (ex *exchange) pause() { ex.timer.Reset(time.Until(ex.deadline)) }

// Close is the server's call once the answer's body was written, or could not be.
func (ex *exchange) Close() error {
	ex.g.finish(ex)
	return nil
}

// target is a worker URL split into what a forwarded request needs.
type target struct {
	addr       string // host:port to dial
	host       string // the Host header: the URL's host, its name in ASCII
	serverName string // for an https:// worker's certificate
	tls        bool
	pathPrefix string
}

func (g *Gateway) targetOf(workerURL string) (*target, error) {
	if t, ok := g.targets.lookup(workerURL); ok {
		return t, nil
	}
	u, err := parseWorkerURL(workerURL)
	if err != nil {
		return nil, err
	}
	t, err := newTarget(u)
	if err != nil {
		return nil, err
	}
	g.targets.store(workerURL, t, g.router.Workers())
	return t, nil
}

// targetCache holds the parsed targets of the members' URLs. A lookup takes no lock; a miss
// (a worker's first request) stores a new map holding only the current members' targets, so
// the workers removed since (the worker API) are forgotten and the cache never outgrows them.
type targetCache struct {
	mu      sync.Mutex
	targets atomic.Pointer[map[string]*target]
}

func (c *targetCache) lookup(workerURL string) (*target, bool) {
	if m := c.targets.Load(); m != nil {
		t, ok := (*m)[workerURL]
		return t, ok
	}
	return nil, false
}

func (c *targetCache) store(workerURL string, t *target, members []core.WorkerState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := map[string]*target{workerURL: t}
	if m := c.targets.Load(); m != nil {
		for _, s := range members {
			if known, ok := (*m)[s.URL]; ok {
				next[s.URL] = known
			}
		}
	}
	c.targets.Store(&next)
}

// newTarget reads a worker URL as net/http's Transport does: an internationalised name in its
// ASCII form (IDNA, RFC 5891), and without a port the scheme's default one.
func newTarget(u *url.URL) (*target, error) {
	name, err := hostASCII(u.Hostname())
	if err != nil {
		return nil, errors.New("the worker URL's host is not a valid name")
	}
	port := u.Port()
	host := name
	if strings.Contains(name, ":") {
		host = "[" + name + "]"
	}
	if port != "" {
		host += ":" + port
	} else if port = "80"; u.Scheme == "https" {
		port = "443"
	}
	return &target{addr: net.JoinHostPort(name, port), host: host, serverName: name, tls: u.Scheme == "https",
		pathPrefix: strings.TrimRight(u.EscapedPath(), "/")}, nil
}

// hostASCII is net/http's idnaASCII: a host already in ASCII (an IP address among them, which
// IDNA refuses) is kept as it is, any other is converted.
func hostASCII(host string) (string, error) {
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			return idna.Lookup.ToASCII(host)
		}
	}
	return host, nil
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
	_, err = newTarget(u)
	return err
}

// routingRequest reads a request's routing inputs as Router.RequestFromHeaders does for
// Router.route(headers=...) in Python: the first value of each routing header, its name
// compared without case.
func (g *Gateway) routingRequest(h *fasthttp.RequestHeader) core.Request {
	return g.router.RequestFromValues(func(i int) (string, bool) {
		if v := h.Peek(g.routingHeaders[i]); v != nil {
			return string(v), true
		}
		return "", false
	})
}

// handle checks and routes a request, then proxies it to the chosen worker. The server has read
// its body already, up to Options.MaxBodySize within Options.BodyTimeout (serverError answers
// the requests that break those bounds), so a client that trickles its body holds no load on any
// worker.
func (g *Gateway) handle(ctx *fasthttp.RequestCtx) {
	// A client that stops reading must not hold its lease past the request's bound (contract:
	// Deadlines and connections). Set by the handler, the deadline also makes the server flush
	// every answer at once, so none waits in its buffer behind a 1xx written on the connection.
	ctx.SetWriteDeadline(time.Now().Add(seconds(g.opts.RequestTimeout) + seconds(g.opts.BodyTimeout)))
	if r := httpcheck.Request(&ctx.Request.Header); r != nil {
		ctx.Error(r.Text, r.Status)
		ctx.SetConnectionClose() // after Error, which resets the response
		return
	}
	target := string(ctx.Request.Header.RequestURI())
	path, _, _ := splitTarget(target)
	if g.serveControl(ctx, path) {
		return
	}
	g.inflight.Add(1)
	ex := &exchange{g: g, router: g.router, outcome: core.OutcomeNeutral}
	defer g.recoverPanic(ctx, ex)
	if g.accessLog != nil {
		ex.start = time.Now()
	}
	ex.out.method = ctx.Method()
	ex.out.rawTarget, ex.rawPath = target, path
	if err := checkPath(ex.rawPath); err != nil {
		g.refuse(ctx, ex, fasthttp.StatusBadRequest, err.Error())
		return
	}
	ex.out.body = ctx.Request.Body()
	ex.request = g.routingRequest(&ctx.Request.Header)
	ex.request.PrefixBlocks = requestPrefixBlocks(&g.opts, ex.out.body)
	ex.downsSeen = g.waiting.downs.Load()
	ex.decision = g.router.Route(&ex.request)
	if ex.decision.Lease == 0 {
		g.refuse(ctx, ex, fasthttp.StatusServiceUnavailable, "no worker available")
		return
	}
	var err error
	if ex.target, err = g.targetOf(ex.decision.WorkerURL); err != nil {
		g.router.Release(ex.decision.Lease, false)
		g.writeError(ctx, ex, fasthttp.StatusBadGateway, "worker unreachable")
		ex.decision.Lease = 0 // released: finish must not
		g.finish(ex)
		return
	}
	ex.tried = append(ex.triedSpace[:0], ex.decision.WorkerID)
	if w, ok := ctx.Conn().(leaveWatcher); ok {
		ex.stopWatch = w.Watch(ex.clientLeft)
	}
	ex.idle = seconds(g.opts.IdleTimeout)
	ex.deadline = time.Now().Add(seconds(g.opts.RequestTimeout))
	ex.timer = time.AfterFunc(min(seconds(g.opts.FirstByteTimeout), seconds(g.opts.RequestTimeout)), ex.expire)
	g.forward(ctx, ex)
}

// leaveWatcher is what the proxy port's connections offer (package clientconn): a call when the
// client closes its connection while a request of it is served.
type leaveWatcher interface {
	Watch(left func()) (stop func() bool)
}

// finish ends a proxied request once: it releases the lease (the one place a proxied request's
// lease is released), stops its timer and its watch, and logs.
func (g *Gateway) finish(ex *exchange) {
	if ex.finished.Swap(true) {
		return
	}
	if ex.stopWatch != nil {
		ex.stopWatch()
	}
	if ex.timer != nil {
		ex.timer.Stop()
	}
	if ex.upstream != nil {
		ex.upstream.Close() // before the cancellation, which would close a connection it gives back
	}
	ex.stopped.cancel(nil)
	if ex.answer != nil {
		fasthttp.ReleaseResponse(ex.answer)
		ex.answer = nil
	}
	if ex.decision.Lease != 0 {
		g.health.Finish(ex.decision.Lease, ex.finalOutcome())
	}
	if g.accessLog != nil {
		g.logRequest(ex)
	}
	g.inflight.Add(-1)
}

// recoverPanic keeps a panic in the handler from ending the process (the gateway runs inside the
// user's): it is logged, the request ended, and the client's connection closed without an
// answer, as net/http's server does.
func (g *Gateway) recoverPanic(ctx *fasthttp.RequestCtx, ex *exchange) {
	p := recover()
	if p == nil {
		return
	}
	g.errorLog.Printf("panic serving %s: %v", ctx.RemoteAddr(), p)
	ex.aborted = true
	closeWithoutAnswer(ctx)
	g.finish(ex)
}

// closeWithoutAnswer makes the server close the client's connection and write nothing.
func closeWithoutAnswer(ctx *fasthttp.RequestCtx) {
	ctx.Response.Reset()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// tooLarge is the text of a 413, naming the option the body broke.
func (g *Gateway) tooLarge() string {
	return "request body is larger than max_body_size (" + itoa(g.opts.MaxBodySize) + " bytes)"
}

// refuse answers a request that is not proxied, and ends it. A refusal before the request was
// routed closes the connection, as it did when the body could be left unread.
func (g *Gateway) refuse(ctx *fasthttp.RequestCtx, ex *exchange, status int, text string) {
	g.writeError(ctx, ex, status, text)
	if status != fasthttp.StatusServiceUnavailable && status != fasthttp.StatusBadGateway {
		ctx.SetConnectionClose()
	}
	g.finish(ex)
}

// serverError answers a request the server could not read whole (its ErrorHandler) as net/http
// answers it (package httpcheck), the bounds of the gateway's own options named: a body over
// max_body_size (413) or one that did not arrive within body_timeout (408), as JSON; a header
// that did not arrive closes the connection without an answer.
func (g *Gateway) serverError(ctx *fasthttp.RequestCtx, err error) {
	status, text, silent := httpcheck.ParseError(err)
	switch {
	case silent:
		ctx.Conn().Close() // before fasthttp writes an answer of its own
		return
	case status == fasthttp.StatusRequestEntityTooLarge:
		text = g.tooLarge()
	case status == fasthttp.StatusRequestTimeout:
		text = "request body did not arrive within body_timeout (" + seconds(g.opts.BodyTimeout).String() + ")"
	default:
		ctx.Error(text, status)
		ctx.SetConnectionClose() // after Error, which resets the response
		return
	}
	g.inflight.Add(1)
	ex := &exchange{g: g, router: g.router, outcome: core.OutcomeNeutral, start: time.Now()}
	ex.out.method = ctx.Method()
	ex.rawPath, _, _ = splitTarget(string(ctx.Request.Header.RequestURI()))
	g.refuse(ctx, ex, status, text)
	ctx.SetConnectionClose()
}

type errorBody struct {
	Error  string `json:"error"`
	Branch string `json:"branch,omitempty"`
	Worker string `json:"worker,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// writeError writes a JSON error body. It names the branch of a routed request, and the
// worker and the error only with Options.ExposeRoutingHeaders.
func (g *Gateway) writeError(ctx *fasthttp.RequestCtx, ex *exchange, status int, text string) {
	ex.status = status
	body := errorBody{Error: text}
	if status == fasthttp.StatusServiceUnavailable || ex.decision.Lease != 0 {
		body.Branch = ex.decision.Branch.String()
	}
	res := &ctx.Response
	res.Reset()
	if g.opts.ExposeRoutingHeaders && ex.decision.WorkerURL != "" {
		body.Worker, body.Detail = ex.decision.WorkerURL, ex.errorText
		res.Header.Set(HeaderWorker, ex.decision.WorkerURL)
		res.Header.Set(HeaderBranch, ex.decision.Branch.String())
	}
	text2, _ := json.Marshal(body)
	res.SetStatusCode(status)
	res.Header.SetContentType("application/json")
	res.SetBody(text2)
}

func (g *Gateway) logRequest(ex *exchange) {
	attrs := []slog.Attr{
		slog.String("method", string(ex.out.method)),
		slog.String("path", ex.rawPath),
		slog.Int("status", ex.status),
		slog.Float64("duration_ms", float64(time.Since(ex.start).Microseconds())/1000),
		slog.Int64("bytes", ex.sent),
	}
	if ex.decision.WorkerURL != "" || ex.status == fasthttp.StatusServiceUnavailable {
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

// serveControl answers the probes on the proxy port, and the worker API when it is served there
// (through net/http's handlers: neither is on the hot path); it reports whether the request, of
// the raw path given, was one of them.
func (g *Gateway) serveControl(ctx *fasthttp.RequestCtx, path string) bool {
	if strings.IndexByte(path, '%') >= 0 {
		path, _ = url.PathUnescape(path)
	}
	if !isProbePath(path) && !(g.apiOnProxyPort && isAPIPath(path)) {
		return false
	}
	g.controlHandler(ctx)
	return true
}

func (g *Gateway) serveControlHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.control.probe(w, r) {
		g.control.serveAPI(w, r)
	}
}

// routingHeadersOf lists the canonical forms of the headers that carry routing inputs for
// router, in the order of Router.RoutingHeaderNames.
func routingHeadersOf(router *core.Router) []string {
	names := router.RoutingHeaderNames()
	for i, h := range names {
		names[i] = http.CanonicalHeaderKey(h)
	}
	return names
}
