package logs

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// DefaultPoll is how often a follow looks for new records, a rotation and
// the container's end: a reader sees a line within it, and it costs one
// stat (and one Running call) per poll.
const DefaultPoll = 250 * time.Millisecond

// Options select what Read returns. The zero value is every line of both
// streams except none for Tail: set Tail to -1 for all.
type Options struct {
	// Tail > 0 returns only the last Tail lines, 0 none, < 0 all (the
	// Kubernetes API's tailLines). With Follow the lines written later
	// follow them.
	Tail int
	// Since, when set, skips lines written before it (sinceSeconds,
	// sinceTime). A joined partial line is as old as its first part.
	Since time.Time
	// Timestamps prefixes each line with the runtime's timestamp of it and
	// a space, as kubectl logs --timestamps.
	Timestamps bool
	// Stream is StreamStdout, StreamStderr, or StreamAll ("" too).
	Stream Stream
	// Follow keeps reading the live file after its end, across rotations,
	// until ctx ends or Running says the container stopped.
	Follow bool
	// Running, with Follow, is asked at the end of the live file: once it
	// returns false the file is read to its end and Read returns. Nil
	// follows until ctx ends.
	Running func(ctx context.Context) bool
	// Poll is DefaultPoll when zero.
	Poll time.Duration
}

// Read copies the container log whose live file is path to w: its
// rotated files oldest first (gzipped ones decompressed), then the live
// file, as text, one "\n"-terminated line per logical line (partial
// records joined, across files too). A line the container never finished
// (its last record partial) is written without "\n" at the end, unless
// following, which waits for the rest. A final fragment without "\n" is a
// record still being written and is left for later.
//
// A line that is not a CRI record stops Read with a *FormatError
// (unwrapping to ErrMalformed); with Tail > 0 nothing was written then. A
// rotated file that vanishes while Read runs (compressed or removed by a
// rotation) is read compressed or skipped; a missing live file is an error
// (fs.ErrNotExist) unless rotated files exist or Follow waits for it.
// Following ends without error when ctx ends.
func Read(ctx context.Context, path string, opts Options, w io.Writer) error {
	want, err := selectStreams(opts.Stream)
	if err != nil {
		return fmt.Errorf("read CRI log %s: %w", path, err)
	}
	r := &reader{opts: opts, want: want, out: &sink{w: w, tail: opts.Tail}, pending: map[Stream]*pendingLine{}}
	files, err := rotated(path)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := r.readRotated(f); err != nil {
			return err
		}
	}
	live, err := os.Open(path)
	defer func() {
		if live != nil {
			live.Close()
		}
	}()
	switch {
	case err == nil:
	case errors.Is(err, os.ErrNotExist) && (len(files) > 0 || opts.Follow):
		// Between a rotation's rename and the runtime's reopen there is
		// no live file for a moment.
		live = nil
	default:
		return fmt.Errorf("read CRI log %s: %w", path, err)
	}
	var lr *lineReader
	if live != nil {
		r.begin(path)
		lr = newLineReader(live)
		if err := r.drain(lr); err != nil {
			return err
		}
	}
	if !opts.Follow {
		if err := r.flushPending(); err != nil {
			return err
		}
		return r.out.flush()
	}
	if err := r.out.flush(); err != nil {
		return fmt.Errorf("read CRI log %s: write: %w", path, err)
	}
	return r.follow(ctx, path, live, lr, &live)
}

// follow reads f (nil while path does not exist) from where lr is, and
// then whatever file path names after a rotation. *cur tracks the open
// file for Read's deferred Close.
func (r *reader) follow(ctx context.Context, path string, f *os.File, lr *lineReader, cur **os.File) error {
	poll := r.opts.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if f != nil {
			if err := r.drain(lr); err != nil {
				return err
			}
		}
		fi, err := os.Stat(path)
		switch {
		case err == nil && (f == nil || !sameFile(f, fi)):
			// Rotated: the runtime writes to the new file since its
			// reopen, and what it wrote to f before is read above. A
			// fragment left in f is a record cut by a crash: dropped.
			next, err := os.Open(path)
			if errors.Is(err, os.ErrNotExist) {
				break // rotated once more meanwhile: the next poll
			}
			if err != nil {
				return fmt.Errorf("follow CRI log %s: %w", path, err)
			}
			if f != nil {
				if err := r.drain(lr); err != nil {
					next.Close()
					return err
				}
				f.Close()
			}
			f, *cur = next, next
			lr = newLineReader(f)
			r.begin(path)
			continue
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("follow CRI log %s: %w", path, err)
		}
		if r.opts.Running != nil && !r.opts.Running(ctx) {
			// The container ended: its last records are in f.
			if f != nil {
				if err := r.drain(lr); err != nil {
					return err
				}
			}
			return r.flushPending()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func sameFile(f *os.File, fi os.FileInfo) bool {
	cur, err := f.Stat()
	return err == nil && os.SameFile(cur, fi)
}

// reader turns records into lines; its state (partial lines) carries over
// from file to file.
type reader struct {
	opts    Options
	want    map[Stream]bool
	out     *sink
	pending map[Stream]*pendingLine
	name    string // the file being read, for errors
	n       int    // its lines read so far
}

// pendingLine is a line whose parts so far were partial records.
type pendingLine struct {
	ts      time.Time
	rawTS   []byte
	content []byte
}

func (r *reader) begin(name string) { r.name, r.n = name, 0 }

// readRotated reads a whole rotated file.
func (r *reader) readRotated(f rotatedFile) error {
	name, compressed := f.path, f.compressed
	file, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) && !compressed {
		// Compressed since it was listed.
		name, compressed = name+gzSuffix, true
		file, err = os.Open(name)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil // removed as one too many since it was listed
	}
	if err != nil {
		return fmt.Errorf("read CRI log %s: %w", name, err)
	}
	defer file.Close()
	var src io.Reader = file
	if compressed {
		zr, err := gzip.NewReader(file)
		if err != nil {
			return fmt.Errorf("read CRI log %s: %w", name, err)
		}
		defer zr.Close()
		src = zr
	}
	r.begin(name)
	// A rotated file is complete: a fragment at its end is a record cut
	// by a crash, dropped.
	return r.drain(newLineReader(src))
}

// drain reads lr's records up to its end.
func (r *reader) drain(lr *lineReader) error {
	for {
		line, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read CRI log %s: %w", r.name, err)
		}
		if err := r.record(line); err != nil {
			return err
		}
	}
}

