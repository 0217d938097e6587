package logs

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Stream selects the output streams Read returns.
type Stream string

// The streams of a CRI log.
const (
	StreamAll    Stream = "all" // the zero value "" means the same
	StreamStdout Stream = "stdout"
	StreamStderr Stream = "stderr"
)

var (
	// ErrMalformed is wrapped for a line that is not a CRI log record.
	ErrMalformed = errors.New("malformed CRI log line")
	// ErrInvalidOption is wrapped for an Options value Read does not know.
	ErrInvalidOption = errors.New("invalid log option")
)

// FormatError is a line of a CRI log file that cannot be parsed. It
// unwraps to ErrMalformed.
type FormatError struct {
	Path   string
	Line   int // 1-based
	Reason string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("read CRI log %s: line %d: %s: %s", e.Path, e.Line, ErrMalformed, e.Reason)
}

func (e *FormatError) Unwrap() error { return ErrMalformed }

// Tags of a CRI log record (runtimeapi.LogTag): P for a part of a line that
// the runtime split (longer than its buffer, or output that ended without
// a newline), F for the last or only part.
const (
	tagPartial = "P"
	tagFull    = "F"
)

// record is one line of a CRI log file:
//
//	<RFC 3339 timestamp> <stdout|stderr> <P|F>[:<more tags>] <content>
type record struct {
	ts      time.Time
	rawTS   []byte // as written, for Options.Timestamps
	stream  Stream
	partial bool
	content []byte
}

// parseRecord parses one line (without its "\n"); reason says why it is
// not a record, "" when it is. The record's slices alias line.
func parseRecord(line []byte) (rec record, reason string) {
	if len(line) == 0 {
		return rec, "empty line"
	}
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return rec, "no stream after the timestamp"
	}
	t, err := time.Parse(time.RFC3339Nano, string(ts))
	if err != nil {
		return rec, fmt.Sprintf("timestamp %q is not RFC 3339", truncate(ts))
	}
	rec.ts, rec.rawTS = t, ts
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return rec, "no tag after the stream"
	}
	switch s := Stream(stream); s {
	case StreamStdout, StreamStderr:
		rec.stream = s
	default:
		return rec, fmt.Sprintf("stream %q is neither stdout nor stderr", truncate(stream))
	}
	// A record of an empty line is "<ts> <stream> F \n"; accept one whose
	// trailing space was lost too.
	tags, content, _ := bytes.Cut(rest, []byte{' '})
	first, _, _ := bytes.Cut(tags, []byte{':'})
	switch string(first) {
	case tagPartial:
		rec.partial = true
	case tagFull:
	default:
		return rec, fmt.Sprintf("tag %q is neither P nor F", truncate(tags))
	}
	rec.content = content
	return rec, ""
}

// truncate shortens b for an error message.
func truncate(b []byte) string {
	const max = 40
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}

func selectStreams(s Stream) (map[Stream]bool, error) {
	switch s {
	case "", StreamAll:
		return map[Stream]bool{StreamStdout: true, StreamStderr: true}, nil
	case StreamStdout, StreamStderr:
		return map[Stream]bool{s: true}, nil
	}
	return nil, fmt.Errorf("%w: stream %q (want %q, %q or %q)", ErrInvalidOption, s, StreamStdout, StreamStderr, StreamAll)
}
