// Package gateway is bounded-router's HTTP gateway: a reverse proxy (valyala/fasthttp's server,
// the proxy step of forward.go and the transport of upstream.go) that routes every request
// through a core.Router and forwards it to the chosen worker, streaming the answer back.
//
// Per request: the server reads the body whole, up to Options.MaxBodySize (413 above) within
// Options.BodyTimeout (408 past it); then the request-target must pass the path rule (see
// checkPath; else 400); only then is the request routed from its headers, as
// core.RequestFromHeaders reads them, and a lease taken. A client that trickles its body
// therefore holds no load on any worker. The lease is released exactly once, when the answer has
// been streamed to the client, when the worker fails, or when the client disconnects, in any
// phase (package clientconn notices that); the request to the worker is cancelled with it.
//
// The proxy forwards the client's own headers minus the hop-by-hop ones (and those named in
// Connection) and adds nothing: no X-Forwarded-For, no cookies (there is no cookie jar), no
// Expect. The raw path and query are forwarded byte for byte. Streamed answers (server-sent
// events, chunked bodies) are flushed per write, so each event arrives as the worker sends it.
// The proxy port never answers /metrics; the router's Prometheus metrics are served on a
// separate listener, the admin listener (net/http's server), when Options.MetricsPort is set.
// SMG's worker API (workers_api.go) is served there too, and on the proxy port only when asked for.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/gateway/clientconn"
	"github.com/bounded-router/bounded-router/gateway/httpcheck"
	"github.com/bounded-router/bounded-router/gateway/processors"
	"github.com/bounded-router/bounded-router/health"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Header names of the routing details added to responses with Options.ExposeRoutingHeaders.
const (
	HeaderWorker = "X-Bounded-Router-Worker"
	HeaderBranch = "X-Bounded-Router-Branch"
)

// Gateway is a running proxy in front of a router's workers.
type Gateway struct {
	router *core.Router
	// health finishes every lease with its request's outcome (contract: Worker failures).
	health *health.Monitor
	opts   Options
	// maxRetries is retry_max_retries, 0 with disable_retries; retries counts them by reason.
	maxRetries int
	retries    [numRetryReasons]atomic.Uint64
	// waiting holds the tries waiting for their worker's headers; unsubscribe ends its
	// subscription to the monitor when the gateway stops.
	waiting     waiting
	unsubscribe func()
	// routingHeaders are the headers read for routing inputs, fixed with the router.
	routingHeaders []string
	transport      *upstream
	server         *fasthttp.Server
	listener       net.Listener
	metrics        *http.Server // nil without a metrics listener
	metricsLn      net.Listener
	errorLog       *log.Logger
	accessLog      *slog.Logger // nil when access logging is off
	control        *controlPlane
	// controlHandler serves the probes and the worker API on the proxy port, through net/http.
	controlHandler fasthttp.RequestHandler
	// apiOnProxyPort serves the worker API on the proxy port (keys set, or asked for).
	apiOnProxyPort bool
	targets        targetCache
	// inflight counts requests from their routing to their end; shutdown waits for it to reach 0.
	inflight atomic.Int64
	serving  sync.WaitGroup
	stopOnce sync.Once
	// releaseProcessors ends this gateway's share in sizing the runtime's processors to the
	// load (package processors).
	releaseProcessors func()
	stopErr           error
}

