package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bounded-router/bounded-router/internal/strictjson"
)

// ErrInvalidOptions is wrapped by every error of ParseOptions and Options.Validate.
var ErrInvalidOptions = errors.New("invalid gateway options")

// Options configure a Gateway. The zero value of a field means its default (see Defaults);
// ParseOptions reads them from JSON with the field names in the tags.
type Options struct {
	// Host and Port are the proxy's listening address; port 0 picks a free port.
	Host string `json:"host"`
	Port int    `json:"port"`
	// MetricsPort, when set, serves the router's Prometheus metrics on GET /metrics of a second
	// listener on Host (0 picks a free port). The proxy port never answers /metrics itself.
	MetricsPort *int `json:"metrics_port"`
	// ExposeRoutingHeaders adds X-Bounded-Router-Worker and X-Bounded-Router-Branch to responses
	// and lets error bodies name the worker and the error.
	ExposeRoutingHeaders bool `json:"expose_routing_headers"`
	// MaxBodySize is the largest request body accepted, in bytes (above: 413).
	MaxBodySize int64 `json:"max_body_size"`
	// Timeouts, in seconds: dialling a worker; waiting for a worker's response headers after
	// the request was sent (504 past it); a streamed answer with no byte from the worker for
	// this long is cut; reading a request body (408 past it); reading request headers; an idle
	// keep-alive client connection; draining in-flight requests on shutdown.
	ConnectTimeout    float64 `json:"connect_timeout"`
	FirstByteTimeout  float64 `json:"first_byte_timeout"`
	IdleTimeout       float64 `json:"idle_timeout"`
	BodyTimeout       float64 `json:"body_timeout"`
	ReadHeaderTimeout float64 `json:"read_header_timeout"`
	KeepAliveTimeout  float64 `json:"keep_alive_timeout"`
	ShutdownTimeout   float64 `json:"shutdown_timeout"`
	// MaxHeaderBytes bounds a request's header block (above: 431).
	MaxHeaderBytes int `json:"max_header_bytes"`
	// MaxIdleConnsPerHost bounds the pool of idle keep-alive connections to each worker;
	// MaxConnsPerHost, when positive, bounds all connections to a worker (requests wait).
	MaxIdleConnsPerHost int `json:"max_idle_conns_per_host"`
	MaxConnsPerHost     int `json:"max_conns_per_host"`
	// PrefixBlocks "text" routes each request with the prefix block hashes of its JSON body's
	// "messages" or "prompt" (for cache_aware); "tokens" with those of its token ids ("input_ids"
	// or an integer-array "prompt"), which name blocks as the engines' KV events do; "off" or
	// absent does not read the body for routing. PrefixBlockBytes is the text block size in
	// UTF-8 bytes (0 or absent: 64); PrefixBlockSize the token block size, the engine's KV block
	// (page) size (0 or absent: 16, vLLM's default). PrefixMaxBytes is how much of a prompt is
	// hashed, in bytes of the hashed data (UTF-8 text, 4 per token id; 0 or absent: 1 MiB): a
	// longer prompt is routed by the blocks of its beginning.
	PrefixBlocks     string `json:"prefix_blocks"`
	PrefixBlockBytes int    `json:"prefix_block_bytes"`
	PrefixBlockSize  int    `json:"prefix_block_size"`
	PrefixMaxBytes   int    `json:"prefix_max_bytes"`
	// AccessLog writes one JSON line per request to stderr (log/slog).
	AccessLog bool `json:"access_log"`
	// RetryMaxRetries is how many more workers a request is sent to when its worker fails it
	// before any byte of the answer reached the client (contract: Worker failures); nil is the
	// default, DisableRetries sends every request once.
	RetryMaxRetries *int `json:"retry_max_retries"`
	DisableRetries  bool `json:"disable_retries"`
	// RequestTimeout, in seconds, bounds a whole request, streaming included (SMG's
	// request_timeout_secs); past it the request is cut (504 if nothing was sent yet).
	RequestTimeout float64 `json:"request_timeout_secs"`
	// WorkerIdleTimeout, in seconds, closes a pooled connection to a worker idle this long: below
	// the engines' own keep-alive, so the gateway never reuses one the worker has closed.
	WorkerIdleTimeout float64 `json:"worker_idle_timeout"`
	// ControlPlaneAPIKeys, when set, are the bearer keys the worker API accepts (SMG's
	// --control-plane-api-keys), on the admin listener and on the proxy port, which then serves it.
	ControlPlaneAPIKeys []string `json:"control_plane_api_keys"`
	// WorkerAPIOnProxyPort serves the worker API on the proxy port without a key, as SMG does
	// (slime's engines register there): anyone who reaches the port can change the workers.
	WorkerAPIOnProxyPort bool `json:"worker_api_on_proxy_port"`
	// Pprof serves Go's profiles (net/http/pprof, /debug/pprof/) on the admin listener, which
	// it needs (metrics_port). Off by default: a profile shows the process's internals and a
	// CPU profile slows it while it runs (contract: HTTP proxies, "What clients learn").
	Pprof bool `json:"pprof"`
}

