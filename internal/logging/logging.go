package logging

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Format is how records are written.
type Format string

// The formats.
const (
	FormatText Format = "text" // slog's key=value text
	FormatJSON Format = "json" // one JSON object per line
)

// DefaultQueue is the default number of records waiting to be written. A
// record is a few hundred bytes: 4096 of them is about a megabyte at most,
// and covers a burst of every pod on a dense node logging at once while
// the output is slow.
const DefaultQueue = 4096

// ParseLevel parses debug, info, warn or error (slog's names, any case).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// ParseFormat parses text or json (any case).
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(s)); f {
	case FormatText, FormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("format %q: want text or json", s)
}

// Options configure a Logger.
type Options struct {
	Level  slog.Level
	Format Format // FormatText when empty
	// Queue is the number of records that may wait for the writer
	// (DefaultQueue when 0).
	Queue int
	// Journal: the output is journald's stream (see JournalStream): no
	// time attribute, and a syslog priority prefix on every line.
	Journal bool
}

// Logger owns the queue and the writer goroutine. Its methods are safe for
// concurrent use.
type Logger struct {
	out     io.Writer
	journal bool
	level   slog.LevelVar
	ch      chan item
	dropped atomic.Uint64
	// base is the formatting handler of the current format, writing into
	// buf; gen changes with it, so that derived handlers rebuild theirs.
	base atomic.Pointer[baseHandler]

	closeOnce sync.Once
	stop      chan struct{}
	done      chan struct{}
	buf       bytes.Buffer // the writer goroutine's only
}

type baseHandler struct {
	h      slog.Handler
	format Format
	gen    uint64
}

// item is one queued record and the handler that queued it.
type item struct {
	h    *handler
	base *baseHandler // the format when the record was handled
	r    slog.Record
}

// New starts a Logger writing to out. Close stops it.
func New(out io.Writer, opts Options) *Logger {
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Format == "" {
		opts.Format = FormatText
	}
	l := &Logger{out: out, journal: opts.Journal, ch: make(chan item, opts.Queue),
		stop: make(chan struct{}), done: make(chan struct{})}
	l.level.Set(opts.Level)
	l.setBase(opts.Format, 1)
	go l.write()
	return l
}

// Slog returns a slog.Logger on this Logger.
func (l *Logger) Slog() *slog.Logger { return slog.New(l.Handler()) }

// Handler returns the non-blocking handler.
func (l *Logger) Handler() slog.Handler { return &handler{l: l} }

// SetLevel changes the minimum level of every handler of l.
func (l *Logger) SetLevel(lvl slog.Level) { l.level.Set(lvl) }

// Level is the minimum level in force.
func (l *Logger) Level() slog.Level { return l.level.Level() }

// SetFormat changes the format of every handler of l, for the records
// handled from now on.
func (l *Logger) SetFormat(f Format) {
	cur := l.base.Load()
	if cur.format == f {
		return
	}
	l.setBase(f, cur.gen+1)
}

// Format is the format in force.
func (l *Logger) Format() Format { return l.base.Load().format }

// Dropped is the number of records lost: dropped because the queue was
// full, or not written because the output failed.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

func (l *Logger) setBase(f Format, gen uint64) {
	opts := &slog.HandlerOptions{Level: &l.level}
	if l.journal {
		opts.ReplaceAttr = dropTime
	}
	var h slog.Handler
	if f == FormatJSON {
		h = slog.NewJSONHandler(&l.buf, opts)
	} else {
		h = slog.NewTextHandler(&l.buf, opts)
	}
	l.base.Store(&baseHandler{h: h, format: f, gen: gen})
}

// dropTime leaves out the top-level time attribute: journald stamps every
// line itself.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// Close writes what is queued (for at most timeout) and stops the writer.
// Records handled after Close are dropped and counted.
func (l *Logger) Close(timeout time.Duration) {
	l.closeOnce.Do(func() { close(l.stop) })
	select {
	case <-l.done:
	case <-time.After(timeout):
	}
}

