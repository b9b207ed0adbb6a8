package incident

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
	"github.com/breakwater-gw/breakwater/store"
)

// simAttempt is one upstream attempt read back from a simulator trace.
type simAttempt struct {
	seq        int64
	conn       string // provider/connection
	model      string
	req        int64
	begin, end int64 // ms offsets
	outcome    string
}

// traceAttempts runs sc and returns its upstream attempts in begin order,
// read from the canonical trace (the "begin" and "record" events).
func traceAttempts(t *testing.T, sc *sim.Scenario) (*sim.Result, []simAttempt) {
	t.Helper()
	var buf bytes.Buffer
	res, err := sim.Run(sc, sim.Options{Trace: &buf})
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	byAtt := map[int64]*simAttempt{}
	var order []int64
	// The trace's req is a pooled slot, reused once a request finished:
	// number the arrivals to tell requests apart.
	uniq := map[int64]int64{}
	arrivals := int64(0)
	sc2 := bufio.NewScanner(&buf)
	sc2.Buffer(make([]byte, 1<<20), 1<<20)
	for sc2.Scan() {
		var ev struct {
			Ev      string `json:"ev"`
			Att     int64  `json:"att"`
			Conn    string `json:"conn"`
			Model   string `json:"model"`
			Req     int64  `json:"req"`
			T       int64  `json:"t"`
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal(sc2.Bytes(), &ev); err != nil {
			t.Fatalf("trace line %q: %v", sc2.Text(), err)
		}
		switch ev.Ev {
		case "arrive":
			arrivals++
			uniq[ev.Req] = arrivals
		case "begin":
			byAtt[ev.Att] = &simAttempt{seq: ev.Att, conn: ev.Conn, model: ev.Model, req: uniq[ev.Req], begin: ev.T, end: -1}
			order = append(order, ev.Att)
		case "record":
			a := byAtt[ev.Att]
			if a == nil {
				t.Fatalf("record of attempt %d without a begin", ev.Att)
			}
			a.end, a.outcome = ev.T, ev.Outcome
		}
	}
	out := make([]simAttempt, 0, len(order))
	for _, k := range order {
		out = append(out, *byAtt[k])
	}
	return res, out
}

// recordsOf turns simulated attempts into request log records, the way the
// gateway logs them (proxy/replica.go logAttempt): status for a response,
// the transport / watchdog kind otherwise.
func recordsOf(start time.Time, atts []simAttempt) []store.LogRecord {
	var recs []store.LogRecord
	for _, a := range atts {
		p, c, _ := strings.Cut(a.conn, "/")
		r := store.LogRecord{Time: start.Add(time.Duration(a.begin) * time.Millisecond), RequestID: "req-" + strconv.FormatInt(a.req, 10),
			Provider: p, Connection: c, Model: a.model, LatencyMs: a.end - a.begin}
		if st, err := strconv.Atoi(a.outcome); err == nil {
			r.Status = st
			if st >= 400 {
				r.ErrorType = "response"
			}
		} else {
			r.ErrorType = a.outcome
		}
		recs = append(recs, r)
	}
	return recs
}

// replayedAs is the outcome label the simulator must report for a record
// replayed from an export (timeouts of every kind replay as the header
// timeout; refused replays as reset).
func replayedAs(r store.LogRecord) string {
	switch r.ErrorType {
	case "", "response":
		return strconv.Itoa(r.Status)
	case "connect_timeout", "header_timeout", "attempt_timeout":
		return "header_timeout"
	case "refused":
		return "reset"
	}
	return r.ErrorType
}

// perConnection lists what each connection answered, in order.
func perConnection[T any](xs []T, conn func(T) string, label func(T) string) map[string][]string {
	out := map[string][]string{}
	for _, x := range xs {
		out[conn(x)] = append(out[conn(x)], label(x))
	}
	return out
}

func diffPerConnection(t *testing.T, want, got map[string][]string) {
	t.Helper()
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for k := range want {
			seen[k] = true
		}
		for k := range got {
			seen[k] = true
		}
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	}) {
		if !slices.Equal(want[c], got[c]) {
			t.Errorf("%s answered differently in the replay:\n  log:    %v\n  replay: %v", c, want[c], got[c])
		}
	}
}

