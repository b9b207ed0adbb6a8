package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// poolOf is provider id's upstream pool as the gateway holds it now.
func poolOf(g *Gateway, id string) *upstreamPool {
	g.provMu.RLock()
	defer g.provMu.RUnlock()
	return g.provs[id].pool
}

// httpsGW is a gateway with provider p (model m, connection c with conn's
// extra fields) at the https upstream base, trusting roots; extra is
// appended to the resilience settings.
func httpsGW(t *testing.T, base string, roots *x509.CertPool, conn, extra string) *gw {
	t.Helper()
	yaml := "providers:\n  - id: p\n    baseURL: " + base + "/v1\n    models: [m]\n" +
		"    connections: [{id: c, apiKey: k" + conn + "}]\n" + testBase + extra
	cfg, _, err := ParseConfig("test.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.DiscardHandler), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	poolOf(g, "p").tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	return &gw{t: t, g: g, srv: serveGW(t, g)}
}

// A provider's idle upstream connections are sized to its concurrency
// (docs/gateway.md, upstream calls): the sum of its connections' caps,
// bounded by the provider's and the global cap, 1024 when nothing bounds it.
func TestIdleConnsForSizesThePoolToTheProvidersConcurrency(t *testing.T) {
	conns := func(caps ...int) []ConnectionConfig {
		var out []ConnectionConfig
		for _, c := range caps {
			out = append(out, ConnectionConfig{MaxConcurrent: c})
		}
		return out
	}
	for _, tc := range []struct {
		name         string
		caps         []ConnectionConfig
		prov, global int
		want         int
	}{
		{"nothing bounds it", conns(0, 0), 0, 0, 1024},
		{"sum of the connections' caps", conns(2, 3), 0, 0, 5},
		{"one connection without a cap", conns(2, 0), 0, 0, 1024},
		{"the provider's cap below the sum", conns(4, 4), 6, 0, 6},
		{"the provider's cap above the sum", conns(1, 2), 10, 0, 3},
		{"the provider's cap alone", conns(2, 0), 7, 0, 7},
		{"the global cap", conns(2, 0), 7, 4, 4},
		{"the global cap above the rest", conns(2, 3), 0, 50, 5},
	} {
		p := ProviderConfig{Connections: tc.caps, MaxConcurrent: tc.prov}
		if got := idleConnsFor(p, tc.global); got != tc.want {
			t.Errorf("%s: idleConnsFor = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// PUT /api/providers/{id} sizes the provider's pool as a reload does
// (reloadPool): a changed cap gets a pool of the new size, an unchanged
// one keeps the pool and its connections.
func TestProviderPutResizesItsUpstreamPool(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", okJSON("hello"))
	up.set("glm-k2", okJSON("hello"))
	before := poolOf(g.g, "glm")
	if before.idle != 1024 {
		t.Fatalf("pool sized %d before the PUT, want 1024 (k2 has no cap)", before.idle)
	}
	if r := admin(g, "PUT", "/api/providers/glm", `{"maxConcurrent":5}`); r.code != 200 {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	after := poolOf(g.g, "glm")
	if after == before || after.idle != 5 {
		t.Fatalf("after maxConcurrent 5: pool sized %d (new pool: %v), want a new pool sized 5", after.idle, after != before)
	}
	if r := admin(g, "PUT", "/api/providers/glm", `{"maxConcurrent":5}`); r.code != 200 {
		t.Fatalf("second PUT: %d %s", r.code, r.body)
	}
	if again := poolOf(g.g, "glm"); again != after {
		t.Fatal("a PUT that changed no cap replaced the pool (and dropped its connections)")
	}
	if r := g.chat("glm/glm-5"); r.code != 200 {
		t.Fatalf("a request through the resized pool: %d %s", r.code, r.body)
	}
}

// A reload keeps a provider's pool when its size is unchanged, except a
// pool whose upstream was caught writing outside its answers
// (upstreamPool.stray): the reload is how reuse comes back.
func TestReloadReplacesACaughtPool(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	prov := g.g.provs["glm"]
	if reloadPool(g.g, prov, prov.cfg, 0) != prov.pool {
		t.Fatal("a reload replaced a pool whose size did not change")
	}
	prov.pool.stray()
	if np := reloadPool(g.g, prov, prov.cfg, 0); np == prov.pool || np.caught.Load() {
		t.Fatal("a reload kept the pool of an upstream caught writing outside its answers")
	}
}

// A PATCH of requestQueue.globalMaxConcurrent sizes every provider's pool
// to the new cap (resizePools), as a reload would: the pool bounded by it
// is replaced, and a PATCH that leaves the cap alone keeps the pool.
func TestGlobalCapPatchResizesUpstreamPools(t *testing.T) {
	up := newFakeUp(t)
	g := newGW(t, up, mgmtConfig, "ADMIN=s3cret")
	up.set("glm-k1", okJSON("hello"))
	up.set("glm-k2", okJSON("hello"))
	before := poolOf(g.g, "glm")
	if r := admin(g, "PATCH", "/api/resilience", `{"requestQueue":{"globalMaxConcurrent":7}}`); r.code != 200 {
		t.Fatalf("PATCH: %d %s", r.code, r.body)
	}
	after := poolOf(g.g, "glm")
	if after == before || after.idle != 7 || after.tr.MaxIdleConnsPerHost != 7 {
		t.Fatalf("after globalMaxConcurrent 7: pool sized %d (new pool: %v), want a new pool sized 7", after.idle, after != before)
	}
	if r := admin(g, "PATCH", "/api/resilience", `{"requestQueue":{"maxWaitMs":1234}}`); r.code != 200 {
		t.Fatalf("second PATCH: %d %s", r.code, r.body)
	}
	if poolOf(g.g, "glm") != after {
		t.Fatal("a PATCH that left the global cap alone replaced the pool (and dropped its connections)")
	}
	if r := g.chat("glm/glm-5"); r.code != 200 {
		t.Fatalf("a request through the resized pool: %d %s", r.code, r.body)
	}
}

// An https upstream that offers HTTP/2 is reached over HTTP/2
// (docs/gateway.md, upstream calls), through the provider's pool sized
// to its concurrency.
func TestHTTPSUpstreamIsReachedOverHTTP2(t *testing.T) {
	var proto atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, chatAnswerJSON("hi"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	gg := httpsGW(t, srv.URL, roots, ", maxConcurrent: 3", "")
	if pool := poolOf(gg.g, "p"); pool.idle != 3 {
		t.Fatalf("pool sized %d, want 3 (the connection's cap)", pool.idle)
	}
	for range 2 {
		if r := gg.chat("p/m"); r.code != 200 {
			t.Fatalf("answer %d %s", r.code, r.body)
		}
		if p, _ := proto.Load().(string); p != "HTTP/2.0" {
			t.Fatalf("the upstream was reached over %q, want HTTP/2.0", p)
		}
	}
}
