package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/incident"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
	"github.com/breakwater-gw/breakwater/store"
)

func exportCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runIncidentExport(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestIncidentExportCommandInput pins the command's contract for bad input
// (docs/incident.md#flags): bad flags, bad times, from after to, a malformed JSONL line
// (with its line number) exit 2 with a message saying what is wrong; an
// empty window exits 1 saying there is nothing to export; a database URL is
// never echoed.
func TestIncidentExportCommandInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	os.WriteFile(good, []byte(`{"time":"2026-03-01T10:00:01Z","requestId":"a","provider":"p","connection":"k","model":"m","status":200}`+"\n"), 0o644)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"time":"2026-03-01T10:00:01Z","provider":"p","connection":"k","model":"m","status":200}`+"\n\n"+`{"time": oops}`+"\n"), 0o644)
	badCfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badCfg, []byte("providers:\n  - id: p\n    typo: 1\n"), 0o644)
	win := []string{"-from", "2026-03-01T10:00:00Z", "-to", "2026-03-01T11:00:00Z"}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "-from: is required"},
		{[]string{"-log", good}, 2, "-from: is required"},
		{append([]string{"-log", good, "-database", "postgres://x"}, win...), 2, "exactly one source"},
		{append([]string{}, win...), 2, "exactly one source"},
		{[]string{"-log", good, "-from", "yesterday"}, 2, "want an RFC 3339 instant"},
		{[]string{"-log", good, "-from", "2026-03-01T11:00:00Z", "-to", "2026-03-01T10:00:00Z"}, 2, "must be after -from"},
		{append([]string{"-log", good, "-window", "-1m"}, win...), 2, "-window must be positive"},
		{append([]string{"-log", good, "-bogus"}, win...), 2, "flag provided but not defined"},
		{append([]string{"-log", good, "extra"}, win...), 2, "unexpected argument"},
		{append([]string{"-log", bad}, win...), 2, "bad.jsonl:3: invalid request log record"},
		{append([]string{"-log", filepath.Join(dir, "missing.jsonl")}, win...), 2, "no such file"},
		{append([]string{"-log", good, "-config", badCfg}, win...), 2, "typo"},
		{append([]string{"-database", "mysql://u:hunter2@h/db"}, win...), 2, "wants a postgres:// URL"},
		{[]string{"-log", good, "-from", "2026-03-02T10:00:00Z", "-to", "2026-03-02T11:00:00Z"}, 1, "no request log record"},
		{append([]string{"-database", "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"}, win...), 1, "127.0.0.1:1/db"},
	}
	for _, c := range cases {
		code, _, stderr := exportCmd(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("incident export %v: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
		if strings.Contains(stderr, "hunter2") {
			t.Errorf("incident export %v leaks the database password: %s", c.args, stderr)
		}
	}
	if code := runIncident(nil); code != 2 {
		t.Errorf("incident with no subcommand: exit %d, want 2", code)
	}
	if code := runIncident([]string{"exprot"}); code != 2 {
		t.Errorf("incident exprot: exit %d, want 2", code)
	}

	out := filepath.Join(dir, "out.yaml")
	code, _, stderr := exportCmd(t, append([]string{"-log", good, "-o", out}, win...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, err := scenarios.LoadFile(out, scenarios.Options{}); err != nil {
		t.Errorf("the written scenario does not load: %v", err)
	}
	if !strings.Contains(stderr, "exported 1 attempt(s) of 1 request(s)") {
		t.Errorf("summary: %s", stderr)
	}
	// Relative times read the (pinned) clock.
	defer func(f func() time.Time) { incidentNow = f }(incidentNow)
	incidentNow = func() time.Time { return time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC) }
	if code, stdout, stderr := exportCmd(t, "-log", good, "-from", "-1h"); code != 0 || !strings.Contains(stdout, "start: \"2026-03-01T09:30:00Z\"") {
		t.Errorf("relative -from: exit %d, %s\n%s", code, stderr, stdout)
	}
}

const gatewayIncidentConfig = `
server: {listen: 127.0.0.1:0}
providers:
  - id: glm
    type: glm
    profile: apikey
    baseURL: {{UP}}/glm/v1
    models: [glm-5]
    connections:
      - {id: k1, apiKey: k1}
      - {id: k2, apiKey: k2}
  - id: openai
    profile: apikey
    baseURL: {{UP}}/openai/v1
    models: [gpt-5]
    connections:
      - {id: o1, apiKey: o1}
