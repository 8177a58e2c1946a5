package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/health"
)

// The proxy step's rules that the ReverseProxy kept before forward.go (contract: HTTP proxies):
// these pass on the ReverseProxy path too, which is how they were written.

func TestEarlyHintsReachTheClientBeforeTheAnswer(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		for _, link := range []string{"</a.css>; rel=preload", "</b.js>; rel=preload"} {
			w.Header().Set("Link", link)
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Del("Link")
		io.WriteString(w, "ok")
	})
	g := start(t, newRouter(t, w.URL), Options{})
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
		hints = append(hints, http.StatusText(code)+" "+header.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://"+g.Addr()+"/v1/models", nil)
	res, body := do(t, req, nil)
	want := []string{"Early Hints </a.css>; rel=preload", "Early Hints </b.js>; rel=preload"}
	if res.StatusCode != 200 || body != "ok" || len(hints) != 2 || hints[0] != want[0] || hints[1] != want[1] || res.Header.Get("Link") != "" {
		t.Fatalf("got %d %q, hints %q, Link %q; want 200 \"ok\" after %q and no Link on the answer", res.StatusCode, body, hints, res.Header.Get("Link"), want)
	}
}

func TestTrailersFollowTheBody(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "data")
		w.(http.Flusher).Flush() // chunked: trailers need it
		w.Header().Set("X-Sum", "7")
		w.Header().Set(http.TrailerPrefix+"X-Late", "8") // not announced
	})
	g := start(t, newRouter(t, w.URL), Options{})
	res, body := get(t, g, "/v1/completions", nil)
	if body != "data" || res.Trailer.Get("X-Sum") != "7" || res.Trailer.Get("X-Late") != "8" {
		t.Fatalf("got %q with trailers %v, want \"data\" with X-Sum 7 and X-Late 8", body, res.Trailer)
	}
}

func TestAnUnaskedProtocolSwitchIsA502(t *testing.T) {
	addr, _ := rawWorker(t, answering("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n", nil))
	g := start(t, newRouter(t, "http://"+addr), Options{DisableRetries: true})
	if res, body := get(t, g, "/v1/models", nil); res.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d %q, want 502: the client asked for no upgrade", res.StatusCode, body)
	}
}

func TestNoEarlyHintsForAnHTTP10Client(t *testing.T) {
	// RFC 9110, 15.2: a server must not send a 1xx answer to an HTTP/1.0 client.
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, "ok")
	})
	g := start(t, newRouter(t, w.URL), Options{})
	conn, err := net.DialTimeout("tcp", g.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n")
	answer, _ := io.ReadAll(conn) // HTTP/1.0: the gateway closes after the answer
	// The status line names HTTP/1.1, the gateway's version (RFC 9110, 2.5), and no 1xx precedes it.
	if first, _, _ := strings.Cut(string(answer), "\r\n"); first != "HTTP/1.1 200 OK" || !strings.HasSuffix(string(answer), "ok") {
		t.Fatalf("got %q, want the 200 alone", answer)
	}
}

// A chunked request reaches the worker as the contract's step 5 says: the buffered body with
// its Content-Length, no Transfer-Encoding and no trailers. Before, it went on chunked with the
// client's trailers, so a trailer named Host reached the worker, and one named Content-Length
// or Transfer-Encoding failed the write: a 502 that counted against a worker never at fault.
func TestAChunkedRequestReachesTheWorkerWithItsLength(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "te=%v cl=%d body=%s trailer=%v", r.TransferEncoding, r.ContentLength, body, r.Trailer)
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	// Both proxy steps: a plain request's, and an upgrade's that the worker answers plainly. A
	// trailer field the RFC forbids (RFC 9110, 6.5.1: framing, routing, ...) is refused at the
	// edge, and nothing reaches the worker (contract: HTTP proxies, step 2).
	refused := map[string]bool{"Host: evil\r\n": true, "Content-Length: 50\r\n": true, "Transfer-Encoding: chunked\r\n": true}
	for _, connection := range []string{"Connection: close\r\n", "Connection: Upgrade\r\nUpgrade: x\r\n"} {
		for _, trailer := range []string{"", "X-Checksum: 1\r\n", "Host: evil\r\n", "Content-Length: 50\r\n", "Transfer-Encoding: chunked\r\n"} {
			res, body := raw(t, g.Addr(), "POST /v1/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"+connection+"\r\n3\r\nabc\r\n0\r\n"+trailer+"\r\n")
			want, status := "te=[] cl=3 body=abc trailer=map[]", 200
			if refused[trailer] {
				status = 400
			}
			if res.StatusCode != status || status == 200 && body != want {
				t.Errorf("%q, trailer %q: %d %q, want %d %q", connection, trailer, res.StatusCode, body, status, want)
			}
		}
	}
	if routed := r.Workers()[0].Outcomes[core.OutcomeSuccess]; routed != 4 {
		t.Errorf("%d requests reached the worker, want the 4 without a forbidden trailer", routed)
	}
	waitLeases(t, r, 0)
	if failed := r.Workers()[0].Outcomes[core.OutcomeFailure]; failed != 0 {
		t.Errorf("%d failures counted against the worker", failed)
	}
}

