package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// maxDepth bounds the nesting the scanner follows, as encoding/json does.
const maxDepth = 10000

// scanner walks JSON text in a byte slice without building anything: it finds where values
// start and end, so that the envelope of a watch frame or a list can be split into its
// parts and only the objects are handed to the item decoder. It is strict RFC 8259 (exact
// literals, the number grammar, escapes, no control characters in strings) except that, like
// encoding/json, it does not check that strings are valid UTF-8. Its errors are plain; the
// codec wraps them.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) fail(what string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("invalid JSON: %s at the end of the input", what)
	}
	return fmt.Errorf("invalid JSON: %s at offset %d (%q)", what, s.i, s.b[s.i])
}

func (s *scanner) skipWS() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips whitespace and then c, reporting whether c was there.
func (s *scanner) consume(c byte) bool {
	s.skipWS()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string at s.i and returns the offsets of its contents (without the quotes)
// and whether it holds escapes.
func (s *scanner) str() (start, end int, escaped bool, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return 0, 0, false, s.fail("expected a string")
	}
	s.i++
	start = s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			end = s.i
			s.i++
			return start, end, escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i >= len(s.b) {
				return 0, 0, false, s.fail("unterminated string")
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return 0, 0, false, s.fail("invalid \\u escape")
					}
					s.i++
				}
			default:
				return 0, 0, false, s.fail("invalid escape")
			}
		case c < 0x20:
			return 0, 0, false, s.fail("control character in string")
		default:
			s.i++
		}
	}
	return 0, 0, false, s.fail("unterminated string")
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// stringValue reads a string value and returns it unescaped.
func (s *scanner) stringValue() (string, error) {
	start, end, esc, err := s.str()
	if err != nil {
		return "", err
	}
	if !esc {
		return string(s.b[start:end]), nil
	}
	return unquote(s.b[start-1 : end+1])
}

// unquote decodes a quoted JSON string that holds escapes.
func unquote(quoted []byte) (string, error) {
	var out string
	if err := json.Unmarshal(quoted, &out); err != nil {
		return "", fmt.Errorf("invalid JSON string: %v", err)
	}
	return out, nil
}

// key reads an object key and the colon after it. The returned bytes alias the input
// unless the key holds escapes.
func (s *scanner) key() ([]byte, error) {
	s.skipWS()
	start, end, esc, err := s.str()
	if err != nil {
		return nil, err
	}
	k := s.b[start:end]
	if esc {
		u, err := unquote(s.b[start-1 : end+1])
		if err != nil {
			return nil, err
		}
		k = []byte(u)
	}
	if !s.consume(':') {
		return nil, s.fail("expected ':' after an object key")
	}
	s.skipWS()
	return k, nil
}

// next is called after an object member or array element: it consumes ',' and reports
// true, or consumes the closing bracket and reports false.
func (s *scanner) next(closing byte) (bool, error) {
	s.skipWS()
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',':
			s.i++
			return true, nil
		case closing:
			s.i++
			return false, nil
		}
	}
	return false, s.fail("expected ',' or '" + string(closing) + "'")
}

// open consumes the opening bracket of an object or array and reports whether the
// container has members (false: it was empty and is already closed).
func (s *scanner) open(opening, closing byte) (bool, error) {
	if !s.consume(opening) {
		return false, s.fail("expected '" + string(opening) + "'")
	}
	if s.consume(closing) {
		return false, nil
	}
	return true, nil
}

// skipValue skips one value at s.i (no leading whitespace) and everything nested in it.
func (s *scanner) skipValue(depth int) error {
	if depth > maxDepth {
		return s.fail("nested too deeply")
	}
	if s.i >= len(s.b) {
		return s.fail("expected a value")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		more, err := s.open('{', '}')
		for err == nil && more {
			if _, err = s.key(); err != nil {
				break
			}
			if err = s.skipValue(depth + 1); err != nil {
				break
			}
			more, err = s.next('}')
		}
		return err
	case c == '[':
		more, err := s.open('[', ']')
		for err == nil && more {
			s.skipWS()
			if err = s.skipValue(depth + 1); err != nil {
				break
			}
			more, err = s.next(']')
		}
		return err
	case c == '"':
		_, _, _, err := s.str()
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	}
	return s.fail("expected a value")
}

