package zmqguard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"github.com/bounded-router/bounded-router/internal/loopback"
	"github.com/bounded-router/bounded-router/internal/zmqguard"
	"github.com/bounded-router/bounded-router/internal/zmqsub"
)

// guardedPublisher is a PUB socket on the guarded transport at a free loopback endpoint; the
// test's cleanup closes it.
func guardedPublisher(t *testing.T) (zmq4.Socket, string) {
	endpoint := loopback.FreeEndpoint(t)
	ctx, cancel := context.WithCancel(context.Background())
	pub := zmq4.NewPub(ctx, zmqguard.Quiet())
	t.Cleanup(func() { pub.Close(); cancel() })
	require.NoError(t, pub.Listen(zmqguard.Endpoint(endpoint)))
	return pub, endpoint
}

// subscribed follows endpoint on a guarded SUB until the returned stop, counting messages.
func subscribed(endpoint string) (got *atomic.Int64, stop func()) {
	got = new(atomic.Int64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		zmqsub.Run(ctx, endpoint, "", func([][]byte) { got.Add(1) }, func(error) {})
	}()
	return got, func() { cancel(); <-done }
}

// A client that claims a huge frame is cut off, and the publisher goes on serving the others.
func TestAHugeFrameLeavesThePublisherServing(t *testing.T) {
	pub, endpoint := guardedPublisher(t)

	attacker, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
	require.NoError(t, err)
	defer attacker.Close()
	_, err = attacker.Write(append(zmqguard.Greeting(), zmqguard.LongHeader(zmqguard.FlagCommand, 1<<50)...))
	require.NoError(t, err)
	require.NoError(t, attacker.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 256)
	for {
		if _, err := attacker.Read(buf); err != nil {
			break // the publisher closed it (or the deadline passed: the wait below then fails)
		}
	}

	got, stop := subscribed(endpoint)
	defer stop()
	loopback.WaitFor(t, "a message through the publisher", func() bool {
		_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), []byte("x")))
		return got.Load() > 0
	})
}

// A peer that accepts and never speaks does not hold a subscriber past its context.
func TestASilentPeerDoesNotHoldAStop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		zmqsub.Run(ctx, "tcp://"+ln.Addr().String(), "", func([][]byte) {}, func(error) {})
	}()
	time.Sleep(50 * time.Millisecond) // let the dial reach the handshake
	cancel()
	select {
	case <-done:
	case <-time.After(zmqguard.HandshakeTimeout + 5*time.Second):
		t.Fatal("the subscriber did not stop: its handshake held it")
	}
}

// A subscriber that stops reading is cut off after WriteTimeout; the others go on receiving.
func TestAStalledSubscriberDoesNotStallTheOthers(t *testing.T) {
	pub, endpoint := guardedPublisher(t)
	got, stop := subscribed(endpoint)
	defer stop()
	small := zmq4.NewMsgFrom([]byte("t"), []byte("x"))
	loopback.WaitFor(t, "the healthy subscriber", func() bool { _ = pub.Send(small); return got.Load() > 0 })

	handSub(t, endpoint, true) // then never read again

	big := zmq4.NewMsgFrom([]byte("t"), make([]byte, 1<<20))
	before := got.Load()
	loopback.WaitFor(t, "200 messages past the stalled subscriber", func() bool {
		_ = pub.Send(big)
		return got.Load()-before >= 200
	})
}

// Regression (found by an audit): zmq4's accept loop drops a connection whose handshake fails
// (a garbage greeting, or none within HandshakeTimeout) without closing it, so every such
// client left a socket open, after the publisher's Stop too. The guard closes an accepted
// connection that has not completed its handshake by HandshakeTimeout.
func TestConnectionsThatNeverCompleteAHandshakeAreClosed(t *testing.T) {
	_, endpoint := guardedPublisher(t)
	var clients []net.Conn
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
		require.NoError(t, err)
		defer c.Close()
		if i > 0 { // the first stays silent; the others send a greeting that is not ZMTP's
			_, err = c.Write(make([]byte, 64))
			require.NoError(t, err)
		}
		clients = append(clients, c)
	}
	for i, c := range clients {
		requireClosed(t, c, zmqguard.HandshakeTimeout+5*time.Second, "client %d", i)
	}
}

