package faults

import (
	"bufio"
	"io"
	"strings"
	"testing"
	"time"
)

// The failover catalogue's faults (docs/catalogue.md) are expressions of
// the ordinary rule format, so `breakwater upstream -rules FILE` serves
// exactly what the library scenarios give the simulator. This reads them as
// that command reads a rules file and checks the wire behaviour of each.
const catalogueRules = `
- match: {provider: s01}          # one 429 with Retry-After 2 s, then healthy
  sequence:
    - {use: rate-limit-retry-after, headers: {Retry-After: "2"}}
    - {status: 200}
- match: {provider: s03}          # a single 500, then healthy
  sequence: [{use: server-error-500}, {status: 200}]
- match: {provider: s07}          # headers at once, the first token after 1 s
  respond: {use: slow-first-token, latency: 1s}
- match: {provider: s12}
  respond: {use: context-length}
- match: {provider: s13}
  respond: {use: content-filter}
- match: {provider: s15}          # a timed outage
  until: 1s
  respond: {use: unavailable-503}
`

func TestCatalogueFaultsOnTheWire(t *testing.T) {
	rules, err := ParseRules("catalogue.yaml", []byte(catalogueRules))
	if err != nil {
		t.Fatal(err)
	}
	_, ts := newTestServer(t, rules)
	get := func(provider string, stream bool) (int, string, string) {
		t.Helper()
		resp, err := chat(t, ts.URL, provider, "k", stream)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	if st, _, _ := get("s15", false); st != 503 { // S15: inside the outage window (its clock started with the server)
		t.Fatalf("S15 inside the outage: %d", st)
	}
	if st, ra, _ := get("s01", true); st != 429 || ra != "2" {
		t.Fatalf("S01 first: %d Retry-After %q", st, ra)
	}
	if st, _, _ := get("s01", true); st != 200 {
		t.Fatalf("S01 second: %d", st)
	}
	if st, _, _ := get("s03", false); st != 500 {
		t.Fatalf("S03 first: %d", st)
	}
	if st, _, _ := get("s03", false); st != 200 {
		t.Fatalf("S03 second: %d", st)
	}
	if st, _, b := get("s12", true); st != 400 || !strings.Contains(b, "context_length_exceeded") {
		t.Fatalf("S12: %d %s", st, b)
	}
	if st, _, b := get("s13", true); st != 400 || !strings.Contains(b, "content_filter") {
		t.Fatalf("S13: %d %s", st, b)
	}

	// S07: the stream's headers come at once, its first byte after the latency.
	start := time.Now()
	resp, err := chat(t, ts.URL, "s07", "k", true)
	if err != nil {
		t.Fatal(err)
	}
	headers := time.Since(start)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	first := time.Since(start)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("S07: %d %q %v", resp.StatusCode, line, err)
	}
	if first < time.Second || headers >= time.Second {
		t.Fatalf("S07: headers after %v, first byte after %v; want the headers at once, the first byte after the 1 s latency", headers, first)
	}

	// S15: healthy after the outage window.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _, _ := get("s15", false)
		if st == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("S15: still %d long after the outage window", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
