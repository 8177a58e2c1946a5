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
	ex.out.target = ex.target
	ex.out.header = &ctx.Request.Header
	ex.out.upgrade = protocol
	ex.answer = fasthttp.AcquireResponse()
	body, err := g.roundTrips(ex)
	if err != nil {
		g.proxyError(ctx, ex, err)
		return
	}
	ex.upstream = body
	if ex.answer.StatusCode() != fasthttp.StatusSwitchingProtocols {
		g.answer(ctx, ex)
		return
	}
	if got := ex.answer.Header.Peek("Upgrade"); !bytes.EqualFold(got, protocol) {
		g.proxyError(ctx, ex, fmt.Errorf("backend tried to switch protocol %q when %q was requested", got, protocol))
		return
	}
	// An upgraded connection is the client's and the worker's to close, within the deadline.
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
	// The 101 goes out at once; if it cannot, no hijack follows and the head's close finishes.
	res.ImmediateHeaderFlush = true
	res.SetBodyStream(upgradeHead{g, ex}, 0)
	worker := body.(io.ReadWriter)
	ctx.Hijack(func(client net.Conn) {
		defer g.finish(ex)
		defer g.recoverCopy(ex)
		ex.writing.Store(true)
		done := make(chan struct{}, 2)
		go func() { io.Copy(worker, client); done <- struct{}{} }()
		go func() {
			n, _ := io.Copy(client, worker)
			ex.sent = n
			done <- struct{}{}
		}()
		<-done // a cancel (the deadline, the client leaving) closes the worker's side, which ends it
		client.Close()
		body.Close()
		<-done
		<-done
	})
}

// upgradeHead is the body stream of a 101 answer, which has none: the server closes it once it
// has written the head, with the write's error, after which no hijack follows.
type upgradeHead struct {
	g  *Gateway
	ex *exchange
}

func (upgradeHead) Read([]byte) (int, error) { return 0, io.EOF }
func (upgradeHead) Close() error             { return nil }

func (h upgradeHead) CloseWithError(err error) error {
	if err != nil {
		h.g.finish(h.ex)
	}
	return nil
}

// recoverCopy keeps a panic in an upgraded connection's copy from ending the process: it runs on
// a goroutine of fasthttp's, which recovers nothing.
func (g *Gateway) recoverCopy(ex *exchange) {
	if p := recover(); p != nil {
		g.errorLog.Printf("panic copying the upgraded connection to worker %s: %v", ex.decision.WorkerURL, p)
		ex.aborted = true
	}
}
