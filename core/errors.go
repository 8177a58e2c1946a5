package core

import "errors"

// Sentinel errors. Every error the core returns wraps one of these, so callers (and the C API's
// status codes) can tell the kinds apart with errors.Is while the message names what was wrong.
var (
	// ErrInvalidConfig: a setting, worker URL or argument breaks its rule.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrUnknownWorker: the URL is not a member of the router.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrDuplicateWorker: the URL is already a member of the router.
	ErrDuplicateWorker = errors.New("duplicate worker")
)
