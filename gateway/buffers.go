package gateway

import "sync"

// copyBufferSize is the size of the buffers the ReverseProxy copies a worker's answer through:
// its own default, which it would otherwise allocate anew for every request.
const copyBufferSize = 32 << 10

// copyBuffers is the ReverseProxy's BufferPool. Invariant: every buffer in it is
// copyBufferSize long, and a buffer is used by one copy at a time (Get to Put). The pool holds
// array pointers, which a slice converts to without an allocation (a *[]byte would need one
// per Put).
type copyBuffers struct{ pool sync.Pool }

func newCopyBuffers() *copyBuffers {
	return &copyBuffers{pool: sync.Pool{New: func() any { return new([copyBufferSize]byte) }}}
}

func (c *copyBuffers) Get() []byte { return c.pool.Get().(*[copyBufferSize]byte)[:] }

func (c *copyBuffers) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		c.pool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}
