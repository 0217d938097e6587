package psi

import (
	"bytes"
	"fmt"
	"math"
	"time"
)

// Line is one line of a pressure file: the share of wall time in which
// some (or all, for "full") non-idle tasks stalled on the resource.
type Line struct {
	// Avg10, Avg60 and Avg300 are running averages over 10, 60 and 300
	// seconds, in percent (0 to 100).
	Avg10, Avg60, Avg300 float64
	// Total is the accumulated stall time since boot (or since the
	// cgroup was created). The file counts it in microseconds.
	Total time.Duration
}

// Stats is the content of one pressure file.
type Stats struct {
	Some, Full Line
	// HasSome and HasFull report which lines the file had. irq has only
	// "full"; cpu before Linux 5.13 has only "some"; the system-wide cpu
	// file's "full" line is all zeros and is dropped by OpenSystem and
	// ReadSystem. A line that is absent is not a line of zeros.
	HasSome, HasFull bool
}

// Bounds of the values Parse accepts.
const (
	// maxAvg is the largest average: a share of wall time in percent.
	maxAvg = 100
	// maxAvgDigits bounds the digits of an average so that its mantissa
	// stays below 2^53 and float64(mantissa)/10^k is correctly rounded
	// (the exact fast path of decimal conversion). The kernel prints
	// "%lu.%02lu", at most 5 digits.
	maxAvgDigits = 15
	// maxTotalUs is the largest total that fits a time.Duration: about
	// 292 years of stall time.
	maxTotalUs = math.MaxInt64 / int64(time.Microsecond/time.Nanosecond)
	// quoteMax bounds how much of a bad line an error message quotes.
	quoteMax = 80
)

// pow10 holds the exact powers of ten a mantissa is divided by.
var pow10 = [maxAvgDigits + 1]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// Parse parses the content of a pressure file. name is only used in
// errors, normally the file's path. It accepts a "some" and/or a "full"
// line, each at most once, in the exact field order the kernel prints; a
// missing final newline is fine, anything else (blank lines, unknown kinds
// or fields, negative, oversized or non-decimal numbers, averages above 100)
// is a *ParseError naming name and the line. Parse does not allocate unless
// it fails.
func Parse(b []byte, name string) (Stats, error) {
	var s Stats
	n := 0
	for len(b) > 0 {
		n++
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		var dst *Line
		var seen *bool
		switch {
		case len(line) >= 5 && string(line[:5]) == "some ":
			dst, seen = &s.Some, &s.HasSome
		case len(line) >= 5 && string(line[:5]) == "full ":
			dst, seen = &s.Full, &s.HasFull
		case len(line) == 0:
			return Stats{}, &ParseError{File: name, Line: n, Msg: "empty line"}
		default:
			return Stats{}, parseErr(name, n, "want a line starting with \"some \" or \"full \"", line)
		}
		if *seen {
			return Stats{}, parseErr(name, n, "second "+string(line[:4])+" line", line)
		}
		l, msg := parseLine(line[5:])
		if msg != "" {
			return Stats{}, parseErr(name, n, msg, line)
		}
		*dst, *seen = l, true
	}
	if !s.HasSome && !s.HasFull {
		return Stats{}, &ParseError{File: name, Msg: "no \"some\" or \"full\" line"}
	}
	return s, nil
}

// parseErr builds the ParseError for line n, quoting (the start of) it.
func parseErr(name string, n int, msg string, line []byte) error {
	if len(line) > quoteMax {
		line = line[:quoteMax]
	}
	return &ParseError{File: name, Line: n, Msg: fmt.Sprintf("%s: %q", msg, line)}
}

// parseLine parses "avg10=A avg60=B avg300=C total=T", the rest of a line
// after its kind. It returns a non-empty message instead of an error so
// that the caller allocates only once, with the line number.
func parseLine(b []byte) (Line, string) {
	var l Line
	var ok bool
	if b, ok = cut(b, "avg10="); !ok {
		return Line{}, "want avg10= after the kind"
	}
	if l.Avg10, b, ok = parseAvg(b); !ok {
		return Line{}, "avg10 is not a percentage"
	}
	if b, ok = cut(b, " avg60="); !ok {
		return Line{}, "want \" avg60=\" after avg10"
	}
	if l.Avg60, b, ok = parseAvg(b); !ok {
		return Line{}, "avg60 is not a percentage"
	}
	if b, ok = cut(b, " avg300="); !ok {
		return Line{}, "want \" avg300=\" after avg60"
	}
	if l.Avg300, b, ok = parseAvg(b); !ok {
		return Line{}, "avg300 is not a percentage"
	}
	if b, ok = cut(b, " total="); !ok {
		return Line{}, "want \" total=\" after avg300"
	}
	us, b, ok := parseTotal(b)
	if !ok {
		return Line{}, "total is not a count of microseconds that fits a time.Duration"
	}
	if len(b) != 0 {
		return Line{}, "unexpected text after total"
	}
	l.Total = time.Duration(us) * time.Microsecond
	return l, ""
}

// cut removes prefix from b.
func cut(b []byte, prefix string) ([]byte, bool) {
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return b, false
	}
	return b[len(prefix):], true
}

// parseAvg parses a decimal percentage "D[.D]" at the start of b, from 0 to
// maxAvg, and returns the rest of b.
func parseAvg(b []byte) (float64, []byte, bool) {
	var mant uint64
	i, digits, frac := 0, 0, -1 // frac counts digits after the point; -1: no point
	for ; i < len(b); i++ {
		c := b[i]
		if c == '.' {
			if frac >= 0 || digits == 0 {
				return 0, b, false
			}
			frac = 0
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		digits++
		if digits > maxAvgDigits {
			return 0, b, false
		}
		mant = mant*10 + uint64(c-'0')
		if frac >= 0 {
			frac++
		}
	}
	if digits == 0 || frac == 0 { // "", ".", "5."
		return 0, b, false
	}
	v := float64(mant)
	if frac > 0 {
		v /= pow10[frac]
	}
	if v > maxAvg {
		return 0, b, false
	}
	return v, b[i:], true
}

// parseTotal parses an unsigned decimal count of microseconds at the start
// of b, at most maxTotalUs, and returns the rest of b.
func parseTotal(b []byte) (int64, []byte, bool) {
	var v int64
	i := 0
	for ; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			break
		}
		d := int64(c - '0')
		if v > (maxTotalUs-d)/10 {
			return 0, b, false
		}
		v = v*10 + d
	}
	if i == 0 {
		return 0, b, false
	}
	return v, b[i:], true
}
