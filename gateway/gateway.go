// Package gateway is bounded-router's HTTP gateway: a reverse proxy (net/http's server, the
// proxy step of forward.go and the transport of upstream.go; httputil.ReverseProxy for
// upgrades) that routes every request through a core.Router and forwards it to the chosen
// worker, streaming the answer back.
//
// Per request: the request-target must pass the path rule (see checkPath; else 400); the
// body is read whole, up to Options.MaxBodySize (413 above) within Options.BodyTimeout
// (408 past it); only then is the request routed from its headers, as core.RequestFromHeaders
// reads them, and a lease taken. A client that trickles its body therefore holds no load on
// any worker. The lease is released exactly once, when the answer has been streamed to the
// client, when the worker fails, or when the client disconnects, in any phase; the request to
// the worker is cancelled with it.
//
// The proxy forwards the client's own headers minus the hop-by-hop ones (and those named in
// Connection) and adds nothing: no X-Forwarded-For, no cookies (there is no cookie jar), no
// Expect. The raw path and query are forwarded byte for byte. Streamed answers (server-sent
// events, chunked bodies) are flushed per write, so each event arrives as the worker sends it.
// The proxy port never answers /metrics; the router's Prometheus metrics are served on a
// separate listener, the admin listener, when Options.MetricsPort is set. SMG's worker API
// (workers_api.go) is served there too, and on the proxy port only when asked for.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
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
	proxy          *httputil.ReverseProxy
	server         *http.Server
	listener       net.Listener
	metrics        *http.Server // nil without a metrics listener
	metricsLn      net.Listener
	accessLog      *slog.Logger // nil when access logging is off
	control        *controlPlane
	// apiOnProxyPort serves the worker API on the proxy port (keys set, or asked for).
	apiOnProxyPort bool
	targets        sync.Map // worker URL -> *target
	// inflight counts requests inside ServeHTTP; shutdown waits for it to reach 0.
	inflight atomic.Int64
	serving  sync.WaitGroup
	stopOnce sync.Once
	stopErr  error
}

// New builds a gateway for the monitor's router with options (validated; zero fields take their
// defaults) without listening: it is an http.Handler. Start builds one and serves it.
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
		control: newControlPlane(router, opts.ControlPlaneAPIKeys, seconds(opts.BodyTimeout))}
	if opts.DisableRetries {
		g.maxRetries = 0
	}
	g.unsubscribe = monitor.Subscribe(g.waiting.workerChanged)
	g.apiOnProxyPort = len(opts.ControlPlaneAPIKeys) > 0 || opts.WorkerAPIOnProxyPort
	if opts.WorkerAPIOnProxyPort && len(opts.ControlPlaneAPIKeys) == 0 {
		g.control.log.Warn("the worker API is open on the proxy port: anyone who reaches it can add and remove workers (set control_plane_api_keys to require a key)")
	}
	fallback := &http.Transport{
		Proxy:               nil, // workers are reached directly, never through $HTTP_PROXY
		DialContext:         (&net.Dialer{Timeout: seconds(opts.ConnectTimeout), KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: opts.MaxIdleConnsPerHost,
		MaxConnsPerHost:     opts.MaxConnsPerHost,
		IdleConnTimeout:     seconds(opts.WorkerIdleTimeout),
		DisableCompression:  true, // bodies pass through as the worker sent them
		TLSHandshakeTimeout: seconds(opts.ConnectTimeout),
	}
	g.transport = &upstream{dial: fallback.DialContext, maxIdle: opts.MaxIdleConnsPerHost, idleTimeout: seconds(opts.WorkerIdleTimeout), fallback: fallback}
	errorLog := log.New(os.Stderr, "bounded-router gateway: ", log.LstdFlags)
	// The ReverseProxy serves upgrades; every other request takes forward's step, with the
	// same hooks and buffers.
	g.proxy = &httputil.ReverseProxy{
		Rewrite:   g.rewrite,
		Transport: failover{g},
		// 0: the ReverseProxy flushes after every write for text/event-stream and for bodies
		// of unknown length (chunked), so streams arrive per event; a body of known length is
		// written through the server's buffer (one write instead of two or more on the socket).
		FlushInterval:  0,
		ModifyResponse: g.modifyResponse,
		ErrorHandler:   g.proxyError,
		BufferPool:     newCopyBuffers(),
		ErrorLog:       errorLog,
	}
	if opts.AccessLog {
		g.accessLog = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	g.server = &http.Server{
		Handler:           g,
		ReadHeaderTimeout: seconds(opts.ReadHeaderTimeout),
		IdleTimeout:       seconds(opts.KeepAliveTimeout),
		// A client that stops reading must not hold its lease past the request's bound: the
		// exchange's deadline starts once the body is in, so the write deadline leaves room for it.
		WriteTimeout:                 seconds(opts.RequestTimeout) + seconds(opts.BodyTimeout),
		MaxHeaderBytes:               opts.MaxHeaderBytes,
		DisableGeneralOptionsHandler: true, // "OPTIONS *" is refused by the path rule like any other non-path target
		ErrorLog:                     errorLog,
	}
	return g, nil
}

// Start builds a gateway and serves it on opts.Host:opts.Port (and the metrics listener when
// opts.MetricsPort is set) until Shutdown.
func Start(monitor *health.Monitor, opts Options) (*Gateway, error) {
	g, err := New(monitor, opts)
	if err != nil {
		return nil, err
	}
	g.listener, err = net.Listen("tcp", net.JoinHostPort(g.opts.Host, strconv.Itoa(g.opts.Port)))
	if err != nil {
		return nil, fmt.Errorf("gateway: cannot listen on %s port %d: %w", g.opts.Host, g.opts.Port, err)
	}
	if g.opts.MetricsPort != nil {
		g.metricsLn, err = net.Listen("tcp", net.JoinHostPort(g.opts.Host, strconv.Itoa(*g.opts.MetricsPort)))
		if err != nil {
			g.listener.Close()
			return nil, fmt.Errorf("gateway: cannot listen for metrics on %s port %d: %w", g.opts.Host, *g.opts.MetricsPort, err)
		}
		g.metrics = &http.Server{Handler: g.adminHandler(), ReadHeaderTimeout: seconds(g.opts.ReadHeaderTimeout), ErrorLog: g.server.ErrorLog}
		g.serve(g.metrics, g.metricsLn)
	}
	g.serve(g.server, g.listener)
	return g, nil
}

func (g *Gateway) serve(s *http.Server, ln net.Listener) {
	g.serving.Add(1)
	go func() {
		defer g.serving.Done()
		s.Serve(ln) // returns http.ErrServerClosed on Shutdown
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
	drained := g.server.Shutdown(ctx)
	if drained != nil {
		g.server.Close() // cancels the requests still running
	}
	if g.metrics != nil {
		g.metrics.Close()
	}
	g.serving.Wait()
	// Handlers of closed connections return as soon as their cancelled requests do.
	for deadline := time.Now().Add(5 * time.Second); g.inflight.Load() > 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway: %d requests still running 5 s after their connections were closed", g.inflight.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.transport.CloseIdleConnections()
	if drained != nil {
		return fmt.Errorf("gateway: in-flight requests did not finish within %v and were cut: %w", timeout, drained)
	}
	return nil
}
