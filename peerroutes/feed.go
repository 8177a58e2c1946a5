package peerroutes

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/bounded-router/bounded-router/core"
)

// Feed shares one router's routes with its peers: a publisher (when Options.Publish is given)
// and a subscriber per peer endpoint.
type Feed struct {
	pub    *publisher
	subs   []*subscriber
	ctx    context.Context
	cancel context.CancelFunc
	ran    atomic.Bool
}

// Stats are a feed's counters, as br_feed_stats_json gives them.
type Stats struct {
	// Publish is the endpoint bound ("" for none), Published the routes sent, Dropped those
	// the queue had no room for (or the socket refused).
	Publish   string      `json:"publish"`
	Published uint64      `json:"published"`
	Dropped   uint64      `json:"dropped"`
	Peers     []PeerStats `json:"peers"`
}

// Start binds the publish endpoint (refused if the router publishes already) and prepares a
// subscriber per peer; Run then sends and receives. logf receives the first problem of each
// kind per peer (nil: none are logged).
func Start(r *core.Router, o Options, logf func(format string, args ...any)) (*Feed, error) {
	f := &Feed{}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if o.Publish != "" {
		var err error
		if f.pub, err = newPublisher(f.ctx, r, o.Publish, o.Topic); err != nil {
			f.cancel()
			return nil, err
		}
	}
	own := func() (uint64, bool) { return ownOrigin(r) }
	for _, endpoint := range o.Peers {
		f.subs = append(f.subs, newSubscriber(r, endpoint, o.Topic, own, logf))
	}
	return f, nil
}

// Run sends this router's routes and applies the peers' until ctx is done, then stops
// observing the router and closes every socket. A second call does nothing.
func (f *Feed) Run(ctx context.Context) {
	if f.ran.Swap(true) {
		return // a second Run would close again, and unregister a newer publisher of the router
	}
	defer f.cancel()
	stop := context.AfterFunc(ctx, f.cancel)
	defer stop()
	var all sync.WaitGroup
	for _, s := range f.subs {
		all.Add(1)
		go func() {
			defer all.Done()
			s.run(f.ctx)
		}()
	}
	if f.pub != nil {
		f.pub.run(f.ctx)
		f.pub.close()
	}
	all.Wait()
}

// Stats returns the counters.
func (f *Feed) Stats() Stats {
	st := Stats{Peers: []PeerStats{}}
	if f.pub != nil {
		st.Publish, st.Published, st.Dropped = f.pub.endpoint, f.pub.published.Load(), f.pub.dropped.Load()
	}
	for _, s := range f.subs {
		st.Peers = append(st.Peers, s.snapshot())
	}
	return st
}
