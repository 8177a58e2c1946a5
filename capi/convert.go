package main

/*
#include <stdint.h>
#include <string.h>
*/
import "C"

import (
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/bounded-router/bounded-router/core"
)

var errUnknownLease = errors.New("unknown lease: it was released already or never issued by this router")

// bytesArg views C memory as a byte slice without copying. Callers copy (string(...)) whatever
// they keep beyond the call.
func bytesArg(p *C.char, n C.size_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n))
}

// lookupRouterFor looks up the router of a call that writes its answer to out.
func lookupRouterFor(router C.uint64_t, out *C.uint64_t) (*core.Router, error) {
	r, err := lookupRouter(uint64(router))
	if err == nil && out == nil {
		err = invalidArgument("out must not be NULL")
	}
	return r, err
}

func withRouter(router C.uint64_t, do func(*core.Router) error) C.int32_t {
	r, err := lookupRouter(uint64(router))
	if err == nil {
		err = do(r)
	}
	if err != nil {
		return fail(err)
	}
	return statusOK
}

// writeJSON encodes what produce returns into buf when it fits and returns the encoded length.
func writeJSON(router C.uint64_t, buf *C.char, capacity C.size_t, produce func(*core.Router) (any, error)) C.int64_t {
	r, err := lookupRouter(uint64(router))
	var value any
	if err == nil {
		value, err = produce(r)
	}
	var text []byte
	if err == nil {
		text, err = json.Marshal(value)
	}
	if err != nil {
		return C.int64_t(fail(err))
	}
	if buf != nil && len(text) <= int(capacity) && len(text) > 0 {
		C.memcpy(unsafe.Pointer(buf), unsafe.Pointer(&text[0]), C.size_t(len(text)))
	}
	return C.int64_t(len(text))
}
