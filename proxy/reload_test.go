package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// reloadGW starts a gateway from a config file it can re-read; write
// replaces the file's text ({{UP}} is the fake upstream).
type reloadGW struct {
	*gw
	path string
}

func (r *reloadGW) write(t *testing.T, y string) {
	t.Helper()
	if err := os.WriteFile(r.path, []byte(strings.ReplaceAll(y, "{{UP}}", r.up.url())), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newReloadGW(t *testing.T, up *fakeUp, y string, env ...string) *reloadGW {
	t.Helper()
	r := &reloadGW{path: filepath.Join(t.TempDir(), "breakwater.yaml")}
	r.gw = &gw{t: t, up: up, admin: "s3cret"}
	r.write(t, y)
	cfg, _, err := LoadConfig(r.path, env)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Environ: env, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.g, r.srv = g, serveGW(t, g)
	t.Cleanup(func() { g.Close(context.Background()) })
	return r
}

const reloadBefore = `
server: {managementKey: s3cret}
clientKeys:
  - {id: old-client, key: kold}
providers:
  - id: glm
    type: glm
    baseURL: {{UP}}
    models: [glm-5]
    strategy: priority
    connections:
      - {id: k1, apiKey: glm-k1, priority: 1}
      - {id: k2, apiKey: glm-k2, priority: 2}
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
`

// k2 and the old client key go, k3 and a new key come, k1 stays (and
// moves to the end of the list).
const reloadAfter = `
server: {managementKey: s3cret}
clientKeys:
  - {id: new-client, key: knew}
providers:
  - id: glm
    type: glm
    baseURL: {{UP}}
    models: [glm-5]
    strategy: priority
    connections:
      - {id: k3, apiKey: glm-k3, priority: 2}
      - {id: k1, apiKey: glm-k1, priority: 1}
combos:
  - {id: best, targets: [glm/glm-5]}
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
`

// A reload applies providers, connections, keys, combos and settings as
// one step, and the state of the connections that stay is kept: k1's
// cooldown survives it.
func TestReloadAppliesAndKeepsStateOfConnectionsThatStay(t *testing.T) {
	up := newFakeUp(t)
	g := newReloadGW(t, up, reloadBefore)
	up.set("glm-k1", status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "600"))
	if r := g.chat("glm/glm-5", "Authorization", "Bearer kold"); r.code != 200 {
		t.Fatalf("before: %d %s", r.code, r.body)
	}
	if c := g.conn("glm", "k1"); c["status"] != "cooldown" {
		t.Fatalf("k1 should cool: %v", c)
	}
	g.write(t, reloadAfter)
	r := admin(g.gw, "POST", "/api/config/reload", "")
	if r.code != 200 {
		t.Fatalf("reload: %d %s", r.code, r.body)
	}
	if !strings.Contains(r.body, `"added":["glm/k3"]`) || !strings.Contains(r.body, `"removed":["glm/k2"]`) || !strings.Contains(r.body, `"keptConnections":1`) {
		t.Fatalf("reload answer: %s", r.body)
	}
	if c := g.conn("glm", "k1"); c["status"] != "cooldown" {
		t.Fatalf("k1's cooldown was lost in the reload: %v", c)
	}
	if r := g.chat("glm/glm-5", "Authorization", "Bearer kold"); r.code != 401 {
		t.Fatalf("the removed client key still works: %d", r.code)
	}
	// k1 cools, so the request goes to the new k3 (never the removed k2).
	k2 := up.count("glm-k2")
	if r := g.chat("best", "Authorization", "Bearer knew"); r.code != 200 || up.count("glm-k3") != 1 || up.count("glm-k2") != k2 {
		t.Fatalf("after: %d %s (k3 %d)", r.code, r.body, up.count("glm-k3"))
	}
	if m := metricsText(t, g.gw); !strings.Contains(m, `breakwater_config_reloads_total{result="success"} 1`) {
		t.Fatalf("reload not counted")
	}
}

// A config with an error is refused whole: the answer names file:line,
// the failure is counted, and the previous config keeps serving.
func TestReloadFailureChangesNothing(t *testing.T) {
	up := newFakeUp(t)
	g := newReloadGW(t, up, reloadBefore)
	broken := strings.Replace(reloadAfter, "strategy: priority", "stratgy: priority", 1)
	g.write(t, broken)
	r := admin(g.gw, "POST", "/api/config/reload", "")
	if r.code != 422 || !strings.Contains(r.body, "breakwater.yaml:10: ") || !strings.Contains(r.body, "stratgy") || !strings.Contains(r.body, `"code":"config_invalid"`) {
		t.Fatalf("broken reload: %d %s", r.code, r.body)
	}
	// A valid file whose settings are bad is refused too.
	g.write(t, reloadAfter+"  requestBudget: {maxAttempts: many}\n")
	if r := admin(g.gw, "POST", "/api/config/reload", ""); r.code != 422 || !strings.Contains(r.body, "maxAttempts") {
		t.Fatalf("bad settings: %d %s", r.code, r.body)
	}
	if r := g.chat("glm/glm-5", "Authorization", "Bearer kold"); r.code != 200 {
		t.Fatalf("the old key stopped working after a refused reload: %d", r.code)
	}
	if r := g.chat("glm/glm-5", "Authorization", "Bearer knew"); r.code != 401 {
		t.Fatalf("a refused reload's key works: %d", r.code)
	}
	if c := g.conn("glm", "k2"); c == nil {
		t.Fatalf("k2 is gone after a refused reload")
	}
	if m := metricsText(t, g.gw); !strings.Contains(m, `breakwater_config_reloads_total{result="failure"} 2`) {
		t.Fatalf("failures not counted")
	}
}

// A request in flight on a connection the reload removes finishes on the
// view it started with: the client gets its answer.
func TestReloadRemovedConnectionInFlightFinishes(t *testing.T) {
	up := newFakeUp(t)
	g := newReloadGW(t, up, reloadBefore)
	up.set("glm-k1", status(429, `{"error":{"message":"slow down"}}`, "Retry-After", "600"))
	g.chat("glm/glm-5", "Authorization", "Bearer kold") // k1 cools: the next request goes to k2
	release := make(chan struct{})
	up.set("glm-k2", func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		okJSON("from k2")(w, r, n)
	})
	done := make(chan resp, 1)
	go func() { done <- g.chat("glm/glm-5", "Authorization", "Bearer kold") }()
	eventually(t, "the request reaches k2", func() bool { return up.count("glm-k2") == 2 }) // the first came with k1's 429
	g.write(t, reloadAfter)
	if r := admin(g.gw, "POST", "/api/config/reload", ""); r.code != 200 || !strings.Contains(r.body, `"removed":["glm/k2"]`) {
		t.Fatalf("reload: %d %s", r.code, r.body)
	}
	close(release)
	select {
	case r := <-done:
		if r.code != 200 || !strings.Contains(r.body, "from k2") {
			t.Fatalf("in-flight request on the removed k2: %d %s", r.code, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight request never finished")
	}
	for _, c := range g.health()["connections"].([]any) {
		if c.(map[string]any)["connection"] == "k2" {
			t.Fatalf("the removed k2 came back: %v", c)
		}
	}
}

// Reloads while requests run: every request is answered (by the old or
// the new view), and the race detector sees no unsynchronised access.
func TestReloadUnderTraffic(t *testing.T) {
	up := newFakeUp(t)
	g := newReloadGW(t, up, reloadBefore)
	after := strings.Replace(reloadAfter, "id: new-client, key: knew", "id: old-client, key: kold", 1)
	stop := make(chan struct{})
	errs := make(chan string, 64)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := g.chat("glm/glm-5", "Authorization", "Bearer kold"); r.code != 200 {
					select {
					case errs <- fmt.Sprintf("%d %s", r.code, r.body):
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < 10; i++ {
		y := reloadBefore
		if i%2 == 0 {
			y = after
		}
		g.write(t, y)
		if r := admin(g.gw, "POST", "/api/config/reload", ""); r.code != 200 {
			t.Fatalf("reload %d: %d %s", i, r.code, r.body)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a request failed across reloads: %s", e)
	}
}