// skipLoose skips one value at s.i (no leading whitespace) matching only quotes and
// brackets, without checking its grammar: it is for the object of a watch event and the
// items of a list, which the item decoder parses (and checks) anyway. A value that is not
// valid JSON is found out there.
func (s *scanner) skipLoose() error {
	start, depth := s.i, 0
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			s.i++
			for {
				k := bytes.IndexByte(s.b[s.i:], '"')
				if k < 0 {
					s.i = len(s.b)
					return s.fail("unterminated string")
				}
				end := s.i + k
				n := 0 // backslashes right before the quote
				for end-1-n >= s.i && s.b[end-1-n] == '\\' {
					n++
				}
				s.i = end + 1
				if n%2 == 0 {
					break
				}
			}
			if depth == 0 {
				return nil
			}
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return s.endLoose(start)
			}
			depth--
			s.i++
			if depth == 0 {
				return nil
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return s.endLoose(start)
			}
			s.i++
		default:
			s.i++
		}
	}
	if depth > 0 {
		return s.fail("unterminated value")
	}
	return s.endLoose(start)
}

// endLoose ends a scalar skipped by skipLoose: it must not be empty.
func (s *scanner) endLoose(start int) error {
	if s.i == start {
		return s.fail("expected a value")
	}
	return nil
}

func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.fail("invalid literal")
	}
	s.i += len(lit)
	return nil
}

// number skips a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.i < len(s.b) && isDigit(s.b[s.i]):
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	default:
		return s.fail("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return s.fail("invalid number")
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.i >= len(s.b) || !isDigit(s.b[s.i]) {
			return s.fail("invalid number")
		}
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
	}
	return nil
}

// end checks that nothing but whitespace follows.
func (s *scanner) end() error {
	s.skipWS()
	if s.i != len(s.b) {
		return s.fail("unexpected data after the value")
	}
	return nil
}

// objectMeta reads metadata.resourceVersion and whether metadata.annotations carries
// k8s.io/initial-events-end: "true" from an encoded object that the scanner has already
// validated. Anything missing, or an object that is not a JSON object, gives zero values.
func objectMeta(obj []byte, wantAnnotations bool) (rv string, endOfInitial bool, err error) {
	s := scanner{b: obj}
	s.skipWS()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return "", false, nil
	}
	more, err := s.open('{', '}')
	for err == nil && more {
		var k []byte
		if k, err = s.key(); err != nil {
			break
		}
		if string(k) != "metadata" || s.i >= len(s.b) || s.b[s.i] != '{' {
			err = s.skipValue(1)
		} else {
			rv, endOfInitial, err = s.metadata(wantAnnotations)
			if err == nil && (rv != "" || !wantAnnotations) {
				return rv, endOfInitial, nil
			}
		}
		if err == nil {
			more, err = s.next('}')
		}
	}
	return rv, endOfInitial, err
}

// metadata reads the metadata object at s.i.
func (s *scanner) metadata(wantAnnotations bool) (rv string, endOfInitial bool, err error) {
	more, err := s.open('{', '}')
	for err == nil && more {
		var k []byte
		if k, err = s.key(); err != nil {
			break
		}
		switch {
		case string(k) == "resourceVersion" && s.i < len(s.b) && s.b[s.i] == '"':
			if rv, err = s.stringValue(); err == nil && !wantAnnotations {
				return rv, false, nil // the rest of the metadata does not matter
			}
		case string(k) == "annotations" && wantAnnotations && s.i < len(s.b) && s.b[s.i] == '{':
			endOfInitial, err = s.annotations()
		default:
			err = s.skipValue(2)
		}
		if err == nil {
			more, err = s.next('}')
		}
	}
	return rv, endOfInitial, err
}

// annotations reads an annotations object and reports whether it marks the end of the
// initial events.
func (s *scanner) annotations() (bool, error) {
	found := false
	more, err := s.open('{', '}')
	for err == nil && more {
		var k []byte
		if k, err = s.key(); err != nil {
			break
		}
		if string(k) == InitialEventsEnd && s.i < len(s.b) && s.b[s.i] == '"' {
			var v string
			if v, err = s.stringValue(); err == nil && v == "true" {
				found = true
			}
		} else {
			err = s.skipValue(3)
		}
		if err == nil {
			more, err = s.next('}')
		}
	}
	return found, err
}
