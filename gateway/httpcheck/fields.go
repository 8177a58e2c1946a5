package httpcheck

import "bytes"

// field is one header field of a raw header block (RequestHeader.RawHeaders: the lines as the
// client sent them, after the request line): its name as sent, and its value from after the
// colon to the end of its last obs-fold continuation line.
type field struct {
	name, value []byte
	token       bool // name is a non-empty token, as a header name must be
	folded      bool // value spans continuation lines
}

// nextField splits the field at the start of b from the rest. ok is false at the block's end
// (an empty line, or no bytes left). A line without a colon, which fasthttp's parser refuses
// before any of this runs, is a field whose name is the whole line and not a token.
func nextField(b []byte) (f field, rest []byte, ok bool) {
	if len(b) == 0 || b[0] == '\r' || b[0] == '\n' {
		return field{}, nil, false
	}
	// One scan of the name finds its colon and checks its bytes.
	colon, token := 0, true
	for ; colon < len(b) && b[colon] != ':'; colon++ {
		if !tokenBytes[b[colon]] {
			if b[colon] == '\n' {
				return field{name: b[:colon]}, b[colon+1:], true
			}
			token = false
		}
	}
	f.name, f.token = b[:colon], token && colon > 0
	if colon == len(b) {
		return f, nil, true
	}
	end := colon + lineEnd(b[colon:])
	for end < len(b) && (b[end] == ' ' || b[end] == '\t') { // obs-fold: the line goes on
		end += lineEnd(b[end:])
		f.folded = true
	}
	f.value = b[colon+1 : end]
	return f, b[end:], true
}

// lineEnd is the length of b's first line with its LF (all of b when it has none).
func lineEnd(b []byte) int {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return i + 1
	}
	return len(b)
}

// unfolded is f's value as net/http's textproto reader gives it: each line trimmed of spaces
// and tabs (and its CRLF), the continuation lines joined to the first by one space, and what
// leads the whole then trimmed too (an empty first line adds no space). A value on one line is
// a slice of the block; a folded one is built in dst.
func (f field) unfolded(dst []byte) []byte {
	v := f.value
	if !f.folded {
		return trim(v)
	}
	n := lineEnd(v)
	dst = append(dst[:0], trim(v[:n])...)
	for v = v[n:]; len(v) > 0; v = v[n:] {
		n = lineEnd(v)
		dst = append(append(dst, ' '), trim(v[:n])...)
	}
	return trimLeft(dst)
}

// trim drops the line's CRLF (or LF) and the spaces and tabs around its text.
func trim(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return trimLeft(b)
}

func trimLeft(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}
