package vocab

// The tokenizer of the pyautogui subset TranslatePyautogui plays on the
// host: names, numbers, strings (with prefixes and escapes), operators and
// statement separators; the parser is in pyautogui.go.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type pyKind int

const (
	pyEOF pyKind = iota
	pyName
	pyNumber
	pyStr
	pyOp
	pyNewline
)

type pyToken struct {
	kind pyKind
	text string // name, operator, number text, or the string's value
	line int
}

// pyTokenize splits code into tokens: names, numbers, string literals
// (single, double and triple quotes, r/u/b prefixes, backslash escapes),
// operators, and newlines outside brackets. Comments and line continuations
// are dropped.
func pyTokenize(code string) ([]pyToken, error) {
	var toks []pyToken
	line, depth := 1, 0
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '\n':
			if depth == 0 {
				toks = append(toks, pyToken{pyNewline, "\n", line})
			}
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f':
			i++
		case c == '#':
			for i < len(code) && code[i] != '\n' {
				i++
			}
		case c == '\\' && i+1 < len(code) && (code[i+1] == '\n' || code[i+1] == '\r'):
			i += 2
			if i < len(code) && code[i-1] == '\r' && code[i] == '\n' {
				i++
			}
			line++
		case c == '"' || c == '\'' || (isPyStringPrefix(code[i:]) != 0):
			n := isPyStringPrefix(code[i:])
			prefix := strings.ToLower(code[i : i+n])
			if strings.Contains(prefix, "f") || strings.Contains(prefix, "b") {
				return nil, fmt.Errorf("line %d: %s-strings are not literals deskfarm plays", line, prefix)
			}
			s, end, nl, err := pyString(code, i+n, strings.Contains(prefix, "r"))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			toks = append(toks, pyToken{pyStr, s, line})
			line += nl
			i = end
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(code) && code[i+1] >= '0' && code[i+1] <= '9'):
			j := i
			for j < len(code) && (isPyNameByte(code[j]) || code[j] == '.' ||
				((code[j] == '+' || code[j] == '-') && (code[j-1] == 'e' || code[j-1] == 'E'))) {
				j++
			}
			toks = append(toks, pyToken{pyNumber, code[i:j], line})
			i = j
		case isPyNameByte(c) || c >= 0x80:
			j := i
			for j < len(code) {
				r, size := utf8.DecodeRuneInString(code[j:])
				if !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
					break
				}
				j += size
			}
			if j == i {
				return nil, fmt.Errorf("line %d: unexpected character %q", line, code[i:i+1])
			}
			toks = append(toks, pyToken{pyName, code[i:j], line})
			i = j
		case strings.IndexByte("()[],=.;-+:", c) >= 0:
			switch c {
			case '(', '[':
				depth++
			case ')', ']':
				depth--
			}
			toks = append(toks, pyToken{pyOp, string(c), line})
			i++
		default:
			return nil, fmt.Errorf("line %d: %q is not part of a literal pyautogui call", line, string(c))
		}
	}
	return append(toks, pyToken{pyNewline, "\n", line}, pyToken{pyEOF, "", line}), nil
}

func isPyNameByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// isPyStringPrefix returns the length of a string prefix (r, u, b, f and
// pairs) directly followed by a quote, or 0.
func isPyStringPrefix(s string) int {
	for n := 1; n <= 2 && n < len(s); n++ {
		if !strings.ContainsRune("rRuUbBfF", rune(s[n-1])) {
			return 0
		}
		if s[n] == '\'' || s[n] == '"' {
			return n
		}
	}
	return 0
}

// pyString reads a string literal starting at its opening quote; it returns
// the value, the index after it and the newlines it spans.
func pyString(code string, i int, raw bool) (string, int, int, error) {
	q := code[i : i+1]
	if strings.HasPrefix(code[i:], strings.Repeat(q, 3)) {
		q = strings.Repeat(q, 3)
	}
	i += len(q)
	var b strings.Builder
	nl := 0
	for i < len(code) {
		if strings.HasPrefix(code[i:], q) {
			return b.String(), i + len(q), nl, nil
		}
		c := code[i]
		if c == '\n' {
			if len(q) == 1 {
				return "", 0, 0, errors.New("unterminated string")
			}
			nl++
		}
		if c != '\\' || raw {
			if raw && c == '\\' && i+1 < len(code) {
				b.WriteString(code[i : i+2]) // a raw string keeps the escape, quote included
				i += 2
				continue
			}
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(code) {
			break
		}
		e := code[i+1]
		i += 2
		switch e {
		case '\n':
			nl++
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(code) {
				return "", 0, 0, fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(code[i:i+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", 0, 0, fmt.Errorf("bad \\%c escape %q", e, code[i:i+n])
			}
			b.WriteRune(rune(v))
			i += n
		default:
			b.WriteByte('\\') // Python keeps unknown escapes
			b.WriteByte(e)
		}
	}
	return "", 0, 0, errors.New("unterminated string")
}
