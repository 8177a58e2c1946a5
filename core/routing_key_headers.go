package core

// MaxRoutingKeyHeaders bounds routing_key_headers: every request's headers are compared with
// each name.
const MaxRoutingKeyHeaders = 8

// DefaultRoutingKeyHeaders returns the default routing_key_headers: X-SMG-Routing-Key alone.
func DefaultRoutingKeyHeaders() []string { return []string{HeaderRoutingKey} }

// CheckRoutingKeyHeaders checks routing_key_headers (docs/contract.md, "Inputs and precedence"):
// 1 to MaxRoutingKeyHeaders names, each an HTTP token, none repeated (names compare without
// regard to ASCII case) and none a header that already carries another routing input.
func CheckRoutingKeyHeaders(names []string) error {
	if len(names) < 1 || len(names) > MaxRoutingKeyHeaders {
		return invalid("routing_key_headers must list from 1 to %d header names, got %d", MaxRoutingKeyHeaders, len(names))
	}
	for i, name := range names {
		if !isToken(name) {
			return invalid("routing_key_headers[%d] %q is not a header name: it must be a non-empty token of letters, digits and !#$%%&'*+-.^_`|~", i, name)
		}
		if other := otherRoutingHeader(name); other != "" {
			return invalid("routing_key_headers[%d] %q already carries another routing input (%s)", i, name, other)
		}
		for _, earlier := range names[:i] {
			if equalFoldASCII([]byte(name), earlier) {
				return invalid("routing_key_headers[%d] %q repeats %q (header names ignore case)", i, name, earlier)
			}
		}
	}
	return nil
}

// otherRoutingHeader returns the input header name equals, or "" when it carries no other input.
func otherRoutingHeader(name string) string {
	for _, h := range append([]string{HeaderTargetWorker}, implicitKeyHeaders[:]...) {
		if equalFoldASCII([]byte(name), h) {
			return h
		}
	}
	return ""
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2), the syntax of a header name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && !isTokenSymbol(c) {
			return false
		}
	}
	return true
}

func isTokenSymbol(c byte) bool {
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// keyHeadersOrDefault is names, or the default names when names is nil.
func keyHeadersOrDefault(names []string) []string {
	if names == nil {
		return DefaultRoutingKeyHeaders()
	}
	return append([]string(nil), names...)
}
