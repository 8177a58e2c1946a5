package main

/*
#include <stddef.h>
#include <stdint.h>
void br_set_error(const char *text, size_t len);
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/bounded-router/bounded-router/core"
)

var (
	errInvalidHandle = errors.New("invalid router handle: the router was closed or never created")
	// errInvalidArgument: a pointer, length or value passed to an export breaks its rule.
	errInvalidArgument = errors.New("invalid argument")
	errUnknownLease    = errors.New("unknown lease: it was released already or never issued by this router")
)

// invalidArgument is an error about the argument a caller passed, reported as
// BR_ERR_INVALID_ARGUMENT; the text names the argument and its rule.
func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalidArgument}, args...)...)
}

// fail records err as the calling thread's last error and returns its status code.
func fail(err error) C.int32_t {
	setErrorText(err.Error())
	switch {
	case errors.Is(err, errInvalidHandle):
		return statusInvalidHandle
	case errors.Is(err, core.ErrUnknownWorker):
		return statusUnknownWorker
	case errors.Is(err, core.ErrDuplicateWorker):
		return statusDuplicateWorker
	case errors.Is(err, core.ErrInvalidConfig), errors.Is(err, errInvalidArgument), errors.Is(err, errUnknownLease):
		return statusInvalidArgument
	default:
		return statusInternal
	}
}

func setErrorText(text string) {
	C.br_set_error((*C.char)(unsafe.Pointer(unsafe.StringData(text))), C.size_t(len(text)))
}

// guard turns a panic in an export into statusInternal with the panic's text, so no Go panic
// ever unwinds into C. Every export defers it.
func guard[T C.int32_t | C.int64_t](status *T) {
	if p := recover(); p != nil {
		setErrorText(fmt.Sprintf("internal error in bounded-router (please report): %v\n%s", p, debug.Stack()))
		*status = statusInternal
	}
}