// DefaultRetryMaxRetries: two more workers. A failed request costs a round trip to a worker
// that answers at once (refused, 503), so two retries cost milliseconds, and three workers
// failing one request in a row is a fleet-wide fault no retry repairs.
const DefaultRetryMaxRetries = 2

// MaxRetries bounds retry_max_retries.
const MaxRetries = 16

// Limits of the control plane's keys: a few per deployment, each a header value.
const (
	maxControlPlaneKeys   = 64
	maxControlPlaneKeyLen = 4096
)

// Defaults are the options a zero field stands for.
var Defaults = Options{
	Host:                "127.0.0.1",
	MaxBodySize:         4 << 20,
	ConnectTimeout:      10,
	FirstByteTimeout:    600,
	IdleTimeout:         300,
	BodyTimeout:         60,
	ReadHeaderTimeout:   10,
	KeepAliveTimeout:    120,
	ShutdownTimeout:     10,
	MaxHeaderBytes:      64 << 10,
	MaxIdleConnsPerHost: 32,
	RequestTimeout:      1800,
	WorkerIdleTimeout:   4,
	PrefixBlocks:        "off",
	PrefixBlockBytes:    64,
	PrefixBlockSize:     16,
	PrefixMaxBytes:      1 << 20,
}

// optionFields are the keys of Options, for strictjson.
var optionFields = strictjson.FieldsOf(Options{})

