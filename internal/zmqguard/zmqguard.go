// Package zmqguard is the TCP transport of every ZeroMQ socket this module opens (kvevents,
// peerroutes): plain TCP underneath, with the bounds go-zeromq/zmq4 does not keep itself
// (docs/contract.md, "Sharing routes over the wire", "Bounds"). zmq4 allocates whatever size a
// frame header claims and puts no deadline on its handshake or its writes, so one connection
// could end the process (a header claiming 2^50 bytes), hang a Stop (a peer that accepts and
// never speaks) or stall a publisher for every subscriber (one that stops reading).
//
// A guarded connection reads the ZMTP 3 stream as it passes (a 64-byte greeting, then frames: a
// flags byte, a size of 1 byte or, with the long flag, 8 bytes big-endian, the body) and fails
// at a frame or a message over MaxMessageBytes or a message of more than MaxMessageFrames
// frames, before zmq4 sees its header. Its handshake must end within HandshakeTimeout (an
// accepted connection that has not completed it then is closed), a peer of a socket type zmq4
// refuses is closed at its READY (zmq4 would drop it open), and so is one whose READY zmq4
// could not read without a panic (a type it does not know, a property cut short), a SUB peer
// may send only subscriptions (MaxSubscriptions topics of at most MaxSubscriptionBytes), each write
// must end within WriteTimeout, and a dialled connection closes when its socket's context ends.
package zmqguard

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

// Scheme is the transport's name in a zmq4 endpoint ("brtcp://host:port").
const Scheme = "brtcp"

const (
	// MaxMessageBytes bounds a frame and the sum of a message's frames: the largest payload
	// either feed decodes (16 MiB) and room for its other frames.
	MaxMessageBytes = 16<<20 + 64<<10
	// MaxMessageFrames bounds the frames of one message (the feeds send 3).
	MaxMessageFrames = 16
	// HandshakeTimeout bounds the greeting and handshake of a connection.
	HandshakeTimeout = 5 * time.Second
	// WriteTimeout bounds one write: a subscriber that stops reading is dropped after it (a
	// write of the largest message to a reading peer takes milliseconds).
	WriteTimeout = time.Second
	// MaxSubscriptionBytes and MaxSubscriptions bound what a SUB peer sends: zmq4's PUB keeps
	// every topic it is sent, and queues any other message for a receive nobody makes. A frame
	// of a SUB is at most MaxSubscriptionBytes (a command too: libzmq's heartbeat PINGs), and
	// it holds at most MaxSubscriptions distinct topics at a time.
	MaxSubscriptionBytes = 64<<10 + 1
	MaxSubscriptions     = 64
)

var (
	// ErrTooLarge is a frame or message over the bounds.
	ErrTooLarge = errors.New("zmq frame or message over the bound")
	// ErrNotSubscription is a SUB peer's frame that is not a subscription, or one too many.
	ErrNotSubscription = errors.New("a subscriber sent what is not a subscription, or too many")
)

func init() {
	if err := zmq4.RegisterTransport(Scheme, guarded{}); err != nil {
		panic(err) // registered once per process, at init: a second registration is a bug
	}
}

// Endpoint is a "tcp://host:port" endpoint on the guarded transport; any other is unchanged.
func Endpoint(tcp string) string {
	if rest, ok := strings.CutPrefix(tcp, "tcp://"); ok {
		return Scheme + "://" + rest
	}
	return tcp
}

// TCP is the "tcp://host:port" form of a guarded endpoint (for what a feed reports).
func TCP(endpoint string) string {
	if rest, ok := strings.CutPrefix(endpoint, Scheme+"://"); ok {
		return "tcp://" + rest
	}
	return endpoint
}

