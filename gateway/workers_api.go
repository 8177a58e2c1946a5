package gateway

// SMG's worker API (docs/contract.md, "The worker API"): POST /workers, GET /workers,
// GET /workers/{id}, DELETE /workers/{id}, sglang-router's older /add_worker?url=,
// /remove_worker?url= and /list_workers, and the probes /health, /liveness and /readiness.
// Every membership change goes through the gateway's core.Router, as Python's add_worker and
// remove_worker do, so a removed worker's leases end as the contract's "Leases" says.
//
// Who can reach it: the probes answer on every listener. The worker API changes where traffic
// goes, so it is served on the admin listener (Options.MetricsPort) and, on the proxy port,
// only with Options.ControlPlaneAPIKeys set or Options.WorkerAPIOnProxyPort asked for. With
// keys set, every worker API request on either listener needs "Authorization: Bearer <key>".

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/bounded-router/bounded-router/core"
)

// maxControlBody bounds a worker API request body: a registration is a few hundred bytes.
const maxControlBody = 64 << 10

// controlPlane serves the worker API and the probes for one gateway.
type controlPlane struct {
	router *core.Router
	// keys are the SHA-256 digests of the accepted bearer keys (none: no key needed), so a
	// comparison takes the same time whatever the key sent.
	keys [][sha256.Size]byte
	// idPrefix starts every worker id of this gateway, so an id from an earlier run names nothing.
	idPrefix [8]byte
	log      *slog.Logger
	api      *http.ServeMux // the worker API
	// bodyTimeout bounds the reading of a request body, as Options.BodyTimeout does the proxy's.
	bodyTimeout time.Duration
}

func newControlPlane(router *core.Router, keys []string, bodyTimeout time.Duration) *controlPlane {
	c := &controlPlane{router: router, bodyTimeout: bodyTimeout, log: slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "bounded-router worker API")}
	rand.Read(c.idPrefix[:])
	for _, k := range keys {
		c.keys = append(c.keys, sha256.Sum256([]byte(k)))
	}
	c.api = http.NewServeMux()
	c.api.HandleFunc("POST /workers", c.createWorker)
	c.api.HandleFunc("GET /workers", c.listWorkers)
	c.api.HandleFunc("GET /workers/{id}", c.getWorker)
	c.api.HandleFunc("DELETE /workers/{id}", c.deleteWorker)
	c.api.HandleFunc("POST /add_worker", c.addWorkerByQuery)
	c.api.HandleFunc("POST /remove_worker", c.removeWorkerByQuery)
	c.api.HandleFunc("GET /list_workers", c.listURLs)
	// The same paths with another method, and paths below /workers/ that name no id, get the
	// API's JSON error rather than ServeMux's plain-text one.
	for path, allow := range map[string]string{"/workers": "GET, HEAD, POST", "/workers/{id}": "GET, HEAD, DELETE",
		"/add_worker": "POST", "/remove_worker": "POST", "/list_workers": "GET, HEAD"} {
		c.api.HandleFunc(path, methodNotAllowed(allow))
	}
	c.api.HandleFunc("/workers/", func(w http.ResponseWriter, r *http.Request) {
		c.byID(w, strings.TrimPrefix(r.URL.Path, "/workers/"))
	})
	return c
}

// methodNotAllowed answers 405 naming the method, with the methods allowed on the path.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		apiError(w, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", r.Method+" is not allowed on "+r.URL.Path)
	}
}

// isAPIPath reports whether path belongs to the worker API.
func isAPIPath(path string) bool {
	switch path {
	case "/workers", "/add_worker", "/remove_worker", "/list_workers":
		return true
	}
	return strings.HasPrefix(path, "/workers/")
}

// isProbePath reports whether path is one of the probes.
func isProbePath(path string) bool {
	return path == "/health" || path == "/liveness" || path == "/readiness"
}

// probe answers /health, /liveness and /readiness and reports whether path was one of them.
func (c *controlPlane) probe(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case "/health", "/liveness":
		if !allowRead(w, r) {
			return true
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK")
	case "/readiness":
		if !allowRead(w, r) {
			return true
		}
		c.readiness(w)
	default:
		return false
	}
	return true
}

// readiness is SMG's: ready while some worker is available.
func (c *controlPlane) readiness(w http.ResponseWriter) {
	healthy, workers := 0, c.router.Workers()
	for _, s := range workers {
		if s.Healthy {
			healthy++
		}
	}
	if healthy == 0 {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": "insufficient healthy workers"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "healthy_workers": healthy, "total_workers": len(workers)})
}

func allowRead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	methodNotAllowed("GET, HEAD")(w, r)
	return false
}

