package peerroutes

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/internal/zmqguard"
	"github.com/go-zeromq/zmq4"
)

// Bounds of the publisher (docs/contract.md, "Sharing routes over the wire"). A route the
// queue has no room for is dropped and counted: the request path never waits on the feed.
const (
	// MaxQueuedRoutes and MaxQueuedBlocks bound the routes waiting to be sent (their blocks
	// included: a route may carry 65,536 of them).
	MaxQueuedRoutes = 4096
	MaxQueuedBlocks = 1 << 20
	// BatchRoutes bounds the routes of one message; a message stops taking routes once it
	// carries BatchBlocks blocks (so at most 2^17 blocks, about 1.2 MiB); FlushInterval is how
	// long the first route of a message waits for others to join it.
	BatchRoutes   = 1024
	BatchBlocks   = 1 << 16
	FlushInterval = time.Millisecond
	// sendQueue bounds the messages the PUB socket holds for its peers (ZeroMQ's high-water
	// mark; past it the socket drops them): with BatchBlocks, about 40 MiB at most.
	sendQueue = 32
)

// publishing holds the origin of each router's publisher: a router has one at most, since it
// has one route observer, and its subscribers skip that origin.
var publishing = struct {
	sync.Mutex
	origins map[*core.Router]uint64
}{origins: map[*core.Router]uint64{}}

func ownOrigin(r *core.Router) (uint64, bool) {
	publishing.Lock()
	defer publishing.Unlock()
	origin, ok := publishing.origins[r]
	return origin, ok
}

// publisher sends the routes of one router on a ZeroMQ PUB socket.
type publisher struct {
	router   *core.Router
	origin   uint64
	topic    []byte
	socket   zmq4.Socket
	endpoint string // as bound (the system's port when 0 was asked)
	flush    time.Duration

	queue chan Route
	// queued counts the blocks of the routes queued or in the batch being built; only the
	// observer (under the router's lock) adds to it.
	queued             atomic.Int64
	published, dropped atomic.Uint64
	sequence           uint64
}

// newPublisher binds endpoint and observes r's routes; close undoes both.
func newPublisher(ctx context.Context, r *core.Router, endpoint, topic string) (*publisher, error) {
	p := &publisher{router: r, origin: rand.Uint64(), topic: []byte(topic), flush: FlushInterval, queue: make(chan Route, MaxQueuedRoutes)}
	publishing.Lock()
	defer publishing.Unlock()
	if _, ok := publishing.origins[r]; ok {
		return nil, fmt.Errorf("peer routes: this router publishes its routes already (one publisher per router: stop the other feed first)")
	}
	p.socket = zmq4.NewPub(ctx, zmqguard.Quiet())
	if err := p.socket.Listen(zmqguard.Endpoint(endpoint)); err != nil {
		p.socket.Close()
		return nil, fmt.Errorf("peer routes: publish on %s: %w", endpoint, err)
	}
	_ = p.socket.SetOption(zmq4.OptionHWM, sendQueue) // a PUB socket takes it
	p.endpoint = "tcp://" + p.socket.Addr().String()
	publishing.origins[r] = p.origin
	r.ObserveRoutes(p.observe)
	return p, nil
}

// observe is the router's route observer: it copies the route into the queue, or drops it.
func (p *publisher) observe(url string, weight int64, blocks []uint64) {
	if p.queued.Load()+int64(len(blocks)) > MaxQueuedBlocks {
		p.dropped.Add(1)
		return
	}
	select {
	case p.queue <- Route{URL: url, Weight: weight, Blocks: slices.Clone(blocks)}:
		p.queued.Add(int64(len(blocks)))
	default:
		p.dropped.Add(1)
	}
}

// run sends batches until ctx is done.
func (p *publisher) run(ctx context.Context) {
	timer := time.NewTimer(p.flush)
	defer timer.Stop()
	batch := Batch{Origin: p.origin}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-p.queue:
			batch.Routes = append(batch.Routes[:0], r)
		}
		blocks := len(batch.Routes[0].Blocks)
		timer.Reset(p.flush)
	fill:
		for len(batch.Routes) < BatchRoutes && blocks < BatchBlocks {
			select {
			case r := <-p.queue:
				batch.Routes, blocks = append(batch.Routes, r), blocks+len(r.Blocks)
			case <-timer.C:
				break fill
			case <-ctx.Done():
				return
			}
		}
		p.send(batch)
	}
}

// send publishes one batch and frees its room in the queue.
func (p *publisher) send(b Batch) {
	blocks := 0
	for _, r := range b.Routes {
		blocks += len(r.Blocks)
	}
	defer p.queued.Add(-int64(blocks))
	payload := Encode(b)
	if len(payload) > MaxPayloadBytes { // only URLs of kilobytes could do this
		p.dropped.Add(uint64(len(b.Routes)))
		return
	}
	seq := binary.BigEndian.AppendUint64(nil, p.sequence)
	p.sequence++
	if err := p.socket.SendMulti(zmq4.NewMsgFrom(p.topic, seq, payload)); err != nil {
		p.dropped.Add(uint64(len(b.Routes)))
		return
	}
	p.published.Add(uint64(len(b.Routes)))
}

// close stops observing the router and unbinds.
func (p *publisher) close() {
	p.router.ObserveRoutes(nil)
	publishing.Lock()
	delete(publishing.origins, p.router)
	publishing.Unlock()
	p.socket.Close()
}
