package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// TestNoRuleInSim: the simulator never compares an HTTP status; every
// decision about a status belongs to the model (docs/README.md#one-model-two-shells).
func TestNoRuleInSim(t *testing.T) {
	cmp := regexp.MustCompile(`(==|!=|<=|>=|<|>)\s*[2-5][0-9][0-9]\b|\b[2-5][0-9][0-9]\s*(==|!=|<=|>=|<|>)`)
	status := regexp.MustCompile(`(?i)status\s*(==|!=|<=|>=|<|>)\s*[1-9]`)
	eachSourceLine(t, func(at, code, line string) {
		if cmp.MatchString(code) || status.MatchString(code) {
			t.Errorf("%s compares a status; that decision belongs in model/: %s", at, line)
		}
	})
}

// eachSourceLine calls fn with every line of the package's non-test
// files: where it is (file:line), its code without a comment, and the line
// trimmed.
func eachSourceLine(t *testing.T, fn func(at, code, line string)) {
	t.Helper()
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "//")
			fn(fmt.Sprintf("%s:%d", f, i+1), code, strings.TrimSpace(line))
		}
	}
}

// TestRequestLoopIsFlow: sim never picks a connection, waits, spends a
// budget or chooses an answer itself; the request loop is model.Flow, the
// one the proxy drives (so both make the same decisions by construction).
// The engine's per-attempt calls and the loop's helpers are Flow's to make.
func TestRequestLoopIsFlow(t *testing.T) {
	banned := regexp.MustCompile(`\.eng\.(Select|Begin|Record)\(|model\.(WaitDecision|Unavailable)\(|\bSkip\s*[:=]|\.Skip\b`)
	eachSourceLine(t, func(at, code, line string) {
		if banned.MatchString(code) {
			t.Errorf("%s takes a request-loop decision; that is model.Flow's: %s", at, line)
		}
	})
}