const sourceIncident = `
name: source incident for the export round trip
start: 2026-03-01T10:00:00Z
providers:
  - {id: glm, type: glm, profile: apikey, models: [glm-5], connections: [{id: k1}, {id: k2}]}
  - {id: openai, profile: apikey, models: [gpt-5], connections: [{id: o1}, {id: o2}]}
combos:
  - {id: coding, strategy: priority, targets: [glm/glm-5, openai/gpt-5]}
upstream:
  - match: {provider: glm, connection: k1}
    until: 20s
    respond: {status: 503, latency: 50ms}
  - match: {provider: glm, connection: k2}
    from: 5s
    until: 15s
    sequence: [{status: 429}, {status: 200, latency: 300ms}, {fault: reset, latency: 5ms}, {status: 500, latency: 20ms}]
  - match: {provider: openai, connection: o1}
    from: 8s
    until: 12s
    respond: {fault: timeout}
traffic:
  - {at: 0s, model: coding, count: 40, every: 500ms}
  - {at: 3s, model: glm/glm-5, count: 10, every: 1s}
  - {at: 9s, model: openai/gpt-5, count: 3, every: 700ms, timeout: 2s}
`

var sourceTopology = &Topology{
	File: "source.yaml",
	Providers: []Provider{
		{ID: "glm", Type: "glm", Profile: "apikey", Models: []string{"glm-5"}, Connections: []Connection{{ID: "k1"}, {ID: "k2"}}},
		{ID: "openai", Profile: "apikey", Models: []string{"gpt-5"}, Connections: []Connection{{ID: "o1"}, {ID: "o2"}}},
	},
	Combos: []Combo{{ID: "coding", Strategy: "priority", Targets: []Target{{Target: "glm/glm-5"}, {Target: "openai/gpt-5"}}}},
}

// TestExportReplaysEachConnectionsAnswers pins the export's promise (issue
// 5, docs/store.md#request-log → docs/scenarios.md): an incident recorded in the request log,
// exported and replayed in the simulator, makes every connection answer
// exactly what it answered in the log, in the same order, and the recorded
// facts written as expects hold on the replay.
func TestExportReplaysEachConnectionsAnswers(t *testing.T) {
	src, err := scenarios.Load("source.yaml", []byte(sourceIncident), scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, atts := traceAttempts(t, src)
	recs := recordsOf(src.Start, atts)
	if len(recs) < 50 {
		t.Fatalf("the source incident made only %d attempts", len(recs))
	}
	from := src.Start
	out, sum, err := Export(recs, Options{From: from, To: from.Add(10 * time.Minute), Config: sourceTopology, Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != len(recs) {
		t.Errorf("exported %d records of %d", sum.Records, len(recs))
	}
	replay, err := Check("replay.yaml", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	res, got := traceAttempts(t, replay)
	want := perConnection(recs, func(r store.LogRecord) string { return r.Provider + "/" + r.Connection }, replayedAs)
	diffPerConnection(t, want, perConnection(got, func(a simAttempt) string { return a.conn }, func(a simAttempt) string { return a.outcome }))
	if !res.Passed {
		for _, f := range res.Failures {
			t.Errorf("recorded fact did not hold on the replay: %s", f)
		}
		for _, v := range res.Violations {
			t.Errorf("violation: %s", v)
		}
	}
	if res.Expects == 0 {
		t.Error("the export wrote no expects")
	}
	if t.Failed() {
		t.Logf("exported scenario:\n%s", out)
	}
}

func TestReplayedAsCoversEveryLoggedKind(t *testing.T) {
	// A guard for the test helper itself: every outcome kind the gateway
	// logs has a replay label.
	for _, k := range []string{"reset", "refused", "connect_timeout", "header_timeout", "attempt_timeout", "early_eof", "stall", "throughput", "client_abort", "quality"} {
		if replayedAs(store.LogRecord{ErrorType: k}) == "" {
			t.Errorf("%s has no replay label", k)
		}
	}
	if got := fmt.Sprint(replayedAs(store.LogRecord{Status: 503, ErrorType: "response"})); got != "503" {
		t.Errorf("503 replays as %s", got)
	}
}
