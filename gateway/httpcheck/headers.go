package httpcheck

import "github.com/valyala/fasthttp"

// Headers yields the client's header fields as a net/http handler finds them in r.Header, in
// the order sent: every line (a repeated Cookie, User-Agent or Content-Type too, which
// fasthttp's parsed view merges or keeps one of), with its canonical name and its value
// unfolded as net/http unfolds obs-fold, except Host and Transfer-Encoding, which net/http
// takes out of r.Header. It stops when yield returns false. The name and value are valid
// until yield returns; the names are canonicalised in place in h's raw block (fasthttp's own
// copy, which fasthttp itself may normalise in place). Call it only for a request Request
// accepted.
func Headers(h *fasthttp.RequestHeader, yield func(name, value []byte) bool) {
	var buf []byte // for folded values only
	for f, rest, ok := nextField(h.RawHeaders()); ok; f, rest, ok = nextField(rest) {
		canonical(f.name)
		if string(f.name) == "Host" || string(f.name) == "Transfer-Encoding" {
			continue
		}
		v := f.unfolded(buf)
		if f.folded {
			buf = v
		}
		if !yield(f.name, v) {
			return
		}
	}
}

// canonical makes a token name canonical in place, as textproto.CanonicalMIMEHeaderKey: the
// first letter and each letter after a '-' upper case, the others lower case.
func canonical(name []byte) {
	upper := true
	for i, c := range name {
		switch {
		case upper && 'a' <= c && c <= 'z':
			name[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			name[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
}
