package peerroutes

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/bounded-router/bounded-router/core"
	"github.com/bounded-router/bounded-router/internal/zmqsub"
)

// Applier is what peers' routes are applied to: core.Router satisfies it.
type Applier interface {
	PeerRoute(url string, weight int64, blocks []uint64) error
}

// PeerStats are the counters of one peer endpoint.
type PeerStats struct {
	Peer string `json:"peer"`
	// Batches and Routes count what was applied; Own the batches of this router's own
	// publisher, skipped (its endpoint is among the peers).
	Batches uint64 `json:"batches"`
	Routes  uint64 `json:"routes"`
	Own     uint64 `json:"own"`
	// UnknownWorker counts routes to a URL that is not a member here, Invalid those PeerRoute
	// refused otherwise (a weight or block count out of range), Malformed the messages that
	// were not [topic, sequence, payload] or whose payload did not decode, Gaps the sequence
	// jumps of one origin (messages lost on the way).
	UnknownWorker uint64 `json:"unknown_worker"`
	Invalid       uint64 `json:"invalid"`
	Malformed     uint64 `json:"malformed"`
	Gaps          uint64 `json:"gaps"`
}

// subscriber follows one peer's PUB endpoint. One socket per peer, not one for all: the SUB
// socket of go-zeromq/zmq4 does not say which connection a failure came from, and its automatic
// reconnect redials only the endpoint dialled last.
type subscriber struct {
	router   Applier
	endpoint string
	topic    string
	// own reports the origin of this router's own publisher, if it has one.
	own  func() (uint64, bool)
	logf func(format string, args ...any)

	mu      sync.Mutex
	stats   PeerStats
	origin  uint64 // of the last batch, whose sequence was last
	last    uint64
	started bool
	logged  map[string]bool
}

func newSubscriber(router Applier, endpoint, topic string, own func() (uint64, bool), logf func(string, ...any)) *subscriber {
	return &subscriber{router: router, endpoint: endpoint, topic: topic, own: own, logf: logf, stats: PeerStats{Peer: endpoint}, logged: map[string]bool{}}
}

func (s *subscriber) snapshot() PeerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// run follows the peer until ctx is done, dialling it again every zmqsub.RedialInterval while it
// is not up (or gone).
func (s *subscriber) run(ctx context.Context) {
	zmqsub.Run(ctx, s.endpoint, s.topic, s.receive, func(err error) {
		s.logOnce("connect", "peer routes from %s: %v", s.endpoint, err)
	})
}

// receive handles one published message.
func (s *subscriber) receive(frames [][]byte) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.count(func(st *PeerStats) { st.Malformed++ })
		s.logOnce("malformed", "peer routes from %s: a message of %d frames, not [topic, sequence, payload]", s.endpoint, len(frames))
		return
	}
	b, err := Decode(frames[2])
	if err != nil {
		s.count(func(st *PeerStats) { st.Malformed++ })
		s.logOnce("malformed", "peer routes from %s: %v", s.endpoint, err)
		return
	}
	if origin, ok := s.own(); ok && origin == b.Origin {
		s.count(func(st *PeerStats) { st.Own++ })
		return
	}
	s.sequence(b.Origin, binary.BigEndian.Uint64(frames[1]))
	s.apply(b.Routes)
}

// sequence counts a jump in one origin's sequence; a new origin (a peer restarted) starts afresh.
func (s *subscriber) sequence(origin, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started && origin == s.origin && seq > s.last+1 {
		s.stats.Gaps++
		s.logOnceLocked("gaps", "peer routes from %s: messages lost before sequence %d", s.endpoint, seq)
	}
	s.origin, s.last, s.started = origin, seq, true
}

// apply records each route with the router, outside the subscriber's lock.
func (s *subscriber) apply(routes []Route) {
	var add PeerStats
	var unknown, invalid error // the first of each kind
	for _, r := range routes {
		err := core.CheckWeight(r.Weight) // 0 too: the Go call's 1, a rule broken on the wire
		if err == nil {
			err = s.router.PeerRoute(r.URL, r.Weight, r.Blocks)
		}
		switch {
		case err == nil:
			add.Routes++
		case errors.Is(err, core.ErrUnknownWorker):
			add.UnknownWorker++
			unknown = cmp.Or(unknown, err)
		default:
			add.Invalid++
			invalid = cmp.Or(invalid, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Batches++
	s.stats.Routes += add.Routes
	s.stats.UnknownWorker += add.UnknownWorker
	s.stats.Invalid += add.Invalid
	if unknown != nil {
		s.logOnceLocked("unknown_worker", "peer routes from %s: %v", s.endpoint, unknown)
	}
	if invalid != nil {
		s.logOnceLocked("invalid", "peer routes from %s: %v", s.endpoint, invalid)
	}
}

func (s *subscriber) count(change func(*PeerStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(&s.stats)
}

func (s *subscriber) logOnce(kind, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logOnceLocked(kind, format, args...)
}

// maxLogged bounds a logged problem: a peer's worker URL may be megabytes long.
const maxLogged = 512

// logOnceLocked logs the first problem of each kind; the caller holds s.mu.
func (s *subscriber) logOnceLocked(kind, format string, args ...any) {
	if s.logf != nil && !s.logged[kind] {
		s.logged[kind] = true
		msg := fmt.Sprintf(format, args...)
		if len(msg) > maxLogged {
			msg = msg[:maxLogged] + "..."
		}
		s.logf("%s (further problems of this kind are counted, not logged)", msg)
	}
}