// A refused request's unread body is not waited for: the refusal closes the connection at once
// even when the client stops sending (net/http reads up to 256 KiB of what is left before it
// closes, and read with no deadline, a client that sent part of its body held the connection).
func TestARefusalClosesTheConnectionOfAStalledBody(t *testing.T) {
	g := start(t, newRouter(t, "http://"+unansweredListener(t)), Options{BodyTimeout: 0.2})
	for name, head := range map[string]string{
		"body_timeout":  "POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
		"path":          "POST /v1/../x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab",
		"path, chunked": "POST /v1/../x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
	} {
		conn := sendRaw(t, g.Addr(), head)
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.Copy(io.Discard, res.Body)
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after its %d the connection was not closed: %v", name, res.StatusCode, err)
		}
	}
}

// A refusal does not reset a client that sent its whole body: net/http reads what is left of it
// (up to 256 KiB) and closes cleanly, so the answer is not lost to a reset (a deadline already
// passed made it close at once with the body unread, which the kernel answers with a reset).
// net/http skips its own read when the request asked to close (Connection: close, HTTP/1.0), so
// the gateway reads it itself.
func TestARefusalOfAWholeBodyClosesWithoutAReset(t *testing.T) {
	g := start(t, newRouter(t, "http://"+unansweredListener(t)), Options{})
	body := strings.Repeat("a", 100<<10)
	for _, version := range []string{"HTTP/1.1", "HTTP/1.1\r\nConnection: close", "HTTP/1.0"} {
		conn := sendRaw(t, g.Addr(), "POST /v1/../x "+version+"\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != 400 {
			t.Fatalf("%q: %v %v", version, res, err)
		}
		io.Copy(io.Discard, res.Body)
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%q: after the 400: %v, want the connection's clean end", version, err)
		}
	}
}

// A client that reads slowly is not a silent worker: the idle timeout runs only while a read of
// the worker's body waits, on both proxy steps, so a whole answer reaches a client that paused
// longer than it, and nothing is logged or counted against the worker.
func TestASlowReaderIsNotCutByTheIdleTimeout(t *testing.T) {
	const size = 8 << 20 // more than the sockets buffer between the gateway and the client
	w := bulkWorker(t, size)
	r := newRouter(t, w.URL)
	g := start(t, r, Options{IdleTimeout: 0.2})
	var logs syncBuffer
	g.errorLog.SetOutput(&logs)
	for _, connection := range []string{"Connection: close\r\n", "Connection: Upgrade\r\nUpgrade: x\r\n"} {
		conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\n"+connection+"\r\n")
		time.Sleep(600 * time.Millisecond) // the client pauses for three idle timeouts before it reads
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, res.Body); n != size || err != nil {
			t.Errorf("%q: the client got %d of %d bytes: %v", connection, n, size, err)
		}
	}
	waitLeases(t, r, 0)
	if failed := r.Workers()[0].Outcomes[core.OutcomeFailure]; failed != 0 || logs.String() != "" {
		t.Errorf("%d failures counted against the worker; logged %q", failed, logs.String())
	}
}

// A client too slow to take the answer within request_timeout_secs is cut, and the cut is the
// client's: logged as such and not counted against the worker, which sent everything at once.
func TestAClientTooSlowForTheRequestDeadlineIsNotTheWorkersFailure(t *testing.T) {
	const size = 64 << 20
	w := bulkWorker(t, size)
	r := newRouter(t, w.URL)
	g := start(t, r, Options{RequestTimeout: 0.5})
	var logs syncBuffer
	g.errorLog.SetOutput(&logs)
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 64<<10)
	for range size / len(buf) { // 64 KiB every 5 ms: 5 s for the whole answer
		if _, err := conn.Read(buf); err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitLeases(t, r, 0)
	if failed := r.Workers()[0].Outcomes[core.OutcomeFailure]; failed != 0 {
		t.Errorf("%d failures counted against the worker", failed)
	}
	if want := "the client did not take worker " + w.URL + "'s answer within request_timeout_secs (500ms)"; !strings.Contains(logs.String(), want) {
		t.Errorf("logged %q, want %q", logs.String(), want)
	}
}

