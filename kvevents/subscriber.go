package kvevents

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/bounded-router/bounded-router/internal/zmqguard"
	"github.com/bounded-router/bounded-router/internal/zmqsub"
	"github.com/go-zeromq/zmq4"
)

// Subscriber consumes one worker's KV event stream: a ZeroMQ SUB socket on the engine's PUB
// endpoint (vLLM's --kv-events-config endpoint), each message the frames [topic, sequence (8
// bytes, big-endian), msgpack payload]. A sequence number past the next one expected is a gap:
// the missed batches are asked from the engine's replay endpoint (a ROUTER; vLLM's
// replay_endpoint) by sending the first missed sequence number, and read until the end marker
// (sequence -1). Whatever a batch holds, the index only sees decoded events (Apply).
type Subscriber struct {
	Index Index
	// Worker is the worker's URL in the router; Endpoint the engine's PUB endpoint
	// ("tcp://host:5557"); ReplayEndpoint its ROUTER endpoint, or "" for none.
	Worker, Endpoint, ReplayEndpoint string
	// Topic subscribed to ("" for every topic).
	Topic string
	// ReplayTimeout bounds one replay (default 1 s).
	ReplayTimeout time.Duration
	// Logf receives the first problem of each kind (nil: none are logged).
	Logf func(format string, args ...any)

	mu     sync.Mutex
	stats  Stats
	logged map[string]bool
}

// Stats are a subscriber's counters.
type Stats struct {
	Counts
	Batches uint64 // batches applied, replayed ones included
	// Gaps counts sequence gaps seen, Replayed the batches recovered by replay, Lost those
	// not recovered (no replay endpoint, or it did not have them).
	Gaps, Replayed, Lost uint64
	// Malformed counts messages that were not [topic, sequence, payload] or whose payload did
	// not decode; Restarts sequence numbers that went back (a restarted engine).
	Malformed, Restarts uint64
	// LastBatch is when the latest batch was applied (zero before the first): a caller reports
	// the worker's events as stale when it is too old, and routing then rests on what this
	// router sent there, as it does without events.
	LastBatch time.Time
	last      int64
}

// Stale reports whether no batch was applied within after of now (none ever, included): the
// worker's index then rests on what this router routed there and the engine's last reports.
func (st Stats) Stale(now time.Time, after time.Duration) bool {
	return st.LastBatch.IsZero() || now.Sub(st.LastBatch) > after
}

// Stats returns the counters.
func (s *Subscriber) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Run subscribes until ctx is done. An engine not up yet, or gone, is dialled again every
// RedialInterval; its batches count again from the next one it publishes.
func (s *Subscriber) Run(ctx context.Context) {
	s.mu.Lock()
	s.stats.last = -1
	s.logged = map[string]bool{}
	s.mu.Unlock()
	zmqsub.Run(ctx, s.Endpoint, s.Topic, func(frames [][]byte) { s.receive(ctx, frames) }, func(err error) {
		s.problem("connect", "KV events of worker %s from %s: %v", s.Worker, s.Endpoint, err)
	})
}

// RedialInterval is how long a subscriber waits before dialling an engine again.
const RedialInterval = zmqsub.RedialInterval

// receive handles one published message.
func (s *Subscriber) receive(ctx context.Context, frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.malformed("a message of %d frames, not [topic, sequence, payload]", len(frames))
		return
	}
	seq := int64(binary.BigEndian.Uint64(frames[1]))
	s.mu.Lock()
	last := s.stats.last
	s.mu.Unlock()
	switch {
	case last >= 0 && seq > last+1:
		s.recover(ctx, last+1, seq)
	case last >= 0 && seq == last:
		return // the batch applied last, sent again
	case last >= 0 && seq < last:
		// The numbering went back: the engine restarted. Its first batch seen need not be 0, as
		// ZeroMQ drops what it published before this subscriber reached it again.
		s.restarted()
	}
	s.apply(seq, frames[2])
}