// requireClosed reads c (the publisher's greeting and READY, whatever it sends) until the
// publisher closes it, and fails if it has not within the time given.
func requireClosed(t *testing.T, c net.Conn, within time.Duration, what string, args ...any) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
	buf := make([]byte, 256)
	var err error
	for n := 0; n < 100 && err == nil; n++ {
		_, err = c.Read(buf)
	}
	// Unread bytes at the close make it a reset.
	closed := errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	require.True(t, closed, "%s: the publisher kept the connection (%v)", fmt.Sprintf(what, args...), err)
}

// Regressions. A peer that completed a valid handshake as a socket type the publisher refuses
// (zmq4 checks the types after READY and drops the connection without closing it) counted as
// handshaken, so its connection stayed open. And (found by a review) go-zeromq/zmq4 panics, in
// its accept goroutine where nothing recovers, on a READY whose Socket-Type it does not know
// (none, a name it does not title-case to Socket-Type, an unknown type, the last of two) or
// whose property is cut short, so one such peer ended the process of a guarded socket. The guard
// closes each at its READY, and the publisher goes on serving.
func TestAPeerWhoseReadyZmq4CannotReadIsClosed(t *testing.T) {
	pub, endpoint := guardedPublisher(t)
	for name, body := range map[string]string{
		"a PUB peer":                  "READY\x0bSocket-Type\x00\x00\x00\x03PUB",
		"an upper-case property name": "READY\x0bSOCKET-TYPE\x00\x00\x00\x03SUB",
		"no Socket-Type":              "READY",
		"a property cut short":        "READY\x01",
		"an unknown socket type":      "READY\x0bSocket-Type\x00\x00\x00\x03FOO",
		"an unknown type after SUB":   "READY\x0bSocket-Type\x00\x00\x00\x03SUB\x0bsocket-type\x00\x00\x00\x03FOO",
		"another command":             "ERROR\x0bSocket-Type\x00\x00\x00\x03SUB",
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
		require.NoError(t, err)
		ready := append([]byte{zmqguard.FlagCommand, byte(len(body) + 1), 5}, body...)
		_, err = c.Write(append(zmqguard.Greeting(), ready...))
		require.NoError(t, err)
		requireClosed(t, c, zmqguard.HandshakeTimeout+5*time.Second, "%s", name)
		c.Close()
	}
	got, stop := subscribed(endpoint)
	defer stop()
	loopback.WaitFor(t, "a message through the publisher", func() bool {
		_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), []byte("x")))
		return got.Load() > 0
	})
}

// handSub is a SUB by hand (greeting, READY, a subscription to every topic) that has read the
// publisher's greeting and READY; stalled makes its receive buffer small, for a peer that never
// reads.
func handSub(t *testing.T, endpoint string, stalled bool) net.Conn {
	c, err := net.Dial("tcp", strings.TrimPrefix(endpoint, "tcp://"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	if stalled {
		require.NoError(t, c.(*net.TCPConn).SetReadBuffer(4096))
	}
	ready := append([]byte{zmqguard.FlagCommand, 25, 5}, "READY\x0bSocket-Type\x00\x00\x00\x03SUB"...)
	_, err = c.Write(append(append(zmqguard.Greeting(), ready...), 0x00, 0x01, 0x01))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
	_, err = io.ReadFull(c, make([]byte, 64))
	require.NoError(t, err)
	head := make([]byte, 2)
	_, err = io.ReadFull(c, head)
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, head[1]))
	require.NoError(t, err)
	return c
}