// A client that left is logged as neither a timeout nor a worker's error, even when a timeout
// fired as it left (contract: HTTP proxies, step 7).
func TestABodyCutOfAClientThatLeftLogsNothing(t *testing.T) {
	g, err := New(health.New(newRouter(t, "http://"+unansweredListener(t)), health.Options{}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	g.errorLog.SetOutput(&logs)
	ex := &exchange{}
	ex.left.Store(true)
	ex.timedOut.Store(phaseTimedOut)
	g.bodyCut(ex, context.Canceled)
	if logs.String() != "" || ex.errorText != "" {
		t.Errorf("logged %q, access log error %q", logs.String(), ex.errorText)
	}
}

// The idle timeout is armed again after every read of the worker's body on both proxy steps: a
// worker streaming steadily is not cut, also on the ReverseProxy's step (a request that asked
// for an upgrade and got a plain answer).
func TestASteadyStreamIsNotCutByTheIdleTimeout(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 8 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond) // each wait well under the idle timeout, all together over it
		}
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{IdleTimeout: 0.4})
	for _, connection := range []string{"Connection: close\r\n", "Connection: Upgrade\r\nUpgrade: x\r\n"} {
		res, body := raw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\n"+connection+"\r\n")
		if res.StatusCode != 200 || strings.Count(body, "data: ") != 8 {
			t.Errorf("%q: %d %q", connection, res.StatusCode, body)
		}
	}
	waitLeases(t, r, 0)
	if failed := r.Workers()[0].Outcomes[core.OutcomeFailure]; failed != 0 {
		t.Errorf("%d failures counted against the worker", failed)
	}
}

// A client that stops reading does not hold its lease past the request's bound: the server's
// write deadline (request_timeout_secs after the body, contract: Deadlines and connections)
// ends the write the handler is blocked in.
func TestAClientThatStopsReadingIsCutAtTheRequestDeadline(t *testing.T) {
	const size = 64 << 20
	w := bulkWorker(t, size)
	r := newRouter(t, w.URL)
	g := start(t, r, Options{RequestTimeout: 0.5, BodyTimeout: 0.5})
	sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	waitLeases(t, r, 1)
	waitLeases(t, r, 0)
}

// Only the first timeout that fires says why the request was cut: the timer can fire again once
// the deadline has passed (every arm or pause resets it), and a second reason read from where the
// gateway then is would blame the client for a worker too slow for the deadline, or the reverse.
func TestTheFirstTimeoutGivesTheReason(t *testing.T) {
	ex := &exchange{deadline: time.Now().Add(-time.Second)}
	ex.expire() // a read of the worker's body waits: the worker's
	ex.writing.Store(true)
	ex.expire() // fired again while the answer is written
	if got := ex.timedOut.Load(); got != requestTimedOut || ex.stopped.err() == nil {
		t.Fatalf("timedOut %d, want %d (requestTimedOut)", got, requestTimedOut)
	}
}

// On the ReverseProxy's step (a request that asked for an upgrade and got a plain answer) a
// timeout's cut is logged as on forward's, since the ReverseProxy does not log a cancelled read.
func TestATimeoutsCutIsLoggedOnTheReverseProxysStep(t *testing.T) {
	url, _, cancelled := blockingWorker(t, true)
	r := newRouter(t, url)
	g := start(t, r, Options{IdleTimeout: 0.2})
	var logs syncBuffer
	g.errorLog.SetOutput(&logs)
	res, body := raw(t, g.Addr(), "GET /v1/x HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	if res.StatusCode != 200 || !strings.HasPrefix(body, "data: first") {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	within(t, cancelled, "the cut stream's request to the worker was not cancelled")
	waitLeases(t, r, 0)
	if want := "worker " + url + "'s stream was cut: it sent nothing for idle_timeout (200ms)"; !strings.Contains(logs.String(), want) {
		t.Errorf("logged %q, want %q", logs.String(), want)
	}
}

// bulkWorker answers every request with size zero bytes at once, with their Content-Length.
func bulkWorker(t *testing.T, size int) *httptest.Server {
	return worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(make([]byte, size))
	})
}

// An HTTP/1.0 client cannot read chunks: an answer of unknown length reaches it as it comes,
// unframed, and the connection's close ends it (RFC 9112, 6.3), as net/http's server sends it.
func TestAStreamToAnHTTP10ClientEndsWithTheClose(t *testing.T) {
	w := worker(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: a\n\n")
		w.(http.Flusher).Flush() // chunked from the worker
		io.WriteString(w, "data: b\n\n")
	})
	r := newRouter(t, w.URL)
	g := start(t, r, Options{})
	conn := sendRaw(t, g.Addr(), "GET /v1/x HTTP/1.0\r\nHost: x\r\n\r\n")
	answer, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	head, body, _ := strings.Cut(string(answer), "\r\n\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 200 OK\r\n") || strings.Contains(strings.ToLower(head), "transfer-encoding") ||
		strings.Contains(strings.ToLower(head), "content-length") || body != "data: a\n\ndata: b\n\n" {
		t.Fatalf("got %q", answer)
	}
	waitLeases(t, r, 0)
}
