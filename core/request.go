package core

import "iter"

// Header names that carry routing inputs (contract: "Inputs and precedence"), compared case-insensitively.
const (
	HeaderTargetWorker  = "X-SMG-Target-Worker"
	HeaderRoutingKey    = "X-SMG-Routing-Key"
	HeaderAuthorization = "Authorization"
	HeaderForwardedFor  = "X-Forwarded-For"
	HeaderCookie        = "Cookie"
)

// The default name of the header of the explicit key; routing_key_headers may name others.
// implicitKeyHeaders are consulted in this order; only the first one present counts.
var implicitKeyHeaders = [...]string{HeaderAuthorization, HeaderForwardedFor, HeaderCookie}

// RoutingHeaders returns the names of the headers that carry routing inputs by default, in
// precedence order.
func RoutingHeaders() []string {
	return append([]string{HeaderTargetWorker, HeaderRoutingKey}, implicitKeyHeaders[:]...)
}

// Request holds the routing inputs of one request. The zero value is a request with no inputs.
type Request struct {
	// HasTarget is set when a valid X-SMG-Target-Worker header was given; TargetIndex is then
	// the parsed index into the available workers, or -1 when the value is not an index.
	HasTarget   bool
	TargetIndex int
	// RoutingKey is the explicit key (X-SMG-Routing-Key or passed directly); empty means absent.
	RoutingKey []byte
	// ImplicitKey comes from the first present of Authorization, X-Forwarded-For, Cookie;
	// empty means absent.
	ImplicitKey []byte
	// Weight is what the request's lease counts on its worker's load (for example its prompt
	// tokens), from 1 to MaxLeaseWeight; 0 means 1. It plays no part in choosing the worker,
	// except under cache_aware's hit_wait_factor (docs/contract.md, "Prefill load", rule 5).
	Weight int64
	// PrefixBlocks is the request's prefix as block hashes in order, block i naming the whole
	// prefix up to and including block i (chained hashes); at most MaxPrefixBlocks. Only
	// cache_aware reads it; the other policies ignore it.
	PrefixBlocks []uint64
}

// CheckRequest returns an error naming the field when a request's weight or prefix blocks
// break their rule (a weight of 0 means 1). Route panics on an invalid weight, so a binding
// checks what it did not build itself.
func CheckRequest(req *Request) error {
	if req.Weight != 0 {
		if err := CheckWeight(req.Weight); err != nil {
			return err
		}
	}
	return CheckPrefixBlocks(len(req.PrefixBlocks))
}

// KeyRequest is a request whose only input is an explicit routing key.
func KeyRequest(key []byte) Request { return Request{RoutingKey: key} }

// RequestFrom is the request of a key passed directly and request headers, with the default
// routing-key header: a non-empty explicit key overrides X-SMG-Routing-Key (docs/contract.md,
// "Inputs and precedence"). Router.RequestFrom uses the router's routing_key_headers.
func RequestFrom(explicitKey []byte, headers iter.Seq2[[]byte, []byte]) Request {
	return requestFrom(defaultKeyHeaders[:], explicitKey, headers)
}

var defaultKeyHeaders = [...]string{HeaderRoutingKey}

func requestFrom(keyHeaders []string, explicitKey []byte, headers iter.Seq2[[]byte, []byte]) Request {
	req := requestFromHeaders(keyHeaders, headers)
	if len(explicitKey) > 0 {
		req.RoutingKey = explicitKey
	}
	return req
}

// RequestFromHeaders extracts the routing inputs from request headers, with the default
// routing-key header. The first occurrence of a header name wins; values are used as given
// (never trimmed) and only when valid.
func RequestFromHeaders(headers iter.Seq2[[]byte, []byte]) Request {
	return requestFromHeaders(defaultKeyHeaders[:], headers)
}

// headerSlots is how many header names carry routing inputs at most: the target, the
// routing-key headers, the implicit key headers (in that order, the slots of headerSlot).
const headerSlots = 1 + MaxRoutingKeyHeaders + len(implicitKeyHeaders)

// headerValues holds the first value of each routing header present, by slot.
type headerValues[T string | []byte] struct {
	seen   [headerSlots]bool
	values [headerSlots]T
}

