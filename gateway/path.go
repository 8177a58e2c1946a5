package gateway

import "errors"

// The path rule: a request is forwarded only when its request-target is in origin form (it
// starts with "/"), its path's percent-encoding is valid, and its decoded path (with %2F
// decoded too) has no NUL byte and no "." or ".." segment. Everything else is refused with 400
// before a worker is chosen. What passes is forwarded byte for byte: the raw path and query,
// never a decoded or cleaned form.

var (
	errNotOriginForm = errors.New("the request target must be a path starting with /")
	errBadEscape     = errors.New("the path has an invalid percent-encoding")
	errNUL           = errors.New("the path contains a NUL byte")
	errDotSegment    = errors.New(`the path has a "." or ".." segment`)
)

// splitTarget splits a request-target in origin form into its raw path and raw query (without
// the "?"); hasQuery reports whether there was a "?".
func splitTarget(target string) (path, query string, hasQuery bool) {
	for i := 0; i < len(target); i++ {
		if target[i] == '?' {
			return target[:i], target[i+1:], true
		}
	}
	return target, "", false
}

// checkPath applies the path rule to a raw path; it allocates nothing.
func checkPath(raw string) error {
	if len(raw) == 0 || raw[0] != '/' {
		return errNotOriginForm
	}
	// Scan the decoded bytes, tracking the current segment: its length and whether it is all dots.
	segLen, allDots := 0, true
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '%' {
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return errBadEscape
			}
			c = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 2
		}
		switch c {
		case 0:
			return errNUL
		case '/':
			if dotSegment(segLen, allDots) {
				return errDotSegment
			}
			segLen, allDots = 0, true
			continue
		case '.':
		default:
			allDots = false
		}
		segLen++
	}
	if dotSegment(segLen, allDots) {
		return errDotSegment
	}
	return nil
}

func dotSegment(n int, allDots bool) bool { return allDots && (n == 1 || n == 2) }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}