// serveAPI checks the bearer key and the body size, then serves a worker API request.
func (c *controlPlane) serveAPI(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(r) {
		c.refuse(w, r, "the worker API needs")
		return
	}
	if r.ContentLength > maxControlBody {
		apiError(w, http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE", fmt.Sprintf("a worker API body may have at most %d bytes", maxControlBody))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxControlBody)
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(c.bodyTimeout)) // a trickled body is cut
	c.api.ServeHTTP(w, r)
}

// refuse answers a request without a valid bearer key, logged; what names what needs one.
func (c *controlPlane) refuse(w http.ResponseWriter, r *http.Request, what string) {
	c.log.Warn("refused: missing or wrong bearer key", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	w.Header().Set("WWW-Authenticate", `Bearer realm="control-plane"`)
	apiError(w, http.StatusUnauthorized, "UNAUTHORIZED", what+" Authorization: Bearer <one of --control-plane-api-keys>")
}

func (c *controlPlane) authorized(r *http.Request) bool {
	if len(c.keys) == 0 {
		return true
	}
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") { // a scheme's name is case-insensitive (RFC 9110, 11.1)
		return false
	}
	sum := sha256.Sum256([]byte(token))
	match := 0
	for _, k := range c.keys {
		match |= subtle.ConstantTimeCompare(sum[:], k[:])
	}
	return match == 1
}

// registration is the body of POST /workers: SMG's WorkerSpec, of which this gateway reads
// url and worker_type; the other fields SMG accepts are ignored, as SMG ignores unknown ones.
type registration struct {
	URL        *string `json:"url"`
	WorkerType *string `json:"worker_type"`
}

func (c *controlPlane) createWorker(w http.ResponseWriter, r *http.Request) {
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType != "application/json" {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", "Missing Content-Type: application/json header")
		return
	}
	var spec registration
	if status, err := decodeBody(r.Body, &spec); err != nil {
		apiError(w, status, codeOf(status), err.Error())
		return
	}
	if spec.URL == nil {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", "field url is missing: the worker's http:// or https:// URL")
		return
	}
	if spec.WorkerType != nil && *spec.WorkerType != "regular" {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("worker_type %q is not supported: this gateway routes regular workers only (no prefill/decode disaggregation)", *spec.WorkerType))
		return
	}
	if s, ok := c.add(w, r, *spec.URL); ok {
		id := c.workerID(s)
		writeJSON(w, http.StatusAccepted, map[string]any{"status": "accepted", "worker_id": id, "url": s.URL, "location": "/workers/" + id, "message": "Worker added to the router"})
	}
}

// decodeBody reads one JSON object into v: 413 past maxControlBody, else 400 naming the fault.
func decodeBody(body io.Reader, v any) (int, error) {
	dec := json.NewDecoder(body)
	err := dec.Decode(v)
	if err == nil {
		err = nothingButSpace(io.MultiReader(dec.Buffered(), body))
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("a worker API body may have at most %d bytes", maxControlBody)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout, errors.New("the body did not arrive within body_timeout")
	case err != nil:
		return http.StatusBadRequest, fmt.Errorf("the body is not a JSON object of the worker API: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return 0, nil
}

// nothingButSpace reads the rest of a body (bounded by its MaxBytesReader) and fails when it
// holds anything but JSON whitespace, or when reading it fails (too large, too slow).
func nothingButSpace(rest io.Reader) error {
	extra, err := io.ReadAll(rest)
	if err == nil && strings.Trim(string(extra), " \t\r\n") != "" {
		err = errors.New("trailing data after the JSON object")
	}
	return err
}

// add checks url and adds it to the router; on failure it answers the client itself.
func (c *controlPlane) add(w http.ResponseWriter, r *http.Request, workerURL string) (core.WorkerState, bool) {
	if err := checkWorkerURL(workerURL); err != nil {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("url %q: %v", workerURL, err))
		return core.WorkerState{}, false
	}
	err := c.router.AddWorker(workerURL)
	s, member := c.memberAt(workerURL)
	switch {
	case errors.Is(err, core.ErrDuplicateWorker) && member:
		apiError(w, http.StatusConflict, "WORKER_ALREADY_EXISTS", fmt.Sprintf("Worker already exists at URL %q with ID %s", workerURL, c.workerID(s)))
		return s, false
	case err != nil || !member:
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("url %q: %v", workerURL, errOr(err, "removed again while being added")))
		return s, false
	}
	c.log.Info("worker added", "url", s.URL, "id", c.workerID(s), "remote", r.RemoteAddr)
	return s, true
}

func errOr(err error, text string) error {
	if err != nil {
		return err
	}
	return errors.New(text)
}

// remove takes the member s out of the router and logs it; false when it had left already
// (a worker added again at its URL since is another member, and stays).
func (c *controlPlane) remove(r *http.Request, s core.WorkerState) bool {
	if err := c.router.RemoveMember(core.Member{ID: s.ID, URL: s.URL}); err != nil {
		return false
	}
	c.log.Info("worker removed", "url", s.URL, "id", c.workerID(s), "remote", r.RemoteAddr)
	return true
}

func (c *controlPlane) listWorkers(w http.ResponseWriter, _ *http.Request) {
	states := c.router.Workers()
	workers := make([]map[string]any, len(states))
	for i, s := range states {
		workers[i] = c.describe(s)
	}
	stats := map[string]int{"prefill_count": 0, "decode_count": 0, "regular_count": len(states)}
	writeJSON(w, http.StatusOK, map[string]any{"workers": workers, "total": len(states), "stats": stats})
}

