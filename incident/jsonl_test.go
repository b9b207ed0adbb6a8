package incident

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// TestReadJSONL: the JSONL source (GET /api/request-log?format=jsonl)
// round-trips through WriteJSONL, keeps only the window, skips blank
// lines, and names the line of a malformed record.
func TestReadJSONL(t *testing.T) {
	recs := []store.LogRecord{
		{Time: at(-time.Second), Provider: "p", Connection: "k", Model: "m", Status: 200},
		{Time: at(time.Second), RequestID: "r", Provider: "p", Connection: "k", Model: "m", Status: 429, LatencyMs: 12, ErrorType: "response",
			Headers: map[string]string{"retry-after": "3"}, ErrorBody: "slow down"},
		{Time: at(2 * time.Second), Provider: "p", Connection: "k", Model: "m", ErrorType: "reset"},
		{Time: at(time.Hour), Provider: "p", Connection: "k", Model: "m", Status: 200},
	}
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, recs); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("\n   \n")
	got, err := ReadJSONL(&buf, "log.jsonl", t0, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].RequestID != "r" || got[0].Headers["retry-after"] != "3" || got[0].ErrorBody != "slow down" || got[1].ErrorType != "reset" {
		t.Errorf("got %+v", got)
	}

	bad := []struct{ in, want string }{
		{`{"time":"2026-03-01T10:00:01Z","provider":"p","connection":"k","model":"m","status":200}` + "\n{not json}\n", "log.jsonl:2: invalid request log record"},
		{"\n\n[1,2]\n", "log.jsonl:3: want a JSON object"},
		{`{"provider":"p","connection":"k"}`, `log.jsonl:1: a record needs "time"`},
		{`{"time":"2026-03-01T10:00:01Z","provider":"p"}`, `log.jsonl:1: a record needs "provider" and "connection"`},
		{`{"time":"2026-03-01T10:00:01Z","provider":"p","connection":"k","status":1000}`, `log.jsonl:1: "status" must be`},
		{`{"time":"2026-03-01T10:00:01Z","provider":"p","connection":"k","latencyMs":-1}`, `must not be negative`},
		{`{"time":"yesterday","provider":"p","connection":"k"}`, `log.jsonl:1: invalid request log record`},
		{"{" + strings.Repeat(" ", MaxLineBytes+10) + "}\n", "log.jsonl:1: line longer than"},
	}
	for _, c := range bad {
		_, err := ReadJSONL(strings.NewReader(c.in), "log.jsonl", t0, at(time.Hour))
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadJSONL(%.60q) = %v, want an InputError containing %q", c.in, err, c.want)
		}
	}
}

// FuzzReadJSONL: the JSONL reader takes files from anywhere (an operator's
// disk, a ticket attachment). Whatever the bytes, it returns records or an
// error, never panics; and any records it accepts export to a scenario the
// loader accepts (the export never writes a file `breakwater sim` rejects).
func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(`{"time":"2026-03-01T10:00:01Z","requestId":"r1","provider":"glm","connection":"k1","model":"glm-5","status":503,"latencyMs":40,"errorType":"response","headers":{"retry-after":"20"},"errorBody":"{\"error\":{\"message\":\"overloaded\"}}"}` + "\n" +
		`{"time":"2026-03-01T10:00:01.5Z","requestId":"r1","provider":"glm","connection":"k2","model":"glm-5","status":200,"latencyMs":900,"firstByteMs":120}` + "\n"))
	f.Add([]byte(`{"time":"2026-03-01T10:00:02Z","provider":"o","connection":"c","model":"x/y","errorType":"client_abort","latencyMs":5000}`))
	f.Add([]byte(`{"time":"2026-03-01T10:00:03Z","provider":"o","connection":"c","model":"m","errorType":"stall","firstByteMs":9}` + "\n\n" + `{"time":"2026-03-01T10:00:03Z","provider":"o","connection":"c","model":"m","errorType":"header_timeout"}`))
	f.Add([]byte("{\"time\":\"2026-03-01T10:00:04Z\",\"provider\":\"o\",\"connection\":\"c\",\"model\":\"m\",\"status\":429,\"headers\":{\"Retry-After\":\"\\u0000\\u007f\\u0085: - [x]\"},\"errorBody\":\"\\ud800 #: |\\n\\t'\\\"\"}"))
	f.Add([]byte("not json\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ReadJSONL(bytes.NewReader(data), "fuzz.jsonl", t0, at(time.Hour))
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("a bad file must be an InputError, got %T: %v", err, err)
			}
			return
		}
		out, _, err := Export(recs, Options{From: t0, To: at(time.Hour)})
		if err != nil {
			if !errors.Is(err, ErrEmptyWindow) {
				t.Fatalf("export: %v", err)
			}
			return
		}
		if _, err := Check("fuzz.yaml", out); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
}