// CheckEndpoint refuses an endpoint that is not tcp://host:port with a port from 1 to 65535;
// one to bind may give port 0, for a port the system picks (the feed's stats show it).
func CheckEndpoint(endpoint string, bind bool) error {
	hostPort, ok := strings.CutPrefix(endpoint, "tcp://")
	host, port, err := net.SplitHostPort(hostPort)
	n, perr := strconv.Atoi(port)
	if !ok || err != nil || host == "" || perr != nil || n < 1 && !(bind && n == 0) || n > 65535 {
		return fmt.Errorf("must be tcp://host:port, got %q", endpoint)
	}
	return nil
}

// Quiet is the option every socket takes: zmq4 would log each failed handshake (a scanner, a
// probe, a client the bounds cut off) to stderr itself; the feeds count and log their own.
func Quiet() zmq4.Option { return zmq4.WithLogger(log.New(io.Discard, "", 0)) }

type guarded struct{}

var tcp = transport.New("tcp")

func (guarded) Dial(ctx context.Context, dialer transport.Dialer, addr string) (net.Conn, error) {
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := guard(conn)
	c.stop = context.AfterFunc(ctx, func() { conn.Close() })
	return c, nil
}

func (guarded) Listen(ctx context.Context, addr string) (net.Listener, error) {
	ln, err := tcp.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return listener{ln}, nil
}

func (guarded) Addr(ep string) (string, error) { return tcp.Addr(ep) }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := guard(conn)
	// zmq4's accept loop drops a connection whose handshake fails without closing it.
	time.AfterFunc(HandshakeTimeout, func() {
		if !c.handshed.Load() {
			conn.Close()
		}
	})
	return c, nil
}

// conn is a guarded connection; Read is called by one goroutine at a time (zmq4's reader).
type conn struct {
	net.Conn
	stop   func() bool
	stream frames
	// sent and received keep the first bytes each way until the handshake ends: the greetings
	// and READY commands, whose socket types tell whether zmq4 will keep the connection (it
	// refuses a peer of an incompatible type without closing it). zmq4 writes its READY before
	// it reads the peer's, on the one goroutine of the handshake.
	sent, received []byte
	handshed       atomic.Bool // written by the reader, read by an accepted connection's timer
}

// topicSeed seeds the hashes of the topics subscribers send.
var topicSeed = maphash.MakeSeed()

// maxHandshakeBytes bounds what a connection keeps of each way's handshake.
const maxHandshakeBytes = 4096

func guard(c net.Conn) *conn {
	_ = c.SetDeadline(time.Now().Add(HandshakeTimeout))
	return &conn{Conn: c, stream: frames{greeting: 64}}
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		if bad := c.check(p[:n]); bad != nil {
			c.Conn.Close()
			return 0, bad
		}
	}
	return n, err
}

// check follows the bytes read; the peer's first command (READY) ends the handshake, and what
// follows it is read under the rules of the peer's socket type.
func (c *conn) check(b []byte) error {
	if c.handshed.Load() {
		_, err := c.stream.inspect(b)
		return err
	}
	c.received = keep(c.received, b)
	n, err := c.stream.inspect(b)
	if err != nil || c.stream.commands == 0 {
		return err
	}
	if err := c.handshaken(); err != nil {
		return err
	}
	_, err = c.stream.inspect(b[n:])
	return err
}

// handshaken ends the handshake's deadline, or refuses a peer whose READY zmq4 would refuse or
// could not read without a panic (one in its accept goroutine ends the process).
func (c *conn) handshaken() error {
	ours, _ := readyType(c.sent)
	peers, ok := readyType(c.received)
	c.sent, c.received = nil, nil
	if !ok {
		return errors.New("a peer's first command is not a READY naming a known socket type")
	}
	if !peers.IsCompatible(ours) { // zmq4's own test, the peer's type first
		return fmt.Errorf("a peer of socket type %s cannot talk to a %s socket", peers, ours)
	}
	if peers == zmq4.Sub || peers == zmq4.XSub {
		c.stream.subscriber = true
		c.stream.topic.SetSeed(topicSeed) // a seed of this process: no peer can aim at collisions
	}
	c.handshed.Store(true)
	_ = c.Conn.SetReadDeadline(time.Time{})
	return nil
}

