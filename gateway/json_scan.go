package gateway

import (
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads a JSON document in place, without building it: it checks the syntax as
// encoding/json does (the same grammar, whitespace and nesting limit) and decodes strings as
// encoding/json decodes them (invalid UTF-8 and lone surrogates become U+FFFD), handing the
// decoded text on in pieces. It allocates nothing.
type jsonScanner struct {
	data  []byte
	pos   int
	depth int
}

// maxJSONDepth is encoding/json's limit on nested arrays and objects.
const maxJSONDepth = 10000

// replacementChar is U+FFFD in UTF-8, what an invalid byte of a string decodes to.
var replacementChar = []byte(string(utf8.RuneError))

// space skips whitespace.
func (s *jsonScanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek is the next byte after whitespace, or 0 at the end.
func (s *jsonScanner) peek() byte {
	s.space()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// value skips one value, checking it.
func (s *jsonScanner) value() bool {
	switch s.peek() {
	case '{':
		return s.object(func(s *jsonScanner, _ []byte) bool { return s.value() })
	case '[':
		return s.array((*jsonScanner).value)
	case '"':
		return s.text(nil)
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

func (s *jsonScanner) literal(word string) bool {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return false
	}
	s.pos += len(word)
	return true
}

// number skips -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *jsonScanner) number() bool {
	if s.pos < len(s.data) && s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case !s.digits():
		return false
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if !s.digits() {
			return false
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		return s.digits()
	}
	return true
}

// digits skips one or more decimal digits.
func (s *jsonScanner) digits() bool {
	start := s.pos
	for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos > start
}

// open reads the opening byte of an array or object and reports whether it is empty (the
// closing byte read as well); false past the nesting limit.
func (s *jsonScanner) open(opening, closing byte) (empty, ok bool) {
	if s.peek() != opening || s.depth == maxJSONDepth {
		return false, false
	}
	s.pos++
	s.depth++
	if s.peek() == closing {
		s.pos++
		s.depth--
		return true, true
	}
	return false, true
}

// After a member or element: another follows, the container is closed, or the syntax is wrong.
const (
	another = iota
	closed
	wrong
)

// next reads what follows a member or element of a container closed by closing: a comma, or the
// closing byte.
func (s *jsonScanner) next(closing byte) int {
	switch s.peek() {
	case ',':
		s.pos++
		return another
	case closing:
		s.pos++
		s.depth--
		return closed
	}
	return wrong
}

// object reads the object at the next byte, calling member for each member with its key
// decoded (see keyName) and the scanner at the first byte of the member's value, which member
// must read.
func (s *jsonScanner) object(member func(s *jsonScanner, key []byte) bool) bool {
	empty, ok := s.open('{', '}')
	for ok && !empty {
		var name keyName
		if s.peek() != '"' || !s.text(name.add) || s.peek() != ':' {
			return false
		}
		s.pos++
		s.space()
		if !member(s, name.bytes()) {
			return false
		}
		switch s.next('}') {
		case closed:
			return true
		case wrong:
			return false
		}
	}
	return ok
}

// array reads the array at the next byte, calling element with the scanner at each element,
// which element must read.
func (s *jsonScanner) array(element func(s *jsonScanner) bool) bool {
	empty, ok := s.open('[', ']')
	for ok && !empty {
		if !element(s) {
			return false
		}
		switch s.next(']') {
		case closed:
			return true
		case wrong:
			return false
		}
	}
	return ok
}

// text reads the string at the next byte, handing its decoded text to emit (when not nil) in
// pieces: runs of the document's own bytes, and the decoding of each escape or invalid byte.
func (s *jsonScanner) text(emit func([]byte)) bool {
	if s.peek() != '"' {
		return false
	}
	s.pos++
	run := s.pos // start of the run of bytes that stand for themselves
	flush := func() {
		if emit != nil && s.pos > run {
			emit(s.data[run:s.pos])
		}
	}
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			flush()
			s.pos++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			flush()
			var decoded [utf8.UTFMax]byte
			n, ok := s.escape(decoded[:])
			if !ok {
				return false
			}
			if emit != nil {
				emit(decoded[:n])
			}
			run = s.pos
		case c < utf8.RuneSelf:
			s.pos++
		default:
			if r, size := utf8.DecodeRune(s.data[s.pos:]); r == utf8.RuneError && size == 1 {
				flush()
				if emit != nil {
					emit(replacementChar)
				}
				s.pos++
				run = s.pos
			} else {
				s.pos += size
			}
		}
	}
	return false
}

// escape decodes the escape at s.pos (a backslash) into out, as encoding/json does: a valid
// surrogate pair of \u escapes is one character, any other surrogate U+FFFD.
func (s *jsonScanner) escape(out []byte) (int, bool) {
	if s.pos+1 >= len(s.data) {
		return 0, false
	}
	c := s.data[s.pos+1]
	s.pos += 2
	switch c {
	case '"', '\\', '/':
		out[0] = c
	case 'b':
		out[0] = '\b'
	case 'f':
		out[0] = '\f'
	case 'n':
		out[0] = '\n'
	case 'r':
		out[0] = '\r'
	case 't':
		out[0] = '\t'
	case 'u':
		r, ok := s.hex4()
		if !ok {
			return 0, false
		}
		if utf16.IsSurrogate(r) {
			saved := s.pos
			if second, ok := s.unicodeEscape(); ok {
				if pair := utf16.DecodeRune(r, second); pair != utf8.RuneError {
					return utf8.EncodeRune(out, pair), true
				}
			}
			s.pos, r = saved, utf8.RuneError // the next escape, if any, is read on its own
		}
		return utf8.EncodeRune(out, r), true
	default:
		return 0, false
	}
	return 1, true
}

// unicodeEscape reads a \u escape at s.pos, if there is one.
func (s *jsonScanner) unicodeEscape() (rune, bool) {
	if s.pos+1 >= len(s.data) || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
		return 0, false
	}
	s.pos += 2
	return s.hex4()
}

// hex4 reads the four hexadecimal digits of a \u escape.
func (s *jsonScanner) hex4() (rune, bool) {
	if len(s.data)-s.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s.data[s.pos : s.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	s.pos += 4
	return r, true
}

// keyName collects a decoded object key up to its first 16 bytes, enough to recognise the
// keys a prompt is read from; a longer key is none of them.
type keyName struct {
	b    [16]byte
	n    int
	long bool
}

func (k *keyName) add(p []byte) {
	if k.n+len(p) > len(k.b) {
		k.long = true
		return
	}
	k.n += copy(k.b[k.n:], p)
}

func (k *keyName) bytes() []byte {
	if k.long {
		return nil
	}
	return k.b[:k.n]
}