func (c *controlPlane) getWorker(w http.ResponseWriter, r *http.Request) {
	if s, ok := c.byID(w, r.PathValue("id")); ok {
		writeJSON(w, http.StatusOK, c.describe(s))
	}
}

func (c *controlPlane) deleteWorker(w http.ResponseWriter, r *http.Request) {
	s, ok := c.byID(w, r.PathValue("id"))
	if !ok {
		return
	}
	if !c.remove(r, s) {
		apiError(w, http.StatusNotFound, "WORKER_NOT_FOUND", "Worker "+c.workerID(s)+" not found")
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"status": "accepted", "worker_id": c.workerID(s), "message": "Worker removed from the router"})
}

func (c *controlPlane) addWorkerByQuery(w http.ResponseWriter, r *http.Request) {
	workerURL, ok := urlParameter(w, r)
	if !ok {
		return
	}
	if _, ok := c.add(w, r, workerURL); ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "Successfully added worker: "+workerURL)
	}
}

func (c *controlPlane) removeWorkerByQuery(w http.ResponseWriter, r *http.Request) {
	workerURL, ok := urlParameter(w, r)
	if !ok {
		return
	}
	s, member := c.memberAt(workerURL)
	if !member || !c.remove(r, s) {
		apiError(w, http.StatusNotFound, "WORKER_NOT_FOUND", fmt.Sprintf("worker %q is not a member", workerURL))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "Successfully removed worker: "+workerURL)
}

func (c *controlPlane) listURLs(w http.ResponseWriter, _ *http.Request) {
	states := c.router.Workers()
	urls := make([]string, len(states))
	for i, s := range states {
		urls[i] = s.URL
	}
	writeJSON(w, http.StatusOK, map[string]any{"urls": urls})
}

// urlParameter is the ?url= of the older endpoints; on failure it answers 400 itself.
func urlParameter(w http.ResponseWriter, r *http.Request) (string, bool) {
	values, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || len(values["url"]) != 1 {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", "give the worker as exactly one query parameter url=<http:// or https:// URL>")
		return "", false
	}
	return values.Get("url"), true
}

// describe is a worker as GET /workers lists it: SMG's fields that this gateway knows.
func (c *controlPlane) describe(s core.WorkerState) map[string]any {
	status := "ready"
	if !s.Healthy {
		status = "unhealthy"
	}
	return map[string]any{
		"id": c.workerID(s), "url": s.URL, "worker_type": "regular", "connection_mode": "http",
		"is_healthy": s.Healthy, "status": status, "load": s.Load,
	}
}

// workerID is SMG's worker id form, a UUID (version 4 bits set): the gateway's random prefix,
// then the core's id of the worker, which a worker removed and added again does not keep.
func (c *controlPlane) workerID(s core.WorkerState) string {
	var b [16]byte
	copy(b[:8], c.idPrefix[:])
	b[12], b[13], b[14], b[15] = byte(s.ID>>24), byte(s.ID>>16), byte(s.ID>>8), byte(s.ID)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// byID finds the member with id; otherwise it answers 400 (not a UUID) or 404 itself.
func (c *controlPlane) byID(w http.ResponseWriter, id string) (core.WorkerState, bool) {
	if !isUUID(id) {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("Invalid worker_id %q (expected UUID)", id))
		return core.WorkerState{}, false
	}
	s, ok := c.member(func(s core.WorkerState) bool { return c.workerID(s) == strings.ToLower(id) })
	if !ok {
		apiError(w, http.StatusNotFound, "WORKER_NOT_FOUND", "Worker "+id+" not found")
	}
	return s, ok
}

// memberAt finds the member named by any spelling of its URL (the router keeps its normal form).
func (c *controlPlane) memberAt(workerURL string) (core.WorkerState, bool) {
	normal, err := core.NormalizeWorkerURL(workerURL)
	if err != nil {
		return core.WorkerState{}, false
	}
	return c.member(func(s core.WorkerState) bool { return s.URL == normal })
}

func (c *controlPlane) member(match func(core.WorkerState) bool) (core.WorkerState, bool) {
	for _, s := range c.router.Workers() {
		if match(s) {
			return s, true
		}
	}
	return core.WorkerState{}, false
}

func isUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i, ch := range id {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if ch != '-' {
				return false
			}
		} else if !strings.ContainsRune("0123456789abcdefABCDEF", ch) {
			return false
		}
	}
	return true
}

// apiError is SMG's error body: {"error": message, "code": CODE}.
func apiError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]string{"error": message, "code": code})
}

func codeOf(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "PAYLOAD_TOO_LARGE"
	case http.StatusRequestTimeout:
		return "REQUEST_TIMEOUT"
	}
	return "BAD_REQUEST"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // URLs and messages as written: the body is JSON, never HTML
	enc.Encode(v)
}