// keep appends b to kept, up to maxHandshakeBytes in all.
func keep(kept, b []byte) []byte {
	return append(kept, b[:min(len(b), max(0, maxHandshakeBytes-len(kept)))]...)
}

// knownTypes are the socket types zmq4.SocketType.IsCompatible knows; it panics on any other.
var knownTypes = map[zmq4.SocketType]bool{
	zmq4.Pair: true, zmq4.Pub: true, zmq4.Sub: true, zmq4.Req: true, zmq4.Rep: true, zmq4.Dealer: true,
	zmq4.Router: true, zmq4.Pull: true, zmq4.Push: true, zmq4.XPub: true, zmq4.XSub: true,
}

// readyType is the socket type zmq4 reads from the READY command that follows the greeting in
// stream, read as zmq4 reads it (each property's name title-cased, the last Socket-Type kept),
// with ok false when zmq4 could not read it safely: no whole READY within maxHandshakeBytes,
// a property cut short (zmq4 slices past its end) or a type it does not know.
func readyType(stream []byte) (typ zmq4.SocketType, ok bool) {
	props, ok := readyProperties(stream)
	title := cases.Title(language.Und, cases.NoLower) // zmq4's; a Caser is not for sharing
	for ok && len(props) > 0 {
		var name, value string
		name, value, props, ok = property(props)
		if ok && title.String(name) == "Socket-Type" {
			typ = zmq4.SocketType(value)
		}
	}
	return typ, ok && knownTypes[typ]
}

// readyProperties is the body of the READY command after its name, when stream holds the
// greeting and that command whole.
func readyProperties(stream []byte) ([]byte, bool) {
	if len(stream) < 66 {
		return nil, false
	}
	b := stream[64:]
	size, n, whole := frameHeader(b)
	if !whole || b[0]&flagCommand == 0 || size > uint64(len(b)-n) {
		return nil, false
	}
	body := b[n : n+int(size)]
	if len(body) < 6 || string(body[:6]) != "\x05READY" {
		return nil, false
	}
	return body[6:], true
}

// property reads one ZMTP 3 property (a name of 1-byte length, a value of 4-byte big-endian
// length) off the start of props.
func property(props []byte) (name, value string, rest []byte, ok bool) {
	length := int(props[0])
	if len(props) < 1+length+4 {
		return "", "", nil, false
	}
	size := binary.BigEndian.Uint32(props[1+length:])
	if uint64(size) > uint64(len(props)-1-length-4) {
		return "", "", nil, false
	}
	end := 1 + length + 4 + int(size)
	return string(props[1 : 1+length]), string(props[1+length+4 : end]), props[end:], true
}

// Write fails past WriteTimeout and then closes the connection: zmq4 goes on writing every
// message to a connection whose write failed, and each would wait WriteTimeout again.
func (c *conn) Write(p []byte) (int, error) {
	if !c.handshed.Load() {
		c.sent = keep(c.sent, p)
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(WriteTimeout))
	n, err := c.Conn.Write(p)
	if err != nil {
		c.Conn.Close()
	}
	return n, err
}

func (c *conn) Close() error {
	if c.stop != nil {
		c.stop()
	}
	return c.Conn.Close()
}

// frames follows a ZMTP 3 byte stream: the greeting's bytes left, then the frame being read.
type frames struct {
	greeting int
	header   [9]byte
	have     int    // bytes of the current header read
	body     uint64 // bytes of the current frame's body left
	command  bool   // the current frame is a command
	commands int    // commands completed
	message  struct{ frames, bytes uint64 }
	// subscriber: the peer is a SUB, whose messages must all be subscriptions: a first byte of
	// 0 (cancel) or 1 (subscribe), read while unchecked is set, then the topic, whose hash
	// topic takes as it passes. topics holds the hashes of the topics it subscribes to.
	subscriber, unchecked, subscribing bool
	topic                              maphash.Hash
	topics                             map[uint64]bool
}

