package proxy

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// pieces returns the bytes in the sizes given, cycling through them.
type pieces struct {
	b     []byte
	sizes []int
	i     int
}

func (p *pieces) Read(q []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := min(p.sizes[p.i%len(p.sizes)], len(q), len(p.b))
	p.i++
	copy(q, p.b[:n])
	p.b = p.b[n:]
	return n, nil
}

func readEvents(r io.Reader) (raws, datas []string, err error) {
	s := newSSEReader(r)
	defer s.release()
	var raw, buf, data []byte
	for {
		raw, buf, data, err = s.next(raw, buf)
		if err != nil {
			return raws, datas, err
		}
		raws = append(raws, string(raw))
		datas = append(datas, string(data))
	}
}

// TestSSEReaderIndependentOfHowBytesArrive: the SSE reader gives the same
// events whether the upstream's bytes come all at once or in any pieces,
// including lines longer than its 4 KiB buffer and waits with the buffer
// returned to the pool between reads (docs/streams.md: the watchdogs and the client
// see every event whole, however the upstream's writes were split).
func TestSSEReaderIndependentOfHowBytesArrive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var sb strings.Builder
		nEv := rapid.IntRange(0, 12).Draw(t, "events")
		for range nEv {
			for range rapid.IntRange(1, 4).Draw(t, "lines") {
				switch rapid.IntRange(0, 4).Draw(t, "kind") {
				case 0:
					sb.WriteString(": keep-alive")
				case 1:
					sb.WriteString("event: message")
				case 2:
					sb.WriteString("data: " + strings.Repeat("x", rapid.IntRange(0, 9000).Draw(t, "long")))
				default:
					sb.WriteString("data: " + rapid.StringMatching(`[a-z {}":,]{0,40}`).Draw(t, "data"))
				}
				if rapid.Bool().Draw(t, "crlf") {
					sb.WriteString("\r")
				}
				sb.WriteString("\n")
			}
			sb.WriteString("\n")
		}
		sb.WriteString(rapid.StringMatching(`(data: tail)?`).Draw(t, "partial"))
		all := []byte(sb.String())
		sizes := rapid.SliceOfN(rapid.IntRange(1, 5000), 1, 8).Draw(t, "sizes")

		wantRaw, wantData, werr := readEvents(bytes.NewReader(all))
		gotRaw, gotData, gerr := readEvents(&pieces{b: all, sizes: sizes})
		if werr != io.EOF || gerr != io.EOF {
			t.Fatalf("end of body: whole %v, pieces %v", werr, gerr)
		}
		if len(gotRaw) != nEv || len(wantRaw) != nEv {
			t.Fatalf("events: %d wrote, %d whole, %d in pieces", nEv, len(wantRaw), len(gotRaw))
		}
		for i := range wantRaw {
			if gotRaw[i] != wantRaw[i] || gotData[i] != wantData[i] {
				t.Fatalf("event %d differs in pieces %v:\nwhole  %q\npieces %q", i, sizes, wantRaw[i], gotRaw[i])
			}
		}
	})
}

// TestSSEReaderDataIsTheEventsDataLines: an event's data is its data
// lines' values joined by newlines (docs/streams.md: the model reads the
// data an upstream sent), whether next returns it as a slice of the raw
// bytes (one data line) or assembles it; and appending to it never writes
// into the raw bytes, which still go to the client.
func TestSSEReaderDataIsTheEventsDataLines(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var sb strings.Builder
		for range rapid.IntRange(1, 6).Draw(t, "events") {
			for range rapid.IntRange(1, 4).Draw(t, "lines") {
				switch rapid.IntRange(0, 3).Draw(t, "kind") {
				case 0:
					sb.WriteString(": keep-alive")
				case 1:
					sb.WriteString("data:" + strings.Repeat("y", rapid.IntRange(0, 5000).Draw(t, "long")))
				default:
					sb.WriteString("data: " + rapid.StringMatching(`[a-z {}":, ]{0,40}`).Draw(t, "data"))
				}
				if rapid.Bool().Draw(t, "crlf") {
					sb.WriteString("\r")
				}
				sb.WriteString("\n")
			}
			sb.WriteString("\n")
		}
		s := newSSEReader(strings.NewReader(sb.String()))
		defer s.release()
		var raw, buf, data []byte
		for {
			var err error
			raw, buf, data, err = s.next(raw, buf)
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, l := range strings.Split(string(raw), "\n") {
				if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), "data:"); ok {
					want = append(want, strings.TrimPrefix(v, " "))
				}
			}
			if string(data) != strings.Join(want, "\n") {
				t.Fatalf("data %q, want %q (raw %q)", data, strings.Join(want, "\n"), raw)
			}
			before := string(raw)
			_ = append(data, "overwritten"...)
			if string(raw) != before {
				t.Fatalf("appending to data changed the raw bytes: %q", raw)
			}
		}
	})
}