func TestEventOrderAtOneInstant(t *testing.T) {
	var h eventHeap
	h.push(event{at: 5, class: classExpect, idx: 1})
	h.push(event{at: 5, class: classFlow, idx: 2})
	h.push(event{at: 5, class: classAction, idx: 3})
	h.push(event{at: 5, class: classFlow, idx: 4})
	h.push(event{at: 4, class: classExpect, idx: 5})
	h.push(event{at: 5, class: classAction, idx: 6})
	var got []int32
	for h.len() > 0 {
		got = append(got, h.pop().idx)
	}
	want := []int32{5, 3, 6, 2, 4, 1}
	if !slicesEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAttemptTimeline(t *testing.T) {
	s := model.DefaultSettings()
	s.UpstreamTimeouts = model.UpstreamTimeouts{ResponseHeaderMs: 10000, FirstContentMs: 5000, StreamIdleMs: 10000, AttemptMs: 60000}
	tm := timersOf(&s)
	tp := s
	tp.StreamRecovery.ThroughputWatchdog = model.ThroughputWatchdog{Enabled: true, WarmupMs: 1000, WindowMs: 1000, MinUsefulBytesPerSecond: 4, MinUsefulBytes: 1}
	tmTP := timersOf(&tp)
	strict := s
	strict.StreamRecovery.MalformedEvents = model.MalformedEventBound{}
	tmStrict := timersOf(&strict)
	ms := time.Millisecond
	type tlCase struct {
		name  string
		r     faults.Response
		lat   int64
		end   int64
		kind  model.OutcomeKind
		tr    model.Transport
		first int64
		tm    *timers
	}
	cases := []tlCase{
		{"ok", faults.Response{Stream: faults.Stream{Chunks: 3, Interval: 100 * ms}}, 50, 250, model.OutcomeResponse, 0, 50, &tm},
		{"error", faults.Response{Status: 503}, 70, 70, model.OutcomeResponse, 0, -1, &tm},
		{"slow error", faults.Response{Status: 503}, 20000, 10000, model.OutcomeTransport, model.TransportHeaderTimeout, -1, &tm},
		{"reset", faults.Response{Fault: faults.Reset}, 30, 30, model.OutcomeTransport, model.TransportReset, -1, &tm},
		{"no response", faults.Response{Fault: faults.Timeout}, 0, 10000, model.OutcomeTransport, model.TransportHeaderTimeout, -1, &tm},
		{"slow first token", faults.Response{}, 6000, 5000, model.OutcomeStall, 0, -1, &tm},
		{"cut", faults.Response{Fault: faults.Cut, Stream: faults.Stream{Chunks: 8, Interval: 100 * ms, StallAfter: 3}}, 0, 200, model.OutcomeTransport, model.TransportEarlyEOF, 0, &tm},
		{"cut before content", faults.Response{Fault: faults.Cut}, 10, 10, model.OutcomeTransport, model.TransportEarlyEOF, -1, &tm},
		// One malformed event is skipped (model.MalformedEvents): the stream completes.
		{"malformed", faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{Interval: 10 * ms, StallAfter: 2}}, 0, 70, model.OutcomeResponse, 0, 0, &tm},
		{"a run of malformed events past the bound (3)", faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{Interval: 10 * ms, StallAfter: 2, Malformed: 4}}, 0, 20, model.OutcomeQuality, 0, 0, &tm},
		{"malformed past the bound", faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{Interval: 10 * ms, StallAfter: 2}}, 0, 20, model.OutcomeQuality, 0, 0, &tmStrict},
		{"malformed after a long silence", faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{Interval: 15 * time.Second, StallAfter: 1}}, 0, 10000, model.OutcomeStall, 0, 0, &tm},
		{"stall forever", faults.Response{Fault: faults.Stall, Stream: faults.Stream{Interval: 10 * ms, StallAfter: 2}}, 0, 10010, model.OutcomeStall, 0, 0, &tm},
		{"short stall resumes", faults.Response{Fault: faults.Stall, Stream: faults.Stream{Chunks: 4, Interval: 10 * ms, StallAfter: 2, StallFor: time.Second}}, 0, 1030, model.OutcomeResponse, 0, 0, &tm},
		{"stall before content", faults.Response{Fault: faults.Stall}, 100, 5000, model.OutcomeStall, 0, -1, &tm},
		{"no done", faults.Response{Fault: faults.NoDone}, 0, 0, model.OutcomeResponse, 0, 0, &tm},
		{"gap longer than idle", faults.Response{Stream: faults.Stream{Chunks: 2, Interval: 11 * time.Second}}, 0, 10000, model.OutcomeStall, 0, 0, &tm},
		{"slow stream", faults.Response{Fault: faults.SlowStream, Stream: faults.Stream{BytesPerSecond: 2}}, 0, 2000, model.OutcomeThroughput, 0, 0, &tmTP},
		{"fast enough stream", faults.Response{Fault: faults.SlowStream, Stream: faults.Stream{Chunks: 4, BytesPerSecond: 64}}, 0, 750, model.OutcomeResponse, 0, 0, &tmTP},
	}
	for _, c := range cases {
		tl := attemptTimeline(&c.r, c.lat, c.tm, true)
		if tl.endMs != c.end || tl.kind != c.kind || tl.transport != c.tr || tl.firstByte != c.first {
			t.Errorf("%s: end %d kind %s transport %s first %d; want %d %s %s %d", c.name, tl.endMs, tl.kind, tl.transport, tl.firstByte, c.end, c.kind, c.tr, c.first)
		}
	}
	// A non-streaming request (the gateway forwards stream:false): the
	// upstream generates the whole answer before its headers, so only
	// responseHeaderMs judges the wait (docs/sim.md), as breakwater upstream
	// serves it.
	json := []tlCase{
		{"ok", faults.Response{Stream: faults.Stream{Chunks: 3, Interval: 100 * ms}}, 50, 250, model.OutcomeResponse, 0, 250, &tm},
		{"generation past the header timeout", faults.Response{Stream: faults.Stream{Chunks: 3, Interval: 6 * time.Second}}, 0, 10000, model.OutcomeTransport, model.TransportHeaderTimeout, -1, &tm},
		{"cut", faults.Response{Fault: faults.Cut, Stream: faults.Stream{Chunks: 8, Interval: 100 * ms, StallAfter: 3}}, 0, 700, model.OutcomeTransport, model.TransportReset, 700, &tm},
		{"malformed", faults.Response{Fault: faults.MalformedChunk, Stream: faults.Stream{Chunks: 4, Interval: 10 * ms, StallAfter: 2}}, 0, 30, model.OutcomeQuality, 0, 30, &tm},
		{"stall forever", faults.Response{Fault: faults.Stall, Stream: faults.Stream{Interval: 10 * ms, StallAfter: 2}}, 0, 10000, model.OutcomeTransport, model.TransportHeaderTimeout, -1, &tm},
		{"short stall", faults.Response{Fault: faults.Stall, Stream: faults.Stream{Chunks: 4, Interval: 10 * ms, StallAfter: 2, StallFor: time.Second}}, 0, 1030, model.OutcomeResponse, 0, 1030, &tm},
		{"an error is not generated", faults.Response{Status: 503, Stream: faults.Stream{Chunks: 3, Interval: time.Second}}, 70, 70, model.OutcomeResponse, 0, -1, &tm},
	}
	for _, c := range json {
		tl := attemptTimeline(&c.r, c.lat, c.tm, false)
		if tl.endMs != c.end || tl.kind != c.kind || tl.transport != c.tr || tl.firstByte != c.first {
			t.Errorf("non-streaming %s: end %d kind %s transport %s first %d; want %d %s %s %d", c.name, tl.endMs, tl.kind, tl.transport, tl.firstByte, c.end, c.kind, c.tr, c.first)
		}
	}
}

