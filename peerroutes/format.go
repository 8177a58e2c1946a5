// Package peerroutes shares routes between router replicas in front of the same workers
// (docs/contract.md, "Peer routes", "Sharing routes over the wire"): a publisher sends each
// lease this router takes to its peers over ZeroMQ PUB, a subscriber applies the peers' routes
// with core.Router.PeerRoute. This file declares the wire format and decodes it; publisher.go
// and subscriber.go own the sockets; the router never sees bytes.
//
// A message is the frames [topic, sequence (8 bytes, big-endian, per publisher), payload]; the
// payload is msgpack [origin, [[worker_url, weight, [block, ...]], ...]]: origin a uint64 drawn
// at random per publisher (so a replica skips its own routes and a restarted peer is a new
// stream), weight the lease's weight, blocks the request's prefix blocks (this package's hashes).
package peerroutes

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/bounded-router/bounded-router/core"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Route is one lease a router took.
type Route struct {
	URL    string
	Weight int64
	Blocks []uint64
}

// Batch is one message's payload.
type Batch struct {
	Origin uint64
	Routes []Route
}

// Limits of one message, so that a flood of garbage cannot take unbounded memory.
const (
	MaxPayloadBytes = 16 << 20
	MaxRoutes       = 1 << 16 // per batch
	MaxBlocks       = core.MaxPrefixBlocks
)

// ErrMalformed is wrapped by every error of a payload that is not a batch of routes.
var ErrMalformed = errors.New("malformed peer routes batch")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Encode writes a batch's payload.
func Encode(b Batch) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	// Writing to a bytes.Buffer cannot fail.
	_ = e.EncodeArrayLen(2)
	_ = e.EncodeUint(b.Origin)
	_ = e.EncodeArrayLen(len(b.Routes))
	for _, r := range b.Routes {
		_ = e.EncodeArrayLen(3)
		_ = e.EncodeString(r.URL)
		_ = e.EncodeInt(r.Weight)
		_ = e.EncodeArrayLen(len(r.Blocks))
		for _, block := range r.Blocks {
			_ = e.EncodeUint(block)
		}
	}
	return buf.Bytes()
}

// Decode reads a batch's payload. A route's weight and blocks are checked by PeerRoute, not
// here: what is malformed is what cannot be read as routes at all.
func Decode(payload []byte) (Batch, error) {
	if len(payload) > MaxPayloadBytes {
		return Batch{}, malformed("%d bytes, more than %d", len(payload), MaxPayloadBytes)
	}
	rest := bytes.NewReader(payload)
	d := decoder{msgpack.NewDecoder(rest), rest}
	var b Batch
	if err := d.fixedArray(2, "the batch [origin, routes]"); err != nil {
		return Batch{}, err
	}
	var err error
	if b.Origin, err = d.unsigned("origin"); err != nil {
		return Batch{}, err
	}
	n, err := d.arrayLen(MaxRoutes, "routes")
	if err != nil {
		return Batch{}, err
	}
	b.Routes = make([]Route, n)
	for i := range b.Routes {
		if b.Routes[i], err = d.route(); err != nil {
			return Batch{}, fmt.Errorf("route %d: %w", i, err)
		}
	}
	if d.left() != 0 {
		return Batch{}, malformed("%d bytes after the batch", d.left())
	}
	return b, nil
}

// decoder is a msgpack decoder that knows how many bytes are left, so that no length a header
// claims is allocated before the bytes that would fill it are there.
type decoder struct {
	*msgpack.Decoder
	rest *bytes.Reader
}

func (d decoder) left() int { return d.rest.Len() }

// arrayLen reads an array header of at most limit elements, each of which takes a byte at least.
func (d decoder) arrayLen(limit int, what string) (int, error) {
	n, err := d.DecodeArrayLen()
	switch {
	case err != nil:
		return 0, malformed("%s: %v", what, err)
	case n < 0:
		return 0, malformed("%s: nil, not a list", what)
	case n > limit || n > d.left():
		return 0, malformed("%s: a list of %d elements, more than %d or than the %d bytes left", what, n, limit, d.left())
	}
	return n, nil
}

// notNil fails at a nil: msgpack's typed reads take it for the type's zero.
func (d decoder) notNil(what string) error {
	c, err := d.PeekCode()
	switch {
	case err != nil:
		return malformed("%s: %v", what, err)
	case c == msgpcode.Nil:
		return malformed("%s: nil", what)
	}
	return nil
}

// integer fails unless an integer comes next (not nil, a float or anything else), and says
// whether its msgpack code is one of the signed forms.
func (d decoder) integer(what string) (signed bool, err error) {
	c, err := d.PeekCode()
	switch {
	case err != nil:
		return false, malformed("%s: %v", what, err)
	case !msgpcode.IsFixedNum(c) && (c < msgpcode.Uint8 || c > msgpcode.Int64):
		return false, malformed("%s: not an integer (msgpack code %#x)", what, c)
	}
	return c >= msgpcode.Int8 && c <= msgpcode.Int64 || msgpcode.IsFixedNum(c) && int8(c) < 0, nil
}

// unsigned reads an integer from 0 to 2^64-1: msgpack's DecodeUint64 takes a negative one for
// its two's complement.
func (d decoder) unsigned(what string) (uint64, error) {
	signed, err := d.integer(what)
	if err != nil {
		return 0, err
	}
	if !signed {
		n, err := d.DecodeUint64()
		if err != nil {
			return 0, malformed("%s: %v", what, err)
		}
		return n, nil
	}
	n, err := d.DecodeInt64()
	switch {
	case err != nil:
		return 0, malformed("%s: %v", what, err)
	case n < 0:
		return 0, malformed("%s: %d, below 0", what, n)
	}
	return uint64(n), nil
}

func (d decoder) fixedArray(n int, what string) error {
	got, err := d.arrayLen(n, what)
	if err == nil && got != n {
		err = malformed("%s: a list of %d elements, not %d", what, got, n)
	}
	return err
}

func (d decoder) route() (Route, error) {
	var r Route
	if err := d.fixedArray(3, "[worker_url, weight, blocks]"); err != nil {
		return r, err
	}
	var err error
	if err = d.notNil("worker_url"); err != nil {
		return r, err
	}
	if r.URL, err = d.DecodeString(); err != nil {
		return r, malformed("worker_url: %v", err)
	}
	if _, err = d.integer("weight"); err != nil {
		return r, err
	}
	if r.Weight, err = d.DecodeInt64(); err != nil {
		return r, malformed("weight: %v", err)
	}
	n, err := d.arrayLen(MaxBlocks, "blocks")
	if err != nil || n == 0 {
		return r, err
	}
	r.Blocks = make([]uint64, n)
	for i := range r.Blocks {
		if r.Blocks[i], err = d.unsigned("block"); err != nil {
			return r, fmt.Errorf("block %d: %w", i, err)
		}
	}
	return r, nil
}