// Regression: zmq4's PUB keeps every topic a subscriber sends (each up to a frame's bound) and
// queues any other message from it for a receive the publisher never makes, so one subscriber
// could hold memory without bound. A SUB peer may send subscriptions only: single frames of at
// most MaxSubscriptionBytes starting 0 or 1, at most MaxSubscriptions of them.
func TestASubscriberSendsSubscriptionsOnly(t *testing.T) {
	_, endpoint := guardedPublisher(t)
	many := []byte{}
	for i := 0; i < zmqguard.MaxSubscriptions; i++ {
		many = append(many, 0x00, 0x02, 0x01, byte(i))
	}
	big := zmqguard.LongHeader(0, zmqguard.MaxSubscriptionBytes+1)
	for name, tail := range map[string][]byte{
		"a message":                 {0x00, 0x02, 0x07, 'x'},
		"an empty frame":            {0x00, 0x00},
		"two frames":                {0x01, 0x01, 0x01, 0x00, 0x01, 0x01},
		"a subscription over bound": append(big, 0x01),
		"one topic too many":        many,
		"a command over the bound":  append(zmqguard.LongHeader(zmqguard.FlagCommand, zmqguard.MaxSubscriptionBytes+1), 0x04),
	} {
		c := handSub(t, endpoint, false)
		_, err := c.Write(tail)
		require.NoError(t, err)
		requireClosed(t, c, 5*time.Second, "%s", name)
	}
	// Within the bounds (regressions, found by a review of the first rule): MaxSubscriptions
	// topics; one topic sent again and again (a zmq4 SUB sends its topics to every publisher
	// each time it connects to one more); libzmq's heartbeat PINGs.
	again := []byte{}
	for i := 0; i < 10*zmqguard.MaxSubscriptions; i++ {
		again = append(again, 0x00, 0x02, 0x01, 'k')
	}
	ping := []byte{zmqguard.FlagCommand, 0x07, 0x04, 'P', 'I', 'N', 'G', 0x00, 0x0a}
	for name, tail := range map[string][]byte{
		"MaxSubscriptions topics": many[:len(many)-4], // with its own "": MaxSubscriptions
		"one topic, many times":   again,
		"PINGs":                   bytes.Repeat(ping, 100),
	} {
		c := handSub(t, endpoint, false)
		_, err := c.Write(tail)
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Second)))
		_, err = c.Read(make([]byte, 1))
		if err == nil {
			continue // the publisher answered (a PONG): it kept the connection
		}
		require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%s: the publisher closed a subscriber within the bounds: %v", name, err)
	}
}

// Regression (found by a review of the first fix for a refused socket type, which counted a
// connection as handshaken only at zmq4's next read): while the publisher's send loop waits on
// stalled subscribers, zmq4 cannot register a new one, so it did not read on within
// HandshakeTimeout and a subscriber that had completed its handshake was closed.
func TestAValidSubscriberSurvivesASlowSendLoop(t *testing.T) {
	pub, endpoint := guardedPublisher(t)
	for i := 0; i < 7; i++ {
		handSub(t, endpoint, true) // never reads: each send waits WriteTimeout on it
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, pub.Send(zmq4.NewMsgFrom([]byte("t"), make([]byte, 8<<20))))
	time.Sleep(300 * time.Millisecond)
	valid := handSub(t, endpoint, false)
	require.NoError(t, valid.SetReadDeadline(time.Now().Add(zmqguard.HandshakeTimeout+4*time.Second)))
	_, err := valid.Read(make([]byte, 1))
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "the publisher closed a subscriber that completed its handshake: %v", err)
}

// Regression (found by a review of the first subscriber rule, which counted subscription
// messages): a zmq4 SUB sends all its topics to every publisher each time it connects to one
// more, so one following 64 other publishers went past the count and was reset.
func TestAZmq4SubFollowingManyPublishersIsKept(t *testing.T) {
	pub, endpoint := guardedPublisher(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := zmq4.NewSub(ctx, zmqguard.Quiet())
	defer sub.Close()
	require.NoError(t, sub.Dial(zmqguard.Endpoint(endpoint)))
	require.NoError(t, sub.SetOption(zmq4.OptionSubscribe, ""))
	for i := 0; i < zmqguard.MaxSubscriptions+8; i++ {
		other := zmq4.NewPub(ctx, zmqguard.Quiet())
		defer other.Close()
		require.NoError(t, other.Listen(zmqguard.Endpoint(loopback.FreeEndpoint(t))))
		require.NoError(t, sub.Dial(zmqguard.Endpoint("tcp://"+other.Addr().String())))
	}
	got := make(chan error, 1)
	go func() {
		for i := 0; i < 5; i++ {
			if _, err := sub.Recv(); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	loopback.WaitFor(t, "five messages through the publisher", func() bool {
		_ = pub.Send(zmq4.NewMsgFrom([]byte("t"), []byte("x")))
		select {
		case err := <-got:
			require.NoError(t, err)
			return true
		default:
			return false
		}
	})
}