// TestSubStreamsIndependent: adding a probabilistic fault rule does not
// perturb the traffic's random arrivals.
func TestSubStreamsIndependent(t *testing.T) {
	arrivals := func(sc *Scenario) string {
		var buf bytes.Buffer
		if _, err := Run(sc, Options{Trace: &buf}); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range strings.Split(buf.String(), "\n") {
			if strings.Contains(l, `"ev":"arrive"`) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	a := faultyDay(t, 0)
	a.Traffic = []Traffic{{Model: "c", Count: 300, Every: 50 * time.Millisecond, Poisson: true}}
	a.Rules = nil
	b := *a
	b.Rules = []faults.Rule{{Respond: &faults.Response{Status: 503}, Probability: 0.5, Until: time.Second}}
	if arrivals(a) != arrivals(&b) {
		t.Error("a fault rule changed the traffic's arrival times")
	}
	c := *a
	c.Seed = 2
	if arrivals(a) == arrivals(&c) {
		t.Error("another seed gave the same Poisson arrivals")
	}
}

// TestDeterminism: the same scenario twice, and under GOMAXPROCS=1, gives
// the same trace hash; the hash does not depend on writing JSON.
func TestDeterminism(t *testing.T) {
	sc := faultyDay(t, 0)
	sc.Traffic = []Traffic{{Model: "c", Count: 20000, Every: 20 * time.Millisecond, Poisson: true}}
	r1, err := Run(sc, Options{Trace: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	r2, err := Run(sc, Options{})
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	if r1.TraceSHA256 != r2.TraceSHA256 || r1.TraceLines != r2.TraceLines {
		t.Errorf("hash %s (%d) vs %s (%d)", r1.TraceSHA256, r1.TraceLines, r2.TraceSHA256, r2.TraceLines)
	}
	if len(r1.Violations) > 0 {
		t.Errorf("violations: %v", r1.Violations)
	}
	sc2 := *sc
	sc2.Seed = 99
	r3, _ := Run(&sc2, Options{})
	if r3.TraceSHA256 == r1.TraceSHA256 {
		t.Error("another seed gave the same trace")
	}
}

// TestTraceHashIsTheFileHash (docs/scenarios.md): the printed trace SHA-256 is
// the SHA-256 of the trace lines a -trace file holds, so a user can check a
// written trace with sha256sum.
func TestTraceHashIsTheFileHash(t *testing.T) {
	sc := faultyDay(t, 0)
	sc.Traffic = []Traffic{{Model: "c", Count: 3000, Every: 20 * time.Millisecond, Poisson: true}}
	var file bytes.Buffer
	res, err := Run(sc, Options{Trace: &file})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(file.Bytes())
	if got := hex.EncodeToString(sum[:]); got != res.TraceSHA256 {
		t.Errorf("trace sha256 %s, but the written trace hashes to %s", res.TraceSHA256, got)
	}
	if lines := bytes.Count(file.Bytes(), []byte("\n")); uint64(lines) != res.TraceLines || lines < 3000 {
		t.Errorf("%d lines written, %d records counted", lines, res.TraceLines)
	}
}

// TestInvariantsCatchViolations: the checks do fire (the engine never gives
// them a reason to in a real run, so feed them a lie).
func TestInvariantsCatchViolations(t *testing.T) {
	sc := simpleScenario(t, 1)
	s, err := newSim(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pre := s.mirror.preBegin("p", "k1")
	pre.conn.status = model.StatusBanned
	pre.prov.state = model.Open
	s.checkBegin(&pre, &model.Attempt{})
	if len(s.res.Violations) != 2 {
		t.Fatalf("violations %v", s.res.Violations)
	}
	s.mirror.conns[0].status = model.StatusBanned
	s.mirror.conn(&model.Change{Provider: "p", Connection: "k1", Conn: model.Conn{Status: model.StatusActive}})
	s.flushPending()
	if len(s.res.Violations) != 3 || !strings.Contains(s.res.Violations[2].Invariant, "terminal") {
		t.Fatalf("violations %v", s.res.Violations)
	}
}

// TestDeadlineCutsAttempt: no attempt runs past the flow's deadline
// (requestBudget.deadlineMs); the cut attempt is recorded neutrally (a
// client abort: the breaker does not count it) and the request ends at the
// deadline. The answer's status is model.Flow's.
func TestDeadlineCutsAttempt(t *testing.T) {
	sc := simpleScenario(t, 1)
	sc.Settings.RequestBudget.DeadlineMs = 5000
	sc.Rules = []faults.Rule{
		{Match: faults.Match{Connection: "k1"}, Respond: &faults.Response{Status: 503, Latency: 3 * time.Second}},
		{Match: faults.Match{Connection: "k2"}, Respond: &faults.Response{Latency: 4 * time.Second}},
	}
	var buf bytes.Buffer
	res, err := Run(sc, Options{Trace: &buf})
	if err != nil {
		t.Fatal(err)
	}
	tr := buf.String()
	for _, want := range []string{
		`{"att":2,"conn":"p/k2","ev":"record","next":"stop","outcome":"client_abort","reason":"client_abort","req":1,"t":5000}`,
		`"ev":"done","req":1,`,
	} {
		if !strings.Contains(tr, want) {
			t.Errorf("trace lacks %s:\n%s", want, tr)
		}
	}
	if !strings.Contains(tr, `"t":5000}`+"\n") || strings.Contains(tr, `"fails":2`) || len(res.Violations) > 0 {
		t.Errorf("the request should end at the deadline with one counted failure:\n%s%v", tr, res.Violations)
	}
}

func TestLivenessAfterFaults(t *testing.T) {
	sc := simpleScenario(t, 40)
	sc.Rules = []faults.Rule{{Until: 20 * time.Millisecond, Respond: &faults.Response{Status: 503}}}
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || len(res.Violations) > 0 {
		t.Fatalf("%+v", res)
	}
	if res.Statuses[200] == 0 || res.Upstream <= res.Requests {
		t.Errorf("statuses %v, %d calls for %d requests", res.Statuses, res.Upstream, res.Requests)
	}
}

func TestTimelinePlot(t *testing.T) {
	sc := faultyDay(t, 0)
	sc.Traffic = []Traffic{{Model: "c", Count: 5000, Every: 20 * time.Millisecond}}
	sc.Rules = append(sc.Rules, faults.Rule{Match: faults.Match{Provider: "b"}, Respond: &faults.Response{Status: 429}, Until: 30 * time.Second})
	tl := NewTimeline()
	res, err := Run(sc, Options{Timeline: tl})
	if err != nil {
		t.Fatal(err)
	}
	var svg, page bytes.Buffer
	if err := tl.WriteSVG(&svg, res); err != nil {
		t.Fatal(err)
	}
	if err := tl.WriteHTML(&page, res); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{">a<", ">b<", "a/k1", "b/o1", "cooldown", "OPEN", "request results per", "#1e88e5"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if !strings.Contains(page.String(), "<svg") || !strings.Contains(page.String(), res.TraceSHA256) {
		t.Error("HTML lacks the plot or the summary")
	}
}

// TestFaultyDay is the target: 24 simulated hours of 50 req/s with
// faults (≈ 4.3 M requests) in ≤ 10 s. It is long (seconds, and much more
// under -race), so it runs with BREAKWATER_SIM_LONG=1 (make sim-long).
func TestFaultyDay(t *testing.T) {
	if os.Getenv("BREAKWATER_SIM_LONG") == "" {
		t.Skip("set BREAKWATER_SIM_LONG=1 (make sim-long)")
	}
	sc := faultyDay(t, 24)
	start := time.Now()
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests, %d upstream calls, simulated %v in %v (%.0f req/s, compression %.0f×), statuses %v, violations %d",
		res.Requests, res.Upstream, res.Simulated, time.Since(start), float64(res.Requests)/time.Since(start).Seconds(),
		res.Compression, res.Statuses, len(res.Violations))
	if len(res.Violations) > 0 {
		t.Errorf("violations: %v", res.Violations)
	}
}

// TestLivenessLateExpectIsNoTimer pins the "recovery is bounded" invariant
// (docs/sim.md, Invariants): it measures the timers still running after the
// faults end, not the run's length — a scenario that reads state a day and
// more after a short outage, with nothing cooling, has recovered.
func TestLivenessLateExpectIsNoTimer(t *testing.T) {
	sc := simpleScenario(t, 1)
	sc.Rules = []faults.Rule{{Until: 20 * time.Millisecond, Respond: &faults.Response{Status: 503}}}
	sc.Expects = []Expect{{Kind: ExpectState, Line: 1, At: 100 * time.Hour, Breaker: map[string]model.BreakerState{"p": model.Closed}}}
	res, err := Run(sc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Passed || len(res.Violations) > 0 {
		t.Fatalf("failures %v, violations %v", res.Failures, res.Violations)
	}
}
