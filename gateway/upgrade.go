package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// upgrade proxies a request that asks to switch protocols (WebSocket and the like): the
// request goes to its worker with its Connection: Upgrade and Upgrade headers; an answer other
// than 101 is passed on as any answer, and a 101 for the protocol asked for hands both
// connections over to a copy each way, which ends when either side closes, the client leaves or
// request_timeout_secs passes. The lease is held until then. Contract: HTTP proxies, step 7.
func (g *Gateway) upgrade(ctx *fasthttp.RequestCtx, ex *exchange, protocol []byte) {
	ex.out.upgrade = protocol
	if !g.send(ctx, ex) {
		return
	}
	body := ex.upstream
	if ex.answer.StatusCode() != fasthttp.StatusSwitchingProtocols {
		g.answer(ctx, ex)
		return
	}
	if got := ex.answer.Header.Peek("Upgrade"); !bytes.EqualFold(got, protocol) {
		g.proxyError(ctx, ex, fmt.Errorf("backend tried to switch protocol %q when %q was requested", got, protocol))
		return
	}
	// An upgraded connection is the client's and the worker's to close, within the deadline
	// (which finishes a hijack that never ran: pending before the timer is set).
	ex.hijacking.Store(hijackPending)
	ex.timer.Reset(time.Until(ex.deadline))
	ex.status = fasthttp.StatusSwitchingProtocols
	res := &ctx.Response
	res.SetStatusCode(fasthttp.StatusSwitchingProtocols)
	copyAnswerHeaders(&res.Header, &ex.answer.Header)
	res.Header.Set("Connection", "Upgrade")
	res.Header.SetBytesV("Upgrade", protocol)
	if g.opts.ExposeRoutingHeaders {
		res.Header.Set(HeaderWorker, ex.decision.WorkerURL)
		res.Header.Set(HeaderBranch, ex.decision.Branch.String())
	}
	worker := body.(io.ReadWriter)
	g.hijack(ctx, ex, func(client net.Conn) {
		done := make(chan struct{}, 2)
		go func() { io.Copy(worker, client); done <- struct{}{} }()
		go func() {
			n, _ := io.Copy(client, worker)
			ex.sent = n
			done <- struct{}{}
		}()
		// Either side's end ends both: a cancel (the deadline, the client leaving) closes the
		// worker's side; the client's is fasthttp's to close once this returns, so its reads and
		// writes are cut by a deadline now.
		<-done
		client.SetDeadline(time.Now())
		body.Close()
		<-done
	})
}

// Where a hijacked connection is in its life (exchange.hijacking).
const (
	notHijacked = iota
	hijackPending
	hijackRunning
	hijackAbandoned // the deadline came first: the request was finished without it
)

// hijack writes the answer set on ctx (its head) on the client's connection itself, then runs
// copy on it, and finishes the request. fasthttp runs the hijack after the handler returns unless
// it cannot flush an earlier answer on the connection; the request's deadline then finishes it.
// Writes to the client are bounded as a proxied answer's are.
func (g *Gateway) hijack(ctx *fasthttp.RequestCtx, ex *exchange, copy func(client net.Conn)) {
	head := append([]byte(nil), ctx.Response.Header.Header()...)
	ex.hijacking.Store(hijackPending)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(client net.Conn) {
		if !ex.hijacking.CompareAndSwap(hijackPending, hijackRunning) {
			return
		}
		defer g.finish(ex)
		defer g.recoverCopy(ex)
		client.SetWriteDeadline(ex.deadline.Add(seconds(g.opts.BodyTimeout)))
		if _, err := client.Write(head); err == nil {
			copy(client)
		}
	})
}

// recoverCopy keeps a panic in an upgraded connection's copy from ending the process: it runs on
// a goroutine of fasthttp's, which recovers nothing.
func (g *Gateway) recoverCopy(ex *exchange) {
	if p := recover(); p != nil {
		g.errorLog.Printf("panic copying the upgraded connection to worker %s: %v", ex.decision.WorkerURL, p)
		ex.aborted = true
	}
}