const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// inspect advances over b and says how far it read, or why the stream breaks the bounds; it
// stops after the peer's first command (its READY), whose end changes the rules.
func (f *frames) inspect(b []byte) (int, error) {
	start, handshaking := len(b), f.commands == 0
	for len(b) > 0 && !(handshaking && f.commands > 0) {
		switch {
		case f.greeting > 0:
			n := min(f.greeting, len(b))
			f.greeting, b = f.greeting-n, b[n:]
		case f.body > 0:
			n := min(f.body, uint64(len(b)))
			if err := f.readTopic(b[:n]); err != nil {
				return 0, err
			}
			f.body, b = f.body-n, b[n:]
			if f.body == 0 && f.command {
				f.commands++
			} else if f.body == 0 && f.subscriber {
				if err := f.subscribed(); err != nil {
					return 0, err
				}
			}
		default:
			f.header[f.have], f.have, b = b[0], f.have+1, b[1:]
			if err := f.headerRead(); err != nil {
				return 0, err
			}
		}
	}
	return start - len(b), nil
}

// frameHeader reads the frame header at the start of b: the frame's size and the header's
// length, with whole false while b holds less than the whole header.
func frameHeader(b []byte) (size uint64, length int, whole bool) {
	switch {
	case len(b) < 2:
		return 0, 0, false
	case b[0]&flagLong == 0:
		return uint64(b[1]), 2, true
	case len(b) < 9:
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(b[1:9]), 9, true
}

// subscription checks the header of a SUB peer's frame: a command or a one-frame message of
// at most MaxSubscriptionBytes, the message not empty (readTopic reads it).
func (f *frames) subscription(flags byte, size uint64) error {
	command := flags&flagCommand != 0
	if size > MaxSubscriptionBytes || !command && (flags&flagMore != 0 || size == 0) {
		return fmt.Errorf("%w: a frame of %d bytes, flags %#x", ErrNotSubscription, size, flags)
	}
	if !command {
		f.unchecked = true
		f.topic.Reset()
	}
	return nil
}

// readTopic follows the body of a SUB peer's subscription as it passes.
func (f *frames) readTopic(b []byte) error {
	if !f.subscriber || f.command {
		return nil
	}
	if f.unchecked {
		if b[0] > 1 {
			return fmt.Errorf("%w: a message starting %#x", ErrNotSubscription, b[0])
		}
		f.subscribing, f.unchecked, b = b[0] == 1, false, b[1:]
	}
	f.topic.Write(b)
	return nil
}

// subscribed counts the topic of a subscription read whole, and takes off a cancelled one.
func (f *frames) subscribed() error {
	if f.topics == nil {
		f.topics = map[uint64]bool{}
	}
	if !f.subscribing {
		delete(f.topics, f.topic.Sum64())
		return nil
	}
	f.topics[f.topic.Sum64()] = true
	if len(f.topics) > MaxSubscriptions {
		return fmt.Errorf("%w: %d topics, more than %d", ErrNotSubscription, len(f.topics), MaxSubscriptions)
	}
	return nil
}

// headerRead starts the frame once its header is whole.
func (f *frames) headerRead() error {
	size, _, whole := frameHeader(f.header[:f.have])
	if !whole {
		return nil
	}
	flags := f.header[0]
	f.have, f.command = 0, flags&flagCommand != 0
	if f.subscriber {
		if err := f.subscription(flags, size); err != nil {
			return err
		}
	}
	if !f.command {
		f.message.frames++
		f.message.bytes += min(size, MaxMessageBytes+1)
		if f.message.frames > MaxMessageFrames || f.message.bytes > MaxMessageBytes {
			return fmt.Errorf("%w: %d frames, %d bytes", ErrTooLarge, f.message.frames, f.message.bytes)
		}
		if flags&flagMore == 0 {
			f.message.frames, f.message.bytes = 0, 0
		}
	} else if size > MaxMessageBytes {
		return fmt.Errorf("%w: a command of %d bytes", ErrTooLarge, size)
	}
	f.body = size
	if size == 0 && f.command {
		f.commands++
	}
	return nil
}