// recover asks the replay endpoint for the batches from first to before next.
func (s *Subscriber) recover(ctx context.Context, first, next int64) {
	s.count(func(st *Stats) { st.Gaps++ })
	var replayed int64
	if s.ReplayEndpoint != "" {
		replayed = s.replay(ctx, first, next)
	}
	if ctx.Err() != nil {
		return // stopped: what the replay did not return says nothing of the engine
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.last = next - 1
	if missed := next - first - replayed; missed > 0 {
		s.stats.Lost += uint64(missed)
		s.logOnce("lost", "worker %s: %d KV event batches lost before sequence %d", s.Worker, missed, next)
	}
}

// replay applies the batches from first to before next that the replay endpoint returns, each
// once and in order, and says how many it applied.
func (s *Subscriber) replay(ctx context.Context, first, next int64) (applied int64) {
	timeout := s.ReplayTimeout
	if timeout <= 0 {
		timeout = time.Second
	}
	bounded, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dealer := zmq4.NewDealer(bounded, zmqguard.Quiet())
	defer dealer.Close()
	if err := dealer.Dial(zmqguard.Endpoint(s.ReplayEndpoint)); err != nil {
		s.replayFailed(ctx, err)
		return
	}
	request := binary.BigEndian.AppendUint64(nil, uint64(first))
	if err := dealer.SendMulti(zmq4.NewMsgFrom([]byte{}, request)); err != nil {
		s.replayFailed(ctx, err)
		return
	}
	after := first - 1
	for {
		msg, err := dealer.Recv()
		if err != nil {
			s.replayFailed(ctx, err)
			return
		}
		frames := msg.Frames
		if len(frames) == 3 && len(frames[0]) == 0 { // the delimiter a REQ peer would strip
			frames = frames[1:]
		}
		if len(frames) != 2 || len(frames[0]) != 8 {
			s.malformed("a replayed message of %d frames", len(frames))
			return
		}
		seq := int64(binary.BigEndian.Uint64(frames[0]))
		if seq < 0 || len(frames[1]) == 0 { // the end marker
			return
		}
		if seq > after && seq < next { // past the last one applied: none twice, none out of order
			s.apply(seq, frames[1])
			s.count(func(st *Stats) { st.Replayed++ })
			after, applied = seq, applied+1
		}
		if seq >= next-1 {
			return
		}
	}
}

// replayFailed logs a replay's failure, unless the subscription's stop (ctx) caused it: a stop
// says nothing of the engine.
func (s *Subscriber) replayFailed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		s.problem("replay", "replay from %s: %v", s.ReplayEndpoint, err)
	}
}

// apply decodes and applies one batch of sequence seq.
func (s *Subscriber) apply(seq int64, payload []byte) {
	batch, err := Decode(payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.last = seq
	if err != nil {
		s.stats.Malformed++
		s.logOnce("malformed", "worker %s: %v", s.Worker, err)
		return
	}
	if err := Apply(s.Index, s.Worker, batch, &s.stats.Counts); err != nil {
		s.logOnce("apply", "worker %s: applying KV events: %v", s.Worker, err)
		return
	}
	s.stats.Batches++
	s.stats.LastBatch = time.Now()
}

// restarted counts a restart and empties the worker's index: the engine came back with an
// empty cache, so the blocks its old run reported would draw requests it no longer serves from
// cache.
func (s *Subscriber) restarted() {
	s.count(func(st *Stats) { st.Restarts++ })
	if err := s.Index.ClearBlocks(s.Worker); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.logOnce("apply", "worker %s: forgetting the blocks of its engine before the restart: %v", s.Worker, err)
	}
}

func (s *Subscriber) count(change func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(&s.stats)
}

func (s *Subscriber) malformed(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Malformed++
	s.logOnce("malformed", "worker %s: "+format, append([]any{s.Worker}, args...)...)
}

func (s *Subscriber) problem(kind, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logOnce(kind, format, args...)
}

// logOnce logs the first problem of each kind; the caller holds s.mu.
func (s *Subscriber) logOnce(kind, format string, args ...any) {
	if s.Logf != nil && !s.logged[kind] {
		s.logged[kind] = true
		s.Logf(format+" (further problems of this kind are counted, not logged)", args...)
	}
}
