package main

import (
	"bytes"
	"io"
	"log"
)

// unsolicited is how net/http's Transport starts the line it logs, through
// the standard logger, for bytes that arrived on an idle connection. The
// line quotes the bytes, which may be another client's answer or a key the
// upstream echoed back.
var unsolicited = []byte("Unsolicited response received on idle HTTP channel")

// stdLogScrubber passes the standard logger's lines on (to the gateway's
// log, once slog.SetDefault routed them there) with such quoted bytes left
// out: what happened is in the gateway's own finding
// (breakwater_upstream_stray_bytes_total, docs/gateway.md#the-edge).
type stdLogScrubber struct{ next io.Writer }

func (s stdLogScrubber) Write(p []byte) (int, error) {
	if i := bytes.Index(p, unsolicited); i >= 0 {
		line := append(append([]byte(nil), p[:i+len(unsolicited)]...), " (its bytes are not logged)\n"...)
		if _, err := s.next.Write(line); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return s.next.Write(p)
}

// scrubStdLog wraps the standard logger's current output (once).
func scrubStdLog() {
	if _, ok := log.Writer().(stdLogScrubber); !ok {
		log.SetOutput(stdLogScrubber{next: log.Writer()})
	}
}