// New builds a gateway for the monitor's router with options (validated; zero fields take their
// defaults) without listening. Start builds one and serves it.
func New(monitor *health.Monitor, opts Options) (*Gateway, error) {
	if monitor == nil {
		return nil, errors.New("gateway: router must not be nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	router := monitor.Router()
	g := &Gateway{router: router, health: monitor, opts: opts, routingHeaders: routingHeadersOf(router), maxRetries: *opts.RetryMaxRetries,
		control:  newControlPlane(router, opts.ControlPlaneAPIKeys, seconds(opts.BodyTimeout)),
		errorLog: log.New(os.Stderr, "bounded-router gateway: ", log.LstdFlags)}
	if opts.DisableRetries {
		g.maxRetries = 0
	}
	g.unsubscribe = monitor.Subscribe(g.waiting.workerChanged)
	g.apiOnProxyPort = len(opts.ControlPlaneAPIKeys) > 0 || opts.WorkerAPIOnProxyPort
	if opts.WorkerAPIOnProxyPort && len(opts.ControlPlaneAPIKeys) == 0 {
		g.control.log.Warn("the worker API is open on the proxy port: anyone who reaches it can add and remove workers (set control_plane_api_keys to require a key)")
	}
	g.controlHandler = fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(g.serveControlHTTP))
	g.transport = &upstream{dial: (&net.Dialer{Timeout: seconds(opts.ConnectTimeout), KeepAlive: 30 * time.Second}).DialContext,
		maxIdle: opts.MaxIdleConnsPerHost, idleTimeout: seconds(opts.WorkerIdleTimeout)}
	if opts.MaxConnsPerHost > 0 {
		g.transport.slots = &connSlots{max: opts.MaxConnsPerHost}
	}
	if opts.AccessLog {
		g.accessLog = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	g.server = &fasthttp.Server{
		Handler:      g.handle,
		ErrorHandler: g.serverError,
		// The header must arrive within read_header_timeout; once it has, the body within
		// body_timeout, and up to max_body_size.
		ReadTimeout: seconds(opts.ReadHeaderTimeout),
		HeaderReceived: func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
			return fasthttp.RequestConfig{ReadTimeout: seconds(opts.BodyTimeout)}
		},
		MaxRequestBodySize: int(min(opts.MaxBodySize, int64(math.MaxInt32))),
		IdleTimeout:        seconds(opts.KeepAliveTimeout),
		CloseOnShutdown:    true,
		Logger:             serverLog{g.errorLog},
	}
	// net/http's request rules, which the contract's HTTP edge was audited on.
	httpcheck.Configure(g.server, opts.MaxHeaderBytes)
	return g, nil
}

// Start builds a gateway and serves it on opts.Host:opts.Port (and the metrics listener when
// opts.MetricsPort is set) until Shutdown.
func Start(monitor *health.Monitor, opts Options) (*Gateway, error) {
	g, err := New(monitor, opts)
	if err != nil {
		return nil, err
	}
	if err := g.listen(); err != nil {
		return nil, err
	}
	return g, nil
}

// listen serves a gateway built with New.
func (g *Gateway) listen() error {
	tcp, err := net.Listen("tcp", net.JoinHostPort(g.opts.Host, strconv.Itoa(g.opts.Port)))
	if err != nil {
		return fmt.Errorf("gateway: cannot listen on %s port %d: %w", g.opts.Host, g.opts.Port, err)
	}
	// The proxy port's connections tell when their client leaves (contract: Release) and close
	// without losing the answer they were sent.
	if g.listener, err = clientconn.Listen(tcp, clientconn.Options{}); err != nil {
		tcp.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	if g.opts.MetricsPort != nil {
		g.metricsLn, err = net.Listen("tcp", net.JoinHostPort(g.opts.Host, strconv.Itoa(*g.opts.MetricsPort)))
		if err != nil {
			g.listener.Close()
			return fmt.Errorf("gateway: cannot listen for metrics on %s port %d: %w", g.opts.Host, *g.opts.MetricsPort, err)
		}
		g.metrics = &http.Server{Handler: g.adminHandler(), ReadHeaderTimeout: seconds(g.opts.ReadHeaderTimeout), ErrorLog: g.errorLog}
		g.goServe(func() { g.metrics.Serve(g.metricsLn) })
	}
	g.goServe(func() { g.server.Serve(g.listener) })
	g.releaseProcessors = processors.Follow()
	return nil
}

// goServe runs a server until it stops.
func (g *Gateway) goServe(serve func()) {
	g.serving.Add(1)
	go func() {
		defer g.serving.Done()
		serve()
	}()
}

// Addr is the proxy's listening address (host:port), empty for a gateway that was not started.
func (g *Gateway) Addr() string { return addrOf(g.listener) }

// MetricsAddr is the metrics listener's address, empty without one.
func (g *Gateway) MetricsAddr() string { return addrOf(g.metricsLn) }

func addrOf(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// InFlight is the number of requests the gateway is handling.
func (g *Gateway) InFlight() int64 { return g.inflight.Load() }

// Shutdown stops accepting connections, lets in-flight requests finish for up to timeout
// (Options.ShutdownTimeout when timeout is 0), then closes the remaining connections, which
// cancels their requests. It returns once every request has ended and released its lease.
// Calling it again returns the first call's result.
func (g *Gateway) Shutdown(timeout time.Duration) error {
	g.stopOnce.Do(func() { g.stopErr = g.shutdown(timeout) })
	return g.stopErr
}

func (g *Gateway) shutdown(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = seconds(g.opts.ShutdownTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	defer g.unsubscribe()
	drained := g.server.ShutdownWithContext(ctx)
	// fasthttp's drain does not count hijacked connections (upgrades, HTTP/1.0 streams).
	for drained == nil && g.inflight.Load() > 0 {
		select {
		case <-ctx.Done():
			drained = ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if g.listener != nil {
		g.listener.Close() // also when the server had not taken it yet, which its shutdown does not see
	}
	if watched, ok := g.listener.(*clientconn.Listener); ok && drained != nil {
		watched.CutAll() // the requests still running end as if their clients had left
	}
	if g.metrics != nil {
		g.metrics.Close()
	}
	g.serving.Wait()
	if g.releaseProcessors != nil {
		g.releaseProcessors()
	}
	// Requests cut return as soon as their cancelled tries do.
	for deadline := time.Now().Add(5 * time.Second); g.inflight.Load() > 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway: %d requests still running 5 s after they were cut", g.inflight.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.transport.CloseIdleConnections()
	if drained != nil {
		return fmt.Errorf("gateway: in-flight requests did not finish within %v and were cut: %w", timeout, drained)
	}
	return nil
}

// serverLog is fasthttp's logger: it drops the server's report of a connection that ended in
// error, since a client's request cannot fill the gateway's log (a refusal is answered, a cut
// logged by the gateway itself), and passes on the rest.
type serverLog struct{ *log.Logger }

func (l serverLog) Printf(format string, args ...any) {
	if !strings.HasPrefix(format, "error when serving connection") {
		l.Logger.Printf(format, args...)
	}
}
