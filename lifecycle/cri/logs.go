package cri

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Stream selects the output streams ReadLogs returns.
type Stream string

// The streams of a CRI log.
const (
	StreamAll    Stream = "all" // the zero value "" means the same
	StreamStdout Stream = "stdout"
	StreamStderr Stream = "stderr"
)

// LogOptions select what ReadLogs returns. The zero value is every line of
// both streams.
type LogOptions struct {
	// TailLines > 0 returns only the last TailLines lines; 0 returns all.
	TailLines int
	// Stream is StreamStdout, StreamStderr, or StreamAll ("" too).
	Stream Stream
}

// Tags of a CRI log record (runtimeapi.LogTag): P for a part of a line that
// the runtime split (its line was longer than the runtime's maximum, or the
// output ended without a newline), F for the last or only part.
const (
	tagPartial = "P"
	tagFull    = "F"
)

// ReadLogs copies the container log at path, in the CRI log format, to w:
// the content of each record, partial records joined into their line, one
// "\n"-terminated line per logical line (a line the container never
// finished, the last record being partial, has no "\n"). A record is
//
//	<RFC 3339 timestamp> <stdout|stderr> <P|F>[:<more tags>] <content>\n
//
// as containerd and CRI-O write them. Lines of the other stream are skipped
// but still checked. A final fragment without "\n" is a record still being
// written and is ignored. A line that is not a record stops ReadLogs with a
// *LogFormatError naming its line number (unwrapping to ErrMalformedLog);
// lines before it may already have been written to w (none when TailLines is
// set, which keeps the last lines in memory until the end).
//
// Unlike the kubelet, TailLines counts logical lines of the selected
// stream, not records of either stream.
func ReadLogs(path string, opts LogOptions, w io.Writer) error {
	want, err := selectStreams(opts.Stream)
	if err != nil {
		return fmt.Errorf("read CRI log %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read CRI log %s: %w", path, err)
	}
	defer f.Close()

	out := &lineSink{w: w, tail: opts.TailLines}
	pending := map[string][]byte{}
	r := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		line, err := readRecord(r)
		if errors.Is(err, io.EOF) {
			break // an unterminated fragment, if any, is still being written
		}
		if err != nil {
			return fmt.Errorf("read CRI log %s: %w", path, err)
		}
		rec, reason := parseRecord(line)
		if reason != "" {
			return &LogFormatError{Path: path, Line: n, Reason: reason}
		}
		if !want[rec.stream] {
			continue
		}
		if rec.partial {
			pending[rec.stream] = append(pending[rec.stream], rec.content...)
			continue
		}
		full := append(pending[rec.stream], rec.content...)
		delete(pending, rec.stream)
		if err := out.line(append(full, '\n')); err != nil {
			return fmt.Errorf("read CRI log %s: write: %w", path, err)
		}
	}
	// The container's output ended without a newline: the runtime wrote
	// the rest as a partial record.
	for _, s := range []string{string(StreamStdout), string(StreamStderr)} {
		if p, ok := pending[s]; ok {
			if err := out.line(p); err != nil {
				return fmt.Errorf("read CRI log %s: write: %w", path, err)
			}
		}
	}
	if err := out.flush(); err != nil {
		return fmt.Errorf("read CRI log %s: write: %w", path, err)
	}
	return nil
}

func selectStreams(s Stream) (map[string]bool, error) {
	switch s {
	case "", StreamAll:
		return map[string]bool{string(StreamStdout): true, string(StreamStderr): true}, nil
	case StreamStdout, StreamStderr:
		return map[string]bool{string(s): true}, nil
	}
	return nil, fmt.Errorf("%w: stream %q (want %q, %q or %q)", ErrInvalidOption, s, StreamStdout, StreamStderr, StreamAll)
}

// readRecord returns the next "\n"-terminated line without its "\n", of any
// length, or io.EOF when none is left (an unterminated rest included).
func readRecord(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case err == nil:
			if buf == nil {
				return chunk[:len(chunk)-1], nil
			}
			return append(buf, chunk[:len(chunk)-1]...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			buf = append(buf, chunk...)
		default:
			return nil, err
		}
	}
}

type record struct {
	stream  string
	partial bool
	content []byte
}

// parseRecord parses one line of a CRI log; reason is why it is not a
// record, "" when it is.
func parseRecord(line []byte) (rec record, reason string) {
	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if len(line) == 0 {
		return rec, "empty line"
	}
	if !ok {
		return rec, "no stream after the timestamp"
	}
	if _, err := time.Parse(time.RFC3339Nano, string(ts)); err != nil {
		return rec, fmt.Sprintf("timestamp %q is not RFC 3339", truncate(ts))
	}
	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return rec, "no tag after the stream"
	}
	rec.stream = string(stream)
	if rec.stream != string(StreamStdout) && rec.stream != string(StreamStderr) {
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

// lineSink writes lines to w, or with tail > 0 keeps the last tail lines in
// a ring and writes them on flush.
type lineSink struct {
	w     io.Writer
	tail  int
	ring  [][]byte
	next  int
	count int
}

func (s *lineSink) line(b []byte) error {
	if s.tail <= 0 {
		_, err := s.w.Write(b)
		return err
	}
	if s.ring == nil {
		s.ring = make([][]byte, s.tail)
	}
	s.ring[s.next] = bytes.Clone(b)
	s.next = (s.next + 1) % s.tail
	s.count++
	return nil
}

func (s *lineSink) flush() error {
	if s.tail <= 0 {
		return nil
	}
	n := min(s.count, s.tail)
	start := (s.next - n + s.tail) % s.tail
	for i := range n {
		if _, err := s.w.Write(s.ring[(start+i)%s.tail]); err != nil {
			return err
		}
	}
	return nil
}
