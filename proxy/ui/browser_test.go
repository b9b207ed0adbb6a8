package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/scenarios"
	"github.com/breakwater-gw/breakwater/sim"
	"github.com/breakwater-gw/breakwater/store"
	"github.com/chromedp/chromedp"
)

// The dashboard, driven in headless Chromium against a real gateway whose
// upstream fails on purpose. One browser runs every check in turn.
//
// Screenshots of the main pages go to $BREAKWATER_UI_SCREENSHOTS, or to
// breakwater-ui-screenshots under the temporary directory.

// hostile is text an upstream or a config could carry: shown as text, it
// is harmless; parsed as HTML, it would run and set window.__pwned.
const hostile = `<img src=x onerror="window.__pwned=1"><b>bold</b>`

const browserCfg = `
server: {managementKey: s3cret}
clientKeys:
  - {id: app, key: kapp}
providers:
  - {id: flaky, profile: apikey, baseURL: "{{UP}}", models: [m], connections: [{id: k1, apiKey: down}, {id: k2, apiKey: down}, {id: k3, apiKey: down}]}
  - {id: paid, profile: apikey, baseURL: "{{UP}}", models: [m], connections: [{id: k1, apiKey: broke}, {id: k2, apiKey: fine}]}
  - {id: locked, profile: apikey, baseURL: "{{UP}}", models: [m], connections: [{id: k1, apiKey: unauth}]}
  - {id: loc, type: local, baseURL: "{{UP}}", models: [m], connections: [{id: k1, apiKey: nomodel}]}
  - id: odd
    profile: apikey
    baseURL: "{{UP}}"
    models: ['<script>window.__pwned=1</script>model']
    connections: [{id: k1, apiKey: fine}]
combos:
  - {id: main, strategy: priority, targets: [flaky/m, paid/m]}
resilience:
  waitForCooldown: {enabled: false}
  comboCooldownWait: {enabled: false}
  providerBreaker:
    apikey: {failureThreshold: 2, degradationThreshold: 1, resetTimeoutMs: 600000}
    dedup: {connectionMs: 0, transportMs: 0}
`

// faultUpstream answers by the connection's key: "down" always fails with
// a 500, "unauth" with a 401, "nomodel" says the model is missing (a
// model lockout), "broke" says its credits are gone (a terminal status) with HTML in
// the error, anything else succeeds.
func faultUpstream(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		switch key {
		case "nomodel":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"message":"model m not found"}}`)
		case "unauth":
			w.WriteHeader(401)
			io.WriteString(w, `{"error":{"message":"invalid api key"}}`)
		case "down":
			w.WriteHeader(500)
			io.WriteString(w, `{"error":{"message":"upstream exploded"}}`)
		case "broke":
			w.WriteHeader(402)
			// Written as is: json.Marshal would escape the < and >.
			fmt.Fprintf(w, `{"error":{"message":"insufficient credits %s","type":"insufficient_quota"}}`, strings.ReplaceAll(hostile, `"`, `\"`))
		default:
			io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func chromiumPath(t *testing.T) string {
	if p := os.Getenv("BREAKWATER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium found (apt-get install chromium; .ci/run installs it): the browser tests cannot be skipped under CI=true")
	}
	t.Skip("no chromium found; install Debian's chromium package to run the dashboard's browser tests")
	return ""
}