// requestFromHeaders is RequestFromHeaders with the routing-key header names keyHeaders, which
// CheckRoutingKeyHeaders accepted. As in SMG, the first of them, in their order, whose value is
// valid gives the explicit key.
func requestFromHeaders(keyHeaders []string, headers iter.Seq2[[]byte, []byte]) Request {
	var h headerValues[[]byte]
	for name, value := range headers {
		slot := headerSlot(name, keyHeaders)
		if slot < 0 || h.seen[slot] {
			continue
		}
		h.seen[slot], h.values[slot] = true, value
	}
	return h.request(len(keyHeaders))
}

// routingHeaderNames lists the headers that carry routing inputs in slot order (headerSlot's).
func routingHeaderNames(keyHeaders []string) []string {
	names := append([]string{HeaderTargetWorker}, keyHeaders...)
	return append(names, implicitKeyHeaders[:]...)
}

// requestFromValues is Router.RequestFromValues with the routing-key header names keyHeaders.
func requestFromValues(keyHeaders []string, value func(slot int) (string, bool)) Request {
	var h headerValues[string]
	for slot := range 1 + len(keyHeaders) + len(implicitKeyHeaders) {
		h.values[slot], h.seen[slot] = value(slot)
	}
	return h.request(len(keyHeaders))
}

// request applies the precedence rules to the values found. Only the values it keeps are
// converted to bytes (a copy for strings).
func (h *headerValues[T]) request(keyHeaders int) Request {
	var req Request
	if h.seen[0] && validHeaderValue(h.values[0]) {
		req.HasTarget = true
		req.TargetIndex = parseTargetIndex(h.values[0])
	}
	implicitAt := 1 + keyHeaders
	for i := 1; i < implicitAt; i++ {
		if h.seen[i] && validHeaderValue(h.values[i]) {
			req.RoutingKey = []byte(h.values[i])
			break
		}
	}
	for i := implicitAt; i < implicitAt+len(implicitKeyHeaders); i++ {
		if h.seen[i] {
			// The first present header decides; an empty or invalid one does not fall through.
			if validHeaderValue(h.values[i]) {
				req.ImplicitKey = []byte(h.values[i])
			}
			break
		}
	}
	return req
}

// headerSlot maps a header name to 0 (target), 1.. (the routing-key headers in order), then the
// implicit keys in order, or -1 for a header that carries no routing input.
func headerSlot(name []byte, keyHeaders []string) int {
	if equalFoldASCII(name, HeaderTargetWorker) {
		return 0
	}
	for i, h := range keyHeaders {
		if equalFoldASCII(name, h) {
			return 1 + i
		}
	}
	for i, h := range implicitKeyHeaders {
		if equalFoldASCII(name, h) {
			return 1 + len(keyHeaders) + i
		}
	}
	return -1
}

// equalFoldASCII compares a header name with a canonical name, ignoring ASCII case only: HTTP
// header names are ASCII, and Unicode folding would let e.g. the Kelvin sign match 'k'.
func equalFoldASCII(name []byte, canonical string) bool {
	if len(name) != len(canonical) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if lowerASCII(name[i]) != lowerASCII(canonical[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// ValidHeaderValue reports whether a header value may be used: non-empty, and every byte
// visible ASCII (0x20-0x7E) or a horizontal tab.
func ValidHeaderValue(value []byte) bool { return validHeaderValue(value) }

func validHeaderValue[T string | []byte](value T) bool {
	if len(value) == 0 {
		return false
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 || c > 0x7e) && c != '\t' {
			return false
		}
	}
	return true
}

// ParseTargetIndex parses an X-SMG-Target-Worker value like an unsigned integer: an optional
// leading '+', then one or more decimal digits and nothing else. It returns -1 for anything
// else, including a value too large for an int.
func ParseTargetIndex(value []byte) int { return parseTargetIndex(value) }

func parseTargetIndex[T string | []byte](value T) int {
	if len(value) > 0 && value[0] == '+' {
		value = value[1:]
	}
	if len(value) == 0 {
		return -1
	}
	const limit = int(^uint(0) >> 1)
	n := 0
	for i := 0; i < len(value); i++ {
		c := value[i]
		if c < '0' || c > '9' {
			return -1
		}
		d := int(c - '0')
		if n > (limit-d)/10 {
			return -1
		}
		n = n*10 + d
	}
	return n
}
