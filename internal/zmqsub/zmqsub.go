// Package zmqsub follows a ZeroMQ PUB endpoint with a SUB socket, dialling it again while it is
// down: the loop the KV event subscriber (kvevents) and the peer route subscriber (peerroutes)
// share. What a message means is theirs.
package zmqsub

import (
	"context"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/bounded-router/bounded-router/internal/zmqguard"
)

// RedialInterval is how long Run waits before dialling the endpoint again.
const RedialInterval = time.Second

// Run subscribes to topic (a prefix; "" for every message) on endpoint until ctx is done and
// gives receive each message's frames, on this goroutine. A failure to dial, or a connection
// lost, goes to problem, and the endpoint is dialled again RedialInterval later.
func Run(ctx context.Context, endpoint, topic string, receive func(frames [][]byte), problem func(error)) {
	for ctx.Err() == nil {
		if err := follow(ctx, endpoint, topic, receive); err != nil && ctx.Err() == nil {
			problem(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(RedialInterval):
		}
	}
}

func follow(ctx context.Context, endpoint, topic string, receive func(frames [][]byte)) error {
	sub := zmq4.NewSub(ctx, zmqguard.Quiet())
	defer sub.Close()
	if err := sub.Dial(zmqguard.Endpoint(endpoint)); err != nil {
		return err
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		return err
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			return err
		}
		receive(msg.Frames)
	}
}
