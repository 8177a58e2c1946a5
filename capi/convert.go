package main

/*
#include <stdint.h>
#include <string.h>
*/
import "C"

import (
	"encoding/json"
	"unsafe"
)

// Conversions between C arguments and Go values. Each takes the argument's name in the public
// header, so an error says which argument broke which rule.

// bytesArg views the n bytes at p as a byte slice without copying; callers copy (string(...))
// whatever they keep beyond the call. p may be NULL only when n is 0.
func bytesArg(p *C.char, n C.size_t, name string) ([]byte, error) {
	switch {
	case n == 0:
		return nil, nil
	case p == nil:
		return nil, invalidArgument("%s is NULL but %s_len is %d", name, name, uint64(n))
	case uint64(n) > maxArgLen:
		return nil, invalidArgument("%s_len is %d, more than the largest accepted length %d", name, uint64(n), maxArgLen)
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n)), nil
}

// uint64sArg views the first view of the n values at p (the caller bounds view by n); p may be
// NULL only when n is 0. name and lenName are the arguments' names in the header.
func uint64sArg(p *C.uint64_t, n C.size_t, view uint64, name, lenName string) ([]uint64, error) {
	switch {
	case n == 0:
		return nil, nil
	case p == nil:
		return nil, invalidArgument("%s is NULL but %s is %d", name, lenName, uint64(n))
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), view), nil
}

// stringArg is bytesArg copied into a string.
func stringArg(p *C.char, n C.size_t, name string) (string, error) {
	b, err := bytesArg(p, n, name)
	return string(b), err
}

// outArg views the n values at out, which must not be NULL.
func outArg(out *C.uint64_t, n int, name string) ([]C.uint64_t, error) {
	if out == nil {
		return nil, invalidArgument("%s must not be NULL", name)
	}
	return unsafe.Slice(out, n), nil
}

// writeJSON encodes value into buf when it fits in capacity bytes and returns the encoded
// length (the *_json exports' answer).
func writeJSON(value any, buf *C.char, capacity C.size_t) (C.int64_t, error) {
	text, err := json.Marshal(value)
	if err != nil {
		return 0, err
	}
	if buf != nil && len(text) <= int(min(capacity, maxArgLen)) && len(text) > 0 {
		C.memcpy(unsafe.Pointer(buf), unsafe.Pointer(&text[0]), C.size_t(len(text)))
	}
	return C.int64_t(len(text)), nil
}