// write is the writer goroutine: it formats and writes queued records until
// Close, then drains the queue.
func (l *Logger) write() {
	defer close(l.done)
	var reported uint64 // drops already announced
	for {
		var it item
		select {
		case it = <-l.ch:
		case <-l.stop:
			for {
				select {
				case it = <-l.ch:
					l.emit(it, &reported)
				default:
					l.reportDrops(&reported)
					return
				}
			}
		}
		l.emit(it, &reported)
	}
}

// emit writes one record, then, once the queue is empty, a line about the
// records dropped since the last such line: they were dropped after what
// was queued, so the line comes after it.
func (l *Logger) emit(it item, reported *uint64) {
	l.format(it.h.resolve(it.base), it.r)
	if len(l.ch) == 0 {
		l.reportDrops(reported)
	}
}

// reportDrops writes one line if records were dropped since the last.
func (l *Logger) reportDrops(reported *uint64) {
	d := l.dropped.Load()
	if d <= *reported {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn, "log records dropped: the output was too slow", 0)
	r.AddAttrs(slog.Uint64("dropped", d-*reported), slog.Uint64("dropped_total", d))
	*reported = d
	l.format(l.base.Load().h, r)
}

// format writes r through h (a handler writing into l.buf) with one Write.
func (l *Logger) format(h slog.Handler, r slog.Record) {
	l.buf.Reset()
	if l.journal {
		l.buf.WriteString(priority(r.Level))
	}
	if err := h.Handle(context.Background(), r); err != nil {
		l.dropped.Add(1)
		return
	}
	if _, err := l.out.Write(l.buf.Bytes()); err != nil {
		l.dropped.Add(1)
	}
}

// priority is the sd-daemon(3) prefix journald turns into the syslog
// priority of the line.
func priority(lvl slog.Level) string {
	switch {
	case lvl >= slog.LevelError:
		return "<3>"
	case lvl >= slog.LevelWarn:
		return "<4>"
	case lvl >= slog.LevelInfo:
		return "<6>"
	}
	return "<7>"
}

// handler is the slog.Handler of a Logger: it queues, the writer formats.
// ops are the WithAttrs/WithGroup calls that derived it, replayed on the
// base handler whenever the format changes.
type handler struct {
	l   *Logger
	ops []op
	// cache is the base handler with ops applied, for base generation
	// cacheGen; only the writer goroutine touches it.
	cache    slog.Handler
	cacheGen uint64
}

type op struct {
	group string
	attrs []slog.Attr
}

func (h *handler) Enabled(_ context.Context, lvl slog.Level) bool {
	return lvl >= h.l.level.Level()
}

// Handle queues a clone of r, or drops it when the queue is full. It never
// blocks.
func (h *handler) Handle(_ context.Context, r slog.Record) error {
	select {
	case <-h.l.stop:
		h.l.dropped.Add(1)
		return nil
	default:
	}
	select {
	case h.l.ch <- item{h: h, base: h.l.base.Load(), r: r.Clone()}:
	default:
		h.l.dropped.Add(1)
	}
	return nil
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &handler{l: h.l, ops: append(h.ops[:len(h.ops):len(h.ops)], op{attrs: attrs})}
}

func (h *handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &handler{l: h.l, ops: append(h.ops[:len(h.ops):len(h.ops)], op{group: name})}
}

// resolve is base with h's attributes and groups; called by the writer
// goroutine only.
func (h *handler) resolve(b *baseHandler) slog.Handler {
	if h.cache != nil && h.cacheGen == b.gen {
		return h.cache
	}
	out := b.h
	for _, o := range h.ops {
		if o.group != "" {
			out = out.WithGroup(o.group)
		} else {
			out = out.WithAttrs(o.attrs)
		}
	}
	h.cache, h.cacheGen = out, b.gen
	return out
}

// JournalStream reports whether f is connected to journald: systemd sets
// JOURNAL_STREAM to "<device>:<inode>" of the stream it gives a service
// (systemd.exec(5)), and f is that stream only if both match (a child
// whose stderr was redirected inherits the variable, not the stream).
func JournalStream(f *os.File) bool {
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return dev == strconv.FormatUint(uint64(st.Dev), 10) && ino == strconv.FormatUint(st.Ino, 10)
}
