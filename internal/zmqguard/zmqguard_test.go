package zmqguard

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The ZMTP 3 wire format, written out by hand (rfc.zeromq.org/spec/23): the greeting, then
// frames of a flags byte (0x01 more, 0x02 long, 0x04 command), a 1- or 8-byte size, the body.
func greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	return g
}

func shortFrame(flags byte, body string) []byte {
	return append([]byte{flags, byte(len(body))}, body...)
}

func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
}

// inspectAll inspects the whole of b, past the handshake where inspect stops.
func (f *frames) inspectAll(b []byte) error {
	for len(b) > 0 {
		n, err := f.inspect(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func TestFramesFollowAStreamInAnyPieces(t *testing.T) {
	ready := shortFrame(flagCommand, "\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
	stream := append(greeting(), ready...)
	stream = append(stream, shortFrame(flagMore, "topic")...)
	stream = append(stream, shortFrame(flagMore, "12345678")...)
	stream = append(stream, longHeader(0, 300)...)
	stream = append(stream, strings.Repeat("x", 300)...)
	stream = append(stream, shortFrame(0, "")...) // an empty one-frame message
	for _, piece := range []int{1, 7, 64, len(stream)} {
		var f frames
		f.greeting = 64
		handshakeAt := -1
		for i := 0; i < len(stream); {
			n, err := f.inspect(stream[i:min(i+piece, len(stream))])
			require.NoError(t, err, "pieces of %d", piece)
			i += n
			if f.commands > 0 && handshakeAt < 0 {
				handshakeAt = i
			}
		}
		assert.Equal(t, 64+len(ready), handshakeAt, "inspect stops at the end of the READY command (pieces of %d)", piece)
		assert.Zero(t, f.body)
		assert.Zero(t, f.message.frames, "the last message ended")
	}
}

func TestFramesRefuseWhatZmq4WouldAllocate(t *testing.T) {
	ready := shortFrame(flagCommand, "\x05READY")
	for name, tail := range map[string][]byte{
		"a frame claiming 2^50 bytes":     longHeader(0, 1<<50),
		"a command claiming 2^62 bytes":   longHeader(flagCommand, 1<<62),
		"a frame just over the bound":     longHeader(0, MaxMessageBytes+1),
		"frames summing over the bound":   append(shortFrame(flagMore, "0123456789"), longHeader(0, MaxMessageBytes-9)...),
		"a message of 17 frames":          []byte(strings.Repeat("\x01\x00", 16) + "\x00\x00"),
		"a header claiming 2^64-1 bytes":  longHeader(0, 1<<64-1),
		"more frames after a long header": append(longHeader(flagMore, 1<<40), 0),
	} {
		var f frames
		f.greeting = 64
		err := f.inspectAll(append(append(greeting(), ready...), tail...))
		assert.True(t, errors.Is(err, ErrTooLarge), "%s: %v", name, err)
	}
	var f frames
	f.greeting = 64
	err := f.inspectAll(append(append(greeting(), ready...), longHeader(0, MaxMessageBytes)...))
	assert.NoError(t, err, "a frame of exactly the bound passes")
	f = frames{greeting: 64}
	err = f.inspectAll(append(append(greeting(), ready...), strings.Repeat("\x01\x00", 15)+"\x00\x00"...))
	assert.NoError(t, err, "a message of 16 frames passes")
}

func TestEndpoints(t *testing.T) {
	assert.Equal(t, "brtcp://127.0.0.1:5557", Endpoint("tcp://127.0.0.1:5557"))
	assert.Equal(t, "ipc:///tmp/x", Endpoint("ipc:///tmp/x"))
	assert.Equal(t, "tcp://127.0.0.1:5557", TCP("brtcp://127.0.0.1:5557"))
}

// prop is one ZMTP 3 property written by hand.
func prop(name, value string) string {
	return string(append(append([]byte{byte(len(name))}, name...), binary.BigEndian.AppendUint32(nil, uint32(len(value)))...)) + value
}

func readyStream(props string) []byte {
	return append(greeting(), shortFrame(flagCommand, "\x05READY"+props)...)
}

// The Socket-Type of a READY command, written by hand (ZMTP 3 properties: a name of 1-byte
// length, a value of 4-byte big-endian length), found among other properties, its name in any
// case zmq4 title-cases to Socket-Type, the last of two; anything short, lying, of another
// command or of a type zmq4 does not know names none.
func TestTheSocketTypeOfAReadyCommand(t *testing.T) {
	sub := readyStream(prop("Identity", "") + prop("socket-type", "SUB"))
	for name, tc := range map[string]struct {
		stream []byte
		typ    zmq4.SocketType
	}{
		"after another property": {sub, zmq4.Sub},
		"bytes after READY":      {append(readyStream(prop("Socket-Type", "PUB")), 0x00, 0x01, 0x01), zmq4.Pub},
		"the last of two":        {readyStream(prop("Socket-Type", "PUB") + prop("socket-Type", "XSUB")), zmq4.XSub},
		"a long frame": {append(append(greeting(), longHeader(flagCommand, uint64(len("\x05READY"+prop("Socket-Type", "DEALER"))))...),
			"\x05READY"+prop("Socket-Type", "DEALER")...), zmq4.Dealer},
	} {
		typ, ok := readyType(tc.stream)
		assert.True(t, ok, name)
		assert.Equal(t, tc.typ, typ, name)
	}
	for name, stream := range map[string][]byte{
		"no READY yet":        sub[:len(sub)-1],
		"only the greeting":   greeting(),
		"another command":     append(greeting(), shortFrame(flagCommand, "\x05HELLO"+prop("Socket-Type", "SUB"))...),
		"a message":           append(greeting(), shortFrame(0, "\x05READY"+prop("Socket-Type", "SUB"))...),
		"a value too long":    append(greeting(), shortFrame(flagCommand, "\x05READY\x0bSocket-Type\x00\x00\x01\x00SUB")...),
		"a name too long":     append(greeting(), shortFrame(flagCommand, "\x05READY\x40Socket")...),
		"no Socket-Type":      readyStream(prop("Identity", "x")),
		"an upper-case name":  readyStream(prop("SOCKET-TYPE", "SUB")),
		"an unknown type":     readyStream(prop("Socket-Type", "FOO")),
		"a lower-case type":   readyStream(prop("Socket-Type", "sub")),
		"unknown, the last":   readyStream(prop("Socket-Type", "SUB") + prop("Socket-Type", "FOO")),
		"a property cut":      readyStream("\x01"),
		"a long frame, torn":  append(greeting(), longHeader(flagCommand, 1<<40)[:5]...),
		"over the bytes kept": readyStream(prop("X-Pad", strings.Repeat("x", maxHandshakeBytes)) + prop("Socket-Type", "SUB"))[:maxHandshakeBytes],
	} {
		_, ok := readyType(stream)
		assert.False(t, ok, name)
	}
}

// readyType agrees with zmq4's own reading of a READY body (Metadata.UnmarshalZMTP, then the
// Socket-Type its compatibility test takes): where zmq4 reads a known type, the same one; where
// it fails, panics or reads a type it does not know, none.
func FuzzReadyTypeMatchesZmq4(f *testing.F) {
	for _, props := range []string{
		prop("Socket-Type", "SUB"), prop("socket-type", "PUB") + prop("Identity", "x"),
		prop("SOCKET-TYPE", "SUB"), "\x01", "\x00", prop("Socket-Type", "SUB") + prop("Socket-type", "FOO"),
		prop("Socket-Type", "") + "\x0b", prop("sOCKET-tYPE", "ROUTER"), prop("socket\u00e9-type", "SUB"),
	} {
		f.Add([]byte(props))
	}
	f.Fuzz(func(t *testing.T, props []byte) {
		if len(props) > 200 {
			return // one short frame's body
		}
		want, zmqOK := zmq4ReadyType(props)
		got, ok := readyType(readyStream(string(props)))
		require.Equal(t, zmqOK, ok, "%q: zmq4 reads %q", props, want)
		if ok {
			require.Equal(t, want, got, "%q", props)
		}
	})
}

// zmq4ReadyType is what zmq4 makes of a READY body: the peer's socket type, with false when its
// reading fails or panics, or the type is one IsCompatible panics on.
func zmq4ReadyType(props []byte) (typ zmq4.SocketType, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	md := make(zmq4.Metadata)
	if err := md.UnmarshalZMTP(props); err != nil {
		return "", false
	}
	typ = zmq4.SocketType(md["Socket-Type"])
	typ.IsCompatible(zmq4.Sub)
	return typ, true
}