// ParseOptions reads options from a JSON object; absent fields take their defaults. An empty
// text is the default options.
func ParseOptions(text []byte) (Options, error) {
	var o Options
	if len(bytes.TrimSpace(text)) > 0 {
		if err := strictjson.Decode(text, &o, optionFields); err != nil {
			return Options{}, fmt.Errorf("%w: %s", ErrInvalidOptions, strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o.withDefaults(), nil
}

// Validate checks every field against its rule; zero fields are valid (they mean the default).
func (o Options) Validate() error {
	ports := []struct {
		name  string
		value int
	}{{"port", o.Port}}
	if o.MetricsPort != nil {
		ports = append(ports, struct {
			name  string
			value int
		}{"metrics_port", *o.MetricsPort})
	}
	for _, p := range ports {
		if p.value < 0 || p.value > 65535 {
			return invalid(p.name, "must be a port number from 0 to 65535, got %d", p.value)
		}
	}
	for _, f := range []struct {
		name  string
		value float64
	}{
		{"connect_timeout", o.ConnectTimeout}, {"first_byte_timeout", o.FirstByteTimeout},
		{"idle_timeout", o.IdleTimeout}, {"body_timeout", o.BodyTimeout},
		{"read_header_timeout", o.ReadHeaderTimeout}, {"keep_alive_timeout", o.KeepAliveTimeout},
		{"shutdown_timeout", o.ShutdownTimeout}, {"request_timeout_secs", o.RequestTimeout},
		{"worker_idle_timeout", o.WorkerIdleTimeout},
	} {
		if f.value < 0 || math.IsNaN(f.value) || f.value > 1e9 {
			return invalid(f.name, "must be a number of seconds above 0 (0 or absent: the default), got %v", f.value)
		}
	}
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"max_body_size", o.MaxBodySize}, {"max_header_bytes", int64(o.MaxHeaderBytes)},
		{"max_idle_conns_per_host", int64(o.MaxIdleConnsPerHost)}, {"max_conns_per_host", int64(o.MaxConnsPerHost)},
		{"prefix_block_bytes", int64(o.PrefixBlockBytes)}, {"prefix_block_size", int64(o.PrefixBlockSize)},
		{"prefix_max_bytes", int64(o.PrefixMaxBytes)},
	} {
		if f.value < 0 {
			return invalid(f.name, "must not be negative (0 or absent: the default), got %d", f.value)
		}
	}
	if o.RetryMaxRetries != nil && (*o.RetryMaxRetries < 0 || *o.RetryMaxRetries > MaxRetries) {
		return invalid("retry_max_retries", "must be an integer from 0 to %d, got %d", MaxRetries, *o.RetryMaxRetries)
	}
	if o.Pprof && o.MetricsPort == nil {
		return invalid("pprof", "needs metrics_port: the profiles are served on the admin listener only")
	}
	if o.PrefixBlocks != "" && o.PrefixBlocks != "off" && o.PrefixBlocks != "text" && o.PrefixBlocks != "tokens" {
		return invalid("prefix_blocks", `must be "off", "text" or "tokens", got %q`, o.PrefixBlocks)
	}
	if err := checkBlockFits(o.withDefaults()); err != nil {
		return err
	}
	return checkControlPlaneKeys(o.ControlPlaneAPIKeys)
}

// checkBlockFits: the mode's block must fit in the bytes of a prompt that are hashed (a token id
// takes 4), or no block is ever hashed; this also keeps a block's length in bytes from overflowing.
func checkBlockFits(o Options) error {
	if o.PrefixBlocks == "text" && o.PrefixBlockBytes > o.PrefixMaxBytes {
		return invalid("prefix_block_bytes", "must be at most prefix_max_bytes (%d), got %d", o.PrefixMaxBytes, o.PrefixBlockBytes)
	}
	if o.PrefixBlocks == "tokens" && o.PrefixBlockSize > o.PrefixMaxBytes/4 {
		return invalid("prefix_block_size", "must be at most prefix_max_bytes / 4 (%d token ids), got %d", o.PrefixMaxBytes/4, o.PrefixBlockSize)
	}
	return nil
}

// checkControlPlaneKeys: at most maxControlPlaneKeys keys, each 1 to maxControlPlaneKeyLen
// visible ASCII bytes (a bearer token in a header, compared whole).
func checkControlPlaneKeys(keys []string) error {
	if len(keys) > maxControlPlaneKeys {
		return invalid("control_plane_api_keys", "may hold at most %d keys, got %d", maxControlPlaneKeys, len(keys))
	}
	for i, k := range keys {
		if len(k) == 0 || len(k) > maxControlPlaneKeyLen || strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			return invalid(fmt.Sprintf("control_plane_api_keys[%d]", i), "must be 1 to %d visible ASCII characters without spaces", maxControlPlaneKeyLen)
		}
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s "+format, append([]any{ErrInvalidOptions, field}, args...)...)
}

func (o Options) withDefaults() Options {
	d := Defaults
	if o.Host == "" {
		o.Host = d.Host
	}
	setInt64(&o.MaxBodySize, d.MaxBodySize)
	for _, f := range []struct{ v, d *float64 }{
		{&o.ConnectTimeout, &d.ConnectTimeout}, {&o.FirstByteTimeout, &d.FirstByteTimeout},
		{&o.IdleTimeout, &d.IdleTimeout}, {&o.BodyTimeout, &d.BodyTimeout},
		{&o.ReadHeaderTimeout, &d.ReadHeaderTimeout}, {&o.KeepAliveTimeout, &d.KeepAliveTimeout},
		{&o.ShutdownTimeout, &d.ShutdownTimeout}, {&o.RequestTimeout, &d.RequestTimeout},
		{&o.WorkerIdleTimeout, &d.WorkerIdleTimeout},
	} {
		if *f.v == 0 {
			*f.v = *f.d
		}
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if o.MaxIdleConnsPerHost == 0 {
		o.MaxIdleConnsPerHost = d.MaxIdleConnsPerHost
	}
	if o.PrefixBlocks == "" {
		o.PrefixBlocks = d.PrefixBlocks
	}
	if o.RetryMaxRetries == nil {
		n := DefaultRetryMaxRetries
		o.RetryMaxRetries = &n
	}
	if o.PrefixBlockBytes == 0 {
		o.PrefixBlockBytes = d.PrefixBlockBytes
	}
	if o.PrefixBlockSize == 0 {
		o.PrefixBlockSize = d.PrefixBlockSize
	}
	if o.PrefixMaxBytes == 0 {
		o.PrefixMaxBytes = d.PrefixMaxBytes
	}
	return o
}

func setInt64(v *int64, d int64) {
	if *v == 0 {
		*v = d
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