func screenshotDir(t *testing.T) string {
	dir := os.Getenv("BREAKWATER_UI_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "breakwater-ui-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	shot string
}

func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval runs a JavaScript expression and returns its value.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// js runs a JavaScript statement (a click, a navigation).
func (b *browser) js(stmt string) { b.t.Helper(); eval[any](b, stmt) }

// waitFor polls a JavaScript condition (generous deadline; the page
// refreshes itself every 1.5 s) and returns how long it took.
func (b *browser) waitFor(what, js string) time.Duration {
	b.t.Helper()
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	for {
		if ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js)); err == nil && ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			main, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(document.getElementById('main')||document.body).innerText.slice(0, 2000)`))
			b.t.Fatalf("timed out waiting for %s; the page shows:\n%s", what, main)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *browser) page(name, readyJS string) {
	b.t.Helper()
	b.js(fmt.Sprintf(`location.hash = %q`, "#"+name))
	b.waitFor(name+" page", readyJS)
	// Every control has a name a screen reader can read out.
	if unnamed := eval[[]string](b, unnamedControls); len(unnamed) > 0 {
		b.t.Fatalf("%s page: controls without a label or text: %v", name, unnamed)
	}
}

const unnamedControls = `[...document.querySelectorAll('input, select, textarea, button')]
	.filter(e => e.offsetParent !== null)
	.filter(e => !((e.labels && e.labels.length) || e.getAttribute('aria-label') || e.textContent.trim()))
	.map(e => e.outerHTML.slice(0, 80))`

func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shot, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func textOf(sel string) string {
	return fmt.Sprintf(`((document.querySelector(%q)||{}).textContent||'')`, sel)
}

func TestDashboardInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	up := faultUpstream(t)
	cfg, _, err := proxy.ParseConfig("browser.yaml", []byte(strings.ReplaceAll(browserCfg, "{{UP}}", up.URL+"/v1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := proxy.New(context.Background(), cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler), Seed: 1,
		Store: store.NewMemory(store.MemoryOptions{})}) // as serve runs it: the request log in memory
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() {
		srv.Close()
		g.Close(context.Background())
	})
	chat := func(model, requestID string) int {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer kapp")
		req.Header.Set("Content-Type", "application/json")
		if requestID != "" {
			req.Header.Set("X-Request-Id", requestID)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 800), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	b := &browser{t: t, ctx: ctx, base: srv.URL, shot: screenshotDir(t)}
	t.Logf("screenshots in %s", b.shot)

	// Sign in: the key goes to sessionStorage, the overview loads.
	b.run("open the dashboard", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.ID("login-key")))
	b.screenshot("login")
	b.run("sign in", chromedp.SendKeys(chromedp.ID("login-key"), "s3cret"), chromedp.Click(chromedp.ID("login-submit")))
	b.waitFor("the overview", `!!document.querySelector('#main .cards')`)
	if stored := eval[string](b, `sessionStorage.getItem('breakwater-management-key')`); stored != "s3cret" {
		t.Fatalf("the key in sessionStorage = %q", stored)
	}

	// A breaker opening shows as OPEN on the open providers page, without
	// a reload (live updates).
	b.page("providers", textOf(`[data-provider-state="flaky"]`)+` === 'CLOSED'`)
	for range 3 {
		chat("flaky/m", "")
	}
	took := b.waitFor("flaky's breaker shown OPEN", textOf(`[data-provider-state="flaky"]`)+` === 'OPEN'`)
	t.Logf("the OPEN breaker appeared %v after the failures", took)
	b.screenshot("providers")

	// A terminal connection (credits exhausted) shows its error as text,
	// and the reset action, confirmed in the dialog, clears it.
	if code := chat("paid/m", "req-ui-credits"); code != 200 {
		t.Fatalf("paid/m answered %d, want 200 from its second connection", code)
	}
	chat("locked/m", "")
	b.page("connections", textOf(`[data-connection-status="paid/k1"]`)+` === 'credits_exhausted'`)
	// The 401 ladder's first strike shows with how far it goes.
	b.waitFor("locked/k1's auth strike", textOf(`#main`)+`.includes('auth 1 of 4 → expired')`)
	lastErr := eval[string](b, `[...document.querySelectorAll('.last-error')].map(e => e.textContent).join('\n')`)
	if !strings.Contains(lastErr, "<b>bold</b>") {
		t.Fatalf("the last error is not shown as text: %q", lastErr)
	}
	b.screenshot("connections")
	b.js(`document.querySelector('button[aria-label="Reset paid/k1"]').click()`)
	b.waitFor("the confirmation dialog", `document.getElementById('confirm').open`)
	if focused := eval[string](b, `document.activeElement.id`); focused != "confirm-cancel" {
		t.Fatalf("the dialog opened with focus on %q, want the Cancel button (a stray Enter must not confirm)", focused)
	}
	b.js(`document.getElementById('confirm-ok').click()`)
	b.waitFor("paid/k1 reset to active", textOf(`[data-connection-status="paid/k1"]`)+` === 'active'`)

	// A model lockout is listed on its connection and cleared from there.
	chat("loc/m", "")
	const clearLock = `button[aria-label="Clear lockout of m on loc/k1"]`
	b.waitFor("loc/k1's lockout of m", `!!document.querySelector('`+clearLock+`')`)
	b.js(`document.querySelector('` + clearLock + `').click()`)
	b.waitFor("the confirmation dialog", `document.getElementById('confirm').open`)
	b.js(`document.getElementById('confirm-ok').click()`)
	b.waitFor("the lockout gone", `!document.querySelector('`+clearLock+`') && `+textOf(`#status`)+`.includes('removed: 1')`)

	// Combos: what main would pick now and why flaky is out.
	b.page("combos", `document.getElementById('main').textContent.includes('circuit_open')`)
	b.screenshot("combos")

	// The request log filter finds one request by id; its attempts open.
	for i := range 3 {
		chat("paid/m", fmt.Sprintf("req-ui-other-%d", i))
	}
	chat("odd/<script>window.__pwned=1</script>model", "req-ui-find-me")
	b.page("log", `!!document.getElementById('f-request')`)
	b.run("filter by request id", chromedp.SendKeys(chromedp.ID("f-request"), "req-ui-find-me"), chromedp.Click(chromedp.ID("f-apply")))
	b.waitFor("only req-ui-find-me listed", `(() => { const ids = [...document.querySelectorAll('tr[data-request-id]')].map(r => r.dataset.requestId);
		return ids.length > 0 && ids.every(id => id === 'req-ui-find-me'); })()`)
	b.js(`document.querySelector('button[aria-label="Show the attempts of request req-ui-find-me"]').click()`)
	b.waitFor("the request's attempts", textOf(`#log-detail`)+`.includes('<script>window.__pwned=1</script>model')`)
	b.screenshot("log")

	// A model name with HTML in it is text on the providers page too.
	b.page("providers", `document.getElementById('main').textContent.includes('<script>window.__pwned=1</script>model')`)
	pwned := eval[int](b, `window.__pwned === undefined ? 0 : 1`)
	scripts := eval[int](b, `document.querySelectorAll('#main script, #main img, #main b').length`)
	if pwned != 0 || scripts != 0 {
		t.Fatalf("HTML from the gateway was parsed: __pwned=%d, %d script/img/b elements in the page", pwned, scripts)
	}

	// PATCH a setting through the edit dialog: its source becomes "saved".
	const th = `[data-setting-source="providerBreaker.apikey.failureThreshold"]`
	b.page("settings", textOf(th)+` === 'file'`)
	b.js(`document.querySelector('button[aria-label="Edit providerBreaker.apikey.failureThreshold"]').click()`)
	b.waitFor("the edit dialog", `document.getElementById('confirm').open && document.activeElement.id === 'setting-value'`)
	b.js(`document.getElementById('setting-value').value = '3'; document.getElementById('confirm-ok').click()`)
	b.waitFor("the saved setting", textOf(th)+` === 'saved' && `+textOf(`#status`)+`.includes('done')`)
	b.screenshot("settings")
	// A scenario plot opens from disk in a frame sandboxed without scripts:
	// a real `sim -plot` file renders, and a script in a plot never runs.
	dir := t.TempDir()
	hostilePlot := filepath.Join(dir, "hostile.html")
	if err := os.WriteFile(hostilePlot, []byte(`<!doctype html><p>plot</p><script>parent.__pwned=1;window.__ran=1</script>`), 0o644); err != nil {
		t.Fatal(err)
	}
	b.page("plots", `!!document.getElementById('plot-file')`)
	b.run("open a hostile plot", chromedp.SetUploadFiles(chromedp.ID("plot-file"), []string{hostilePlot}))
	b.waitFor("the sandboxed plot frame", `(() => { const f = document.querySelector('.plot iframe');
		return !!f && f.getAttribute('sandbox') === '' && f.src.startsWith('blob:') })()`)
	time.Sleep(500 * time.Millisecond) // the frame loads; its script must not run
	if pwned := eval[int](b, `window.__pwned === undefined ? 0 : 1`); pwned != 0 {
		t.Fatal("a plot's script reached the dashboard")
	}
	b.run("open a real plot", chromedp.SetUploadFiles(chromedp.ID("plot-file"), []string{simPlot(t, dir)}))
	b.waitFor("the real plot", textOf(`#main h2`)+` === 'plot.html'`)
	time.Sleep(300 * time.Millisecond) // let the frame paint for the screenshot
	b.screenshot("plots")

	b.page("overview", `!!document.querySelector('#main .cards') && `+textOf(`#main`)+`.includes('Served by provider (last 60 s)')`)
	b.screenshot("overview")
}

// simPlot writes the HTML plot of a library scenario, as
// `breakwater sim -plot plot.html` does.
func simPlot(t *testing.T, dir string) string {
	sc, err := scenarios.LoadFile("../../scenarios/library/breaker-trip-lazy-half-open.yaml", scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tl := sim.NewTimeline()
	res, err := sim.Run(sc, sim.Options{Timeline: tl})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "plot.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tl.WriteHTML(f, res); err != nil {
		t.Fatal(err)
	}
	return path
}
