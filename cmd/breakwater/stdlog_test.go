package main

import (
	"bytes"
	"strings"
	"testing"
)

// Never log a credential: net/http's line for bytes on an idle upstream
// connection quotes them (an echoed key, another client's answer); the
// scrubber keeps the line and drops the bytes, and passes other lines as
// they are.
func TestStdLogScrubberDropsUnsolicitedBytes(t *testing.T) {
	var out bytes.Buffer
	s := stdLogScrubber{next: &out}
	line := "Unsolicited response received on idle HTTP channel starting with \"HTTP/1.1 200 OK\\r\\nX-Echo: Bearer sk-SECRET\"; err=<nil>\n"
	if n, err := s.Write([]byte(line)); err != nil || n != len(line) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(line))
	}
	if got := out.String(); strings.Contains(got, "sk-SECRET") || !strings.HasPrefix(got, "Unsolicited response received on idle HTTP channel (its bytes are not logged)") {
		t.Fatalf("scrubbed line %q", got)
	}
	out.Reset()
	s.Write([]byte("some other line\n"))
	if out.String() != "some other line\n" {
		t.Fatalf("another line became %q", out.String())
	}
}
