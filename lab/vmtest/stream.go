package vmtest

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// CopyUntilMarker copies the guest's test channel from src to dst until the
// exit marker line "<marker>=<status>", and returns the status. The guest
// prints the marker as "\n<marker>=<status>\n", so the newline just before
// it is the guest's and is dropped: dst gets exactly what the test wrote,
// whether or not its output ended with a newline. What follows the marker is
// read and discarded, so the guest never blocks on a full channel. found is
// false when src ended without a marker (a guest that crashed or was
// killed); err is a read or write error.
func CopyUntilMarker(dst io.Writer, src io.Reader, marker string) (status int, found bool, err error) {
	r := bufio.NewReaderSize(src, 64<<10)
	pendingNewline := false
	for {
		line, rerr := r.ReadString('\n')
		body, complete := strings.CutSuffix(line, "\n")
		if complete {
			if s, ok := parseMarker(body, marker); ok {
				_, derr := io.Copy(io.Discard, r)
				return s, true, derr
			}
		}
		if line != "" {
			out := body
			if pendingNewline {
				out = "\n" + body
			}
			if _, werr := io.WriteString(dst, out); werr != nil {
				_, _ = io.Copy(io.Discard, r)
				return 0, false, werr
			}
			pendingNewline = complete
		}
		if rerr == io.EOF {
			if pendingNewline {
				_, werr := io.WriteString(dst, "\n")
				return 0, false, werr
			}
			return 0, false, nil
		}
		if rerr != nil {
			return 0, false, rerr
		}
	}
}

// parseMarker parses "<marker>=<status>" (a tty may have added "\r").
func parseMarker(line, marker string) (int, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), marker+"=")
	if !ok {
		return 0, false
	}
	s, err := strconv.Atoi(rest)
	if err != nil || s < 0 || s > 255 {
		return 0, false
	}
	return s, true
}