combos:
  - {id: coding, strategy: priority, targets: [glm/glm-5, openai/gpt-5]}
resilience:
  waitForCooldown: {enabled: false}
`

// TestIncidentExportFromGateway is the end-to-end round trip of
// docs/incident.md (an incident in production becomes a scenario): a real
// gateway (memory store) in front of fault upstreams records an
// incident in its request log; GET /api/request-log?format=jsonl fetches
// it; `incident export -log -config` turns it into a scenario; the
// simulator replays it and every connection answers the statuses it
// answered through the gateway, in the same order.
func TestIncidentExportFromGateway(t *testing.T) {
	up := httptest.NewServer(faults.NewServer([]faults.Rule{
		{Match: faults.Match{Provider: "glm", Connection: "k1"}, Respond: &faults.Response{Status: 503}},
		{Match: faults.Match{Provider: "glm", Connection: "k2"}, Sequence: []faults.Response{{Status: 200}, {Status: 200},
			{Status: 429, Headers: map[string]string{"Retry-After": "1"}}, {Status: 200}}},
		{Match: faults.Match{Provider: "openai", Connection: "o1"}, Sequence: []faults.Response{{Status: 200}, {Status: 500}, {Status: 200}}},
	}, faults.Options{}))
	defer up.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	os.WriteFile(cfgPath, []byte(strings.ReplaceAll(gatewayIncidentConfig, "{{UP}}", up.URL)), 0o644)
	cfg, _, err := proxy.LoadConfig(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	mem := store.NewMemory(store.MemoryOptions{})
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Store: mem, Seed: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	defer func() { srv.Close(); g.Close(context.Background()) }()

	from := time.Now().UTC().Add(-time.Second)
	var clientStatuses []int
	for i, m := range []string{"coding", "coding", "glm/glm-5", "coding", "openai/gpt-5", "coding", "openai/gpt-5"} {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi %d"}]}`, m, i)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		clientStatuses = append(clientStatuses, resp.StatusCode)
		time.Sleep(20 * time.Millisecond)
	}
	to := time.Now().UTC().Add(time.Second)

	// The operator's path: fetch JSONL from the running gateway.
	resp, logBytes := requestLogJSONL(t, srv.URL, from, to)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET /api/request-log: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), logBytes)
	}
	logPath := filepath.Join(dir, "incident.jsonl")
	os.WriteFile(logPath, logBytes, 0o644)
	recs, err := incident.ReadJSONL(bytes.NewReader(logBytes), "incident.jsonl", from, to)
	if err != nil || len(recs) < 6 {
		t.Fatalf("read %d records (%v) from the gateway's log:\n%s", len(recs), err, logBytes)
	}

	out := filepath.Join(dir, "incident.yaml")
	code, _, stderr := exportCmd(t, "-log", logPath, "-config", cfgPath, "-o", out,
		"-from", from.Format(time.RFC3339Nano), "-to", to.Format(time.RFC3339Nano))
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	src, _ := os.ReadFile(out)
	if bytes.Contains(src, []byte(up.URL)) || bytes.Contains(src, []byte("apiKey")) {
		t.Errorf("the scenario carries a base URL or a key:\n%s", src)
	}
	sc, err := scenarios.LoadFile(out, scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var trace bytes.Buffer
	res, err := sim.Run(sc, sim.Options{Trace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	want, got := loggedAnswers(recs), replayedAnswers(&trace)
	for _, c := range []string{"glm/k1", "glm/k2", "openai/o1"} {
		if !slices.Equal(want[c], got[c]) {
			t.Errorf("%s: the gateway's upstream answered %v, the replay %v", c, want[c], got[c])
		}
	}
	if !res.Passed {
		t.Errorf("the recorded facts do not hold on the replay: %v", res.Failures)
	}
	if t.Failed() {
		t.Logf("client statuses %v\nlog:\n%s\nscenario:\n%s", clientStatuses, logBytes, src)
	}
}

// TestRequestLogAPI pins GET /api/request-log: bad query parameters are
// 400s naming the problem; a store without a request log is a typed 501;
// JSON and JSONL answer oldest first.
func TestRequestLogAPI(t *testing.T) {
	cfgY := strings.ReplaceAll(gatewayIncidentConfig, "{{UP}}", "http://127.0.0.1:1")
	cfg, _, err := proxy.ParseConfig("gw.yaml", []byte(cfgY), nil)
	if err != nil {
		t.Fatal(err)
	}
	mem := store.NewMemory(store.MemoryOptions{})
	base := time.Now().UTC().Add(-time.Minute)
	for i := range 3 {
		mem.LogAttempt(store.LogRecord{Time: base.Add(time.Duration(i) * time.Second), Provider: "glm", Connection: "k1", Model: "glm-5", Status: 200 + i})
	}
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Store: mem, Seed: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	defer func() { srv.Close(); g.Close(context.Background()) }()
	get := func(q string) (int, string, http.Header) {
		resp, err := http.Get(srv.URL + "/api/request-log" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), resp.Header
	}
	for _, c := range []struct{ q, want string }{
		{"?since=yesterday", "since: want an RFC 3339"},
		{"?until=-1x", "until: want a relative time"},
		{"?since=-1m&until=-2m", "must be after since"},
		{"?limit=0", "limit: want 1..100000"},
		{"?format=csv", "format: want json or jsonl"},
		{"?sinse=-1h", `unknown query parameter`},
	} {
		if code, body, _ := get(c.q); code != 400 || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %s, want 400 with %q", c.q, code, body, c.want)
		}
	}
	code, body, _ := get("?since=-1h")
	var js struct {
		Records   []store.LogRecord `json:"records"`
		Truncated bool              `json:"truncated"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &js) != nil || len(js.Records) != 3 || js.Records[0].Status != 200 || js.Truncated {
		t.Errorf("JSON: %d %s", code, body)
	}
	code, body, h := get("?since=-1h&format=jsonl&limit=2")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if code != 200 || len(lines) != 2 || h.Get("X-Breakwater-Truncated") != "true" || !strings.Contains(lines[0], `"status":201`) {
		t.Errorf("JSONL limit 2: %d %v %s", code, h, body)
	}

	// A state store that keeps no request log: a typed 501. stateOnly has
	// nothing but the StateStore methods (no request log, no arbiter).
	type stateOnly struct{ proxy.StateStore }
	g2, err := proxy.New(context.Background(), cfg, proxy.Options{Seed: 1, Logger: slog.New(slog.DiscardHandler),
		Store: stateOnly{store.NewMemory(store.MemoryOptions{})}})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(g2.Handler())
	defer func() { srv2.Close(); g2.Close(context.Background()) }()
	resp, err := http.Get(srv2.URL + "/api/request-log")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "request_log_unavailable") {
		t.Errorf("a state store without a request log: %d %s", resp.StatusCode, b)
	}
}

// TestIncidentExportReplaysOperatorActions drives a session on a real
// gateway with operator actions between the requests (cooldowns cleared,
// a settings patch, a connection reset, a rate-limit toggle), exports the request log and
// replays it in the simulator: the actions are in the scenario at their
// instants, every connection answers as it did through the gateway, and
// the scenario passes its own recorded expects. Without the actions the
// replay would keep k1 cooling and make fewer upstream calls than the
// record.
func TestIncidentExportReplaysOperatorActions(t *testing.T) {
	up := httptest.NewServer(faults.NewServer([]faults.Rule{
		{Match: faults.Match{Provider: "glm", Connection: "k1"}, Respond: &faults.Response{Status: 503}},
	}, faults.Options{}))
	defer up.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	// A minute's cooldown: k1 is tried again only because of the
	// operator's actions, however slowly the session runs.
	cfgText := strings.ReplaceAll(gatewayIncidentConfig, "{{UP}}", up.URL) + "  connectionCooldown: {apikey: {baseCooldownMs: 60000}}\n"
	srv := incidentGateway(t, cfgPath, cfgText)
	call := func(method, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	chat := func(i int) {
		t.Helper()
		if st := call(http.MethodPost, "/v1/chat/completions", fmt.Sprintf(`{"model":"glm/glm-5","messages":[{"role":"user","content":"hi %d"}]}`, i)); st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
		time.Sleep(20 * time.Millisecond) // distinct instants in the log
	}
	from := time.Now().UTC().Add(-time.Second)
	chat(1) // k1 503 (cools a minute), k2 serves
	chat(2) // k1 cooling: k2
	if st := call(http.MethodPost, "/api/resilience/cooldowns", `{"all":true}`); st != 200 {
		t.Fatalf("clear cooldowns: %d", st)
	}
	time.Sleep(20 * time.Millisecond)
	chat(3) // k1 again, 503, then k2
	if st := call(http.MethodPatch, "/api/resilience", `{"connectionCooldown":{"backoffDecayMs":600000}}`); st != 200 {
		t.Fatalf("patch: %d", st)
	}
	time.Sleep(20 * time.Millisecond)
	if st := call(http.MethodPost, "/api/resilience/connections/glm/k1/reset", `{}`); st != 200 {
		t.Fatalf("reset connection: %d", st)
	}
	time.Sleep(20 * time.Millisecond)
	if st := call(http.MethodPost, "/api/rate-limits", `{"connectionId":"glm/k2","enabled":true}`); st != 200 {
		t.Fatalf("rate-limit toggle: %d", st)
	}
	time.Sleep(20 * time.Millisecond)
	chat(4) // k1 again, 503, then k2
	chat(5) // k1 cooling: k2
	to := time.Now().UTC().Add(time.Second)

	recs, sc, src, logBytes := exportSession(t, srv.URL, dir, cfgPath, from, to)
	var kinds []string
	for _, a := range sc.Actions {
		kinds = append(kinds, a.Kind.String())
	}
	if want := []string{"clear-cooldowns", "set", "reset-connection", "rate-limit"}; !slices.Equal(kinds, want) {
		t.Fatalf("exported actions %v, want %v", kinds, want)
	}
	if rl := sc.Actions[3]; len(rl.Connections) != 1 || rl.Connections[0].String() != "glm/k2" || !rl.Enabled {
		t.Errorf("the rate-limit toggle exports as %+v, want glm/k2 enabled", rl)
	}
	var trace bytes.Buffer
	res, err := sim.Run(sc, sim.Options{Trace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	want, got := loggedAnswers(recs), replayedAnswers(&trace)
	if len(want["glm/k1"]) != 3 {
		t.Errorf("the gateway's log has k1 answering %v, want three 503s", want["glm/k1"])
	}
	checkReplay(t, []string{"glm/k1", "glm/k2"}, want, got, res, logBytes, src)
}

// TestIncidentExportReplaysConcurrentSession drives a session of
// concurrent clients through a real gateway, exports the request log and
// replays it in the simulator: every recorded upstream call is replayed
// (each connection answers what it answered through the gateway, in the
// same order), the scenario passes its own recorded expects, and every
// request replays as the route the client asked for (the combo), also the
// ones the combo's first target served. No decision of the session hinges
// on which of two concurrent attempts ended first (the log and the
// simulator keep milliseconds): k1 fails once and cools for a minute, k2
// never cools, so only k2's answers, in the order its attempts began,
// decide which requests fall back to openai.
func TestIncidentExportReplaysConcurrentSession(t *testing.T) {
	k2 := []faults.Response{}
	for i := range 40 {
		r := faults.Response{Latency: 20 * time.Millisecond}
		if i%10 == 4 {
			r = faults.Response{Status: 503, Latency: 5 * time.Millisecond}
		}
		k2 = append(k2, r)
	}
	up := httptest.NewServer(faults.NewServer([]faults.Rule{
		{Match: faults.Match{Provider: "openai"}, Respond: &faults.Response{Latency: 20 * time.Millisecond}},
		{Match: faults.Match{Provider: "glm", Connection: "k1"}, Respond: &faults.Response{Status: 503, Latency: 5 * time.Millisecond}},
		{Match: faults.Match{Provider: "glm", Connection: "k2"}, Sequence: k2},
	}, faults.Options{}))
	defer up.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gw.yaml")
	cfgText := strings.ReplaceAll(gatewayIncidentConfig, "{{UP}}", up.URL) + "  connectionCooldown: {apikey: {baseCooldownMs: 60000}}\n"
	cfgText = strings.Replace(cfgText, "{id: k2, apiKey: k2}", "{id: k2, apiKey: k2, disableCooling: true}", 1)
	srv := incidentGateway(t, cfgPath, cfgText)
	chat := func(m string, c, i int) error {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi %d %d"}]}`, m, c, i)
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}

	from := time.Now().UTC().Add(-time.Second)
	// One request first: k1's 503 cools it before the clients start, so
	// no concurrent request races that answer to k1.
	if err := chat("coding", 0, 0); err != nil {
		t.Fatal(err)
	}
	asked := map[string]int{"coding": 1}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				m := "coding"
				if (c+i)%4 == 0 {
					m = "openai/gpt-5"
				}
				if err := chat(m, c+1, i); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				asked[m]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	to := time.Now().UTC().Add(time.Second)

	recs, sc, src, logBytes := exportSession(t, srv.URL, dir, cfgPath, from, to)
	var trace bytes.Buffer
	res, err := sim.Run(sc, sim.Options{Trace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	replayedAsked := map[string]int{}
	for _, tr := range sc.Traffic {
		replayedAsked[tr.Model] += max(tr.Count, 1)
	}
	if !maps.Equal(replayedAsked, asked) {
		t.Errorf("the replay asks for %v, the clients asked for %v", replayedAsked, asked)
	}
	// Each connection answers its sequence in the order attempts begin:
	// compare the answers in begin order on both sides (the log and the
	// trace are written as attempts end).
	slices.SortStableFunc(recs, func(a, b store.LogRecord) int { return a.Time.Compare(b.Time) })
	want := loggedAnswers(recs)
	got, replayed := answersInBeginOrder(t, &trace)
	if replayed != len(recs) {
		t.Errorf("the replay made %d upstream calls, the gateway %d", replayed, len(recs))
	}
	checkReplay(t, []string{"glm/k1", "glm/k2", "openai/o1"}, want, got, res, logBytes, src)
}

// answersInBeginOrder reads a simulator trace: what each connection
// answered, in the order the attempts began, and how many attempts ended.
func answersInBeginOrder(t *testing.T, trace io.Reader) (map[string][]string, int) {
	t.Helper()
	type att struct{ conn, outcome string }
	var order []int64
	byAtt := map[int64]*att{}
	s := bufio.NewScanner(trace)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	ended := 0
	for s.Scan() {
		var ev struct {
			Ev, Conn, Outcome string
			Att               int64
		}
		if json.Unmarshal(s.Bytes(), &ev) != nil {
			t.Fatalf("trace line %q", s.Text())
		}
		switch ev.Ev {
		case "begin":
			byAtt[ev.Att] = &att{conn: ev.Conn}
			order = append(order, ev.Att)
		case "record":
			if a := byAtt[ev.Att]; a != nil {
				a.outcome = ev.Outcome
				ended++
			}
		}
	}
	out := map[string][]string{}
	for _, k := range order {
		out[byAtt[k].conn] = append(out[byAtt[k].conn], byAtt[k].outcome)
	}
	return out, ended
}

// exportSession is the operator's path after a session on the gateway at
// base: fetch the request log of [from, to) as JSONL, export it with the
// gateway's config and load the scenario. It returns the log's records,
// the scenario, its text and the log.
func exportSession(t *testing.T, base, dir, cfgPath string, from, to time.Time) ([]store.LogRecord, *sim.Scenario, []byte, []byte) {
	t.Helper()
	_, logBytes := requestLogJSONL(t, base, from, to)
	logPath := filepath.Join(dir, "incident.jsonl")
	os.WriteFile(logPath, logBytes, 0o644)
	recs, err := incident.ReadJSONL(bytes.NewReader(logBytes), "incident.jsonl", from, to)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "incident.yaml")
	code, _, stderr := exportCmd(t, "-log", logPath, "-config", cfgPath, "-o", out,
		"-from", from.Format(time.RFC3339Nano), "-to", to.Format(time.RFC3339Nano))
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	src, _ := os.ReadFile(out)
	sc, err := scenarios.LoadFile(out, scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return recs, sc, src, logBytes
}

// requestLogJSONL fetches the request log of [from, to) as JSONL from the
// gateway at base, as an operator would.
func requestLogJSONL(t *testing.T, base string, from, to time.Time) (*http.Response, []byte) {
	t.Helper()
	q := fmt.Sprintf("%s/api/request-log?since=%s&until=%s&format=jsonl", base, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	resp, err := http.Get(q)
	if err != nil {
		t.Fatal(err)
	}
	logBytes, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, logBytes
}

// loggedAnswers lists per connection the statuses the gateway's request
// log recorded for its upstream attempts (operator actions are not
// attempts).
func loggedAnswers(recs []store.LogRecord) map[string][]string {
	want := map[string][]string{}
	for _, r := range recs {
		if r.ErrorType != store.OperatorAction {
			want[r.Provider+"/"+r.Connection] = append(want[r.Provider+"/"+r.Connection], strconv.Itoa(r.Status))
		}
	}
	return want
}

// replayedAnswers lists per connection the outcomes of the attempts in a
// simulator trace.
func replayedAnswers(trace *bytes.Buffer) map[string][]string {
	got := map[string][]string{}
	s := bufio.NewScanner(trace)
	for s.Scan() {
		var ev struct{ Ev, Conn, Outcome string }
		if json.Unmarshal(s.Bytes(), &ev) == nil && ev.Ev == "record" {
			got[ev.Conn] = append(got[ev.Conn], ev.Outcome)
		}
	}
	return got
}

// incidentGateway writes cfgText to cfgPath and serves a gateway with that
// config and a memory store (its request log) until the test ends.
func incidentGateway(t *testing.T, cfgPath, cfgText string) *httptest.Server {
	t.Helper()
	os.WriteFile(cfgPath, []byte(cfgText), 0o644)
	cfg, _, err := proxy.LoadConfig(cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Store: store.NewMemory(store.MemoryOptions{}), Seed: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() { srv.Close(); g.Close(context.Background()) })
	return srv
}

// checkReplay fails each of conns whose answers in the replay (got) differ
// from the gateway's (want), and a replay that fails its own recorded
// expects; on failure it logs the request log and the scenario.
func checkReplay(t *testing.T, conns []string, want, got map[string][]string, res *sim.Result, logBytes, src []byte) {
	t.Helper()
	for _, c := range conns {
		if !slices.Equal(want[c], got[c]) {
			t.Errorf("%s: the gateway's upstream answered %v, the replay %v", c, want[c], got[c])
		}
	}
	if !res.Passed {
		t.Errorf("the exported incident fails its own recorded expects in the simulator: %v %v", res.Failures, res.Violations)
	}
	if t.Failed() {
		t.Logf("log:\n%s\nscenario:\n%s", logBytes, src)
	}
}