func (r *reader) record(line []byte) error {
	r.n++
	rec, reason := parseRecord(line)
	if reason != "" {
		return &FormatError{Path: r.name, Line: r.n, Reason: reason}
	}
	if !r.want[rec.stream] {
		return nil
	}
	p := r.pending[rec.stream]
	if rec.partial {
		if p == nil {
			p = &pendingLine{ts: rec.ts, rawTS: bytes.Clone(rec.rawTS)}
			r.pending[rec.stream] = p
		}
		p.content = append(p.content, rec.content...)
		return nil
	}
	ts, raw, content := rec.ts, rec.rawTS, rec.content
	if p != nil {
		ts, raw, content = p.ts, p.rawTS, append(p.content, content...)
		delete(r.pending, rec.stream)
	}
	return r.emit(ts, raw, content, true)
}

// flushPending writes the lines the container never finished.
func (r *reader) flushPending() error {
	for _, s := range []Stream{StreamStdout, StreamStderr} {
		if p, ok := r.pending[s]; ok {
			delete(r.pending, s)
			if err := r.emit(p.ts, p.rawTS, p.content, false); err != nil {
				return err
			}
		}
	}
	return r.out.flush()
}

func (r *reader) emit(ts time.Time, rawTS, content []byte, newline bool) error {
	if !r.opts.Since.IsZero() && ts.Before(r.opts.Since) {
		return nil
	}
	b := make([]byte, 0, len(rawTS)+1+len(content)+1)
	if r.opts.Timestamps {
		b = append(append(b, rawTS...), ' ')
	}
	b = append(b, content...)
	if newline {
		b = append(b, '\n')
	}
	if err := r.out.line(b); err != nil {
		return fmt.Errorf("read CRI log %s: write: %w", r.name, err)
	}
	return nil
}

// lineReader returns "\n"-terminated lines of any length. At the end of
// its input it keeps an unterminated fragment and returns io.EOF, so that
// a file still being written can be read on once it grew.
type lineReader struct {
	br   *bufio.Reader
	frag []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next line without its "\n"; it is valid until the next
// call.
func (l *lineReader) next() ([]byte, error) {
	for {
		chunk, err := l.br.ReadSlice('\n')
		if err == nil {
			chunk = chunk[:len(chunk)-1]
			if l.frag == nil {
				return chunk, nil
			}
			line := append(l.frag, chunk...)
			l.frag = nil
			return line, nil
		}
		l.frag = append(l.frag, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
}

// sink writes lines to w; with tail > 0 it keeps the last tail lines in a
// ring until flush, with tail == 0 it drops them until flush. After flush
// every line is written at once.
type sink struct {
	w    io.Writer
	tail int
	ring [][]byte
	next int
}

func (s *sink) line(b []byte) error {
	switch {
	case s.tail < 0:
		_, err := s.w.Write(b)
		return err
	case s.tail == 0:
		return nil
	}
	// The ring grows with the lines read, up to tail: a tail of two
	// billion lines (any caller may ask) costs what the log holds, not
	// two billion slots at the first line.
	if len(s.ring) < s.tail {
		s.ring = append(s.ring, b)
		return nil
	}
	s.ring[s.next] = b
	s.next = (s.next + 1) % s.tail
	return nil
}

func (s *sink) flush() error {
	if s.tail > 0 {
		// Until the ring is full next is 0, its oldest line.
		for i := range s.ring {
			if _, err := s.w.Write(s.ring[(s.next+i)%len(s.ring)]); err != nil {
				return err
			}
		}
		s.ring = nil
	}
	s.tail = -1
	return nil
}
