package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/internal/tcpproxy"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/store"
)

// env is everything a run talks to: the gateway (in-process or target),
// the fault upstreams, the store and the clients.
type env struct {
	opts      *Options
	cfg       *proxy.Config // a copy: baseURLs rewritten to the fault upstreams
	topo      model.Topology
	inProcess bool
	mgmtKey   string
	clientKey string
	ctl       *http.Client // management and control calls
	log       *slog.Logger

	baseURL atomic.Pointer[string]
	ups     []*upstream
	byProv  map[string]*upstream

	// in-process gateway
	gwMu      sync.Mutex
	gw        *proxy.Gateway
	st        proxy.StateStore
	addr      string
	serveDone chan struct{}
	memStore  *store.Memory
	pgURL     string          // the store's URL as the gateway sees it ("" = not Postgres)
	dbProxy   *tcpproxy.Proxy // the db-down action cuts the database behind it
	db        interface{ SetDown(bool) }

	settings model.Settings
}

func (e *env) base() string { return *e.baseURL.Load() }

// upstream is one fault upstream: a faults.Server this run started on a
// loopback listener, or one that was already running (srv nil).
type upstream struct {
	addr      string
	providers []string
	baseRules []faults.Rule
	srv       *faults.Server
	ctl       *http.Client

	mu   sync.Mutex
	hs   *http.Server
	down bool
	done chan struct{}
}

func (u *upstream) url(path string) string { return "http://" + u.addr + path }

// serve starts listening (again) on the upstream's address.
func (u *upstream) serve() error {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // re-binding a port just closed may take a moment
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("fault upstream %s: %w", u.addr, err)
	}
	u.addr = ln.Addr().String()
	hs := &http.Server{Handler: u.srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: discardLog()}
	done := make(chan struct{})
	u.mu.Lock()
	u.hs, u.done, u.down = hs, done, false
	u.mu.Unlock()
	go func() {
		defer close(done)
		_ = hs.Serve(ln)
	}()
	return nil
}

// setDown stops (true) or restarts (false) an upstream this run started:
// the listener closes and open connections are cut, so the gateway sees
// connection refused and resets.
func (u *upstream) setDown(down bool) error {
	if u.srv == nil {
		return fmt.Errorf("fault upstream %s was not started by this run: it cannot be taken down", u.addr)
	}
	u.mu.Lock()
	hs, done, was := u.hs, u.done, u.down
	u.mu.Unlock()
	if down == was {
		return nil
	}
	if !down {
		return u.serve()
	}
	hs.Close()
	<-done
	u.mu.Lock()
	u.down = true
	u.mu.Unlock()
	return nil
}

// closeIdle makes the upstream close its idle keep-alive connections.
func (u *upstream) closeIdle() {
	u.mu.Lock()
	hs := u.hs
	u.mu.Unlock()
	if u.srv != nil && hs != nil {
		hs.SetKeepAlivesEnabled(false)
		hs.SetKeepAlivesEnabled(true)
	}
}

func (u *upstream) close() {
	if u.srv == nil {
		return
	}
	u.mu.Lock()
	hs, done, down := u.hs, u.done, u.down
	u.down = true
	u.mu.Unlock()
	if !down && hs != nil {
		hs.Close()
		<-done
	}
}

// put replaces the upstream's rules: its steady rules, then the schedule's
// (the last matching rule wins, so faults override the steady behaviour).
func (u *upstream) put(ctx context.Context, rules []faults.Rule) error {
	all := append(slices.Clone(u.baseRules), rules...)
	b, err := json.Marshal(map[string]any{"rules": faults.EncodeRules(all)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.url("/_faults"), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := u.ctl.Do(req)
	if err != nil {
		return fmt.Errorf("PUT %s/_faults: %w", u.addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s/_faults: %d %s", u.addr, resp.StatusCode, snippet(body))
	}
	return nil
}

// stats reads the upstream's answered attempts per provider and outcome.
func (u *upstream) stats(ctx context.Context, out map[string]map[string]int) {
	u.mu.Lock()
	down := u.down
	u.mu.Unlock()
	if down {
		return
	}
	var st faults.Stats
	if err := getJSON(ctx, u.ctl, u.url("/_stats"), "", 2*time.Second, &st); err != nil {
		return
	}
	for key, m := range st.ByConnection {
		p, _, _ := strings.Cut(key, "/")
		if !slices.Contains(u.providers, p) {
			continue
		}
		dst := out[p]
		if dst == nil {
			dst = map[string]int{}
			out[p] = dst
		}
		for label, n := range m {
			dst[label] += n
		}
	}
}

func (e *env) upstreamStats(ctx context.Context) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, u := range e.ups {
		u.stats(ctx, out)
	}
	return out
}

func (e *env) resources(ctx context.Context) Resources {
	if e.inProcess {
		return selfResources()
	}
	return e.remoteResources(ctx)
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }

// setupEnv starts (or finds) the fault upstreams and the gateway.
func setupEnv(ctx context.Context, o *Options) (*env, error) {
	if o.Config == nil {
		return nil, errors.New("chaos: a gateway config is required")
	}
	e := &env{opts: o, inProcess: o.Target == "", ctl: newClient(16), byProv: map[string]*upstream{}, db: o.DB}
	e.log = o.Logger
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	cfg := *o.Config
	cfg.Providers = slices.Clone(o.Config.Providers)
	for i := range cfg.Providers {
		cfg.Providers[i].Connections = slices.Clone(cfg.Providers[i].Connections)
	}
	e.cfg = &cfg
	e.mgmtKey = firstNonEmpty(o.ManagementKey, cfg.Server.ManagementKey)
	e.clientKey = o.ClientKey
	if e.clientKey == "" && len(cfg.ClientKeys) > 0 {
		e.clientKey = cfg.ClientKeys[0].Key
	}
	ok := false
	defer func() {
		if !ok {
			e.teardown(context.Background())
		}
	}()
	baseRules, err := demoRules(&cfg)
	if err != nil {
		return nil, err
	}
	if err := e.setupUpstreams(ctx, baseRules); err != nil {
		return nil, err
	}
	topo, err := cfg.Topology()
	if err != nil {
		return nil, err
	}
	e.topo = topo
	if e.inProcess {
		if err := e.startGateway(ctx); err != nil {
			return nil, err
		}
	} else {
		u, err := checkLoopbackURL("-target", o.Target)
		if err != nil {
			return nil, err
		}
		b := strings.TrimRight(u.String(), "/")
		e.baseURL.Store(&b)
		if err := getJSON(ctx, e.ctl, b+"/healthz", "", 5*time.Second, nil); err != nil {
			return nil, fmt.Errorf("the target gateway does not answer GET /healthz: %w", err)
		}
	}
	if err := e.readSettings(ctx); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// demoRules reads the config's demo.faults file: the steady behaviour of
// the fault upstreams (latency, stream shape), under the schedule's faults.
func demoRules(cfg *proxy.Config) ([]faults.Rule, error) {
	if cfg.Demo.Faults == "" {
		return nil, nil
	}
	path := cfg.Demo.Faults
	if !filepath.IsAbs(path) && cfg.File != "" {
		path = filepath.Join(filepath.Dir(cfg.File), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("demo.faults: %w", err)
	}
	return faults.ParseRules(path, b)
}

// setupUpstreams gives every provider a fault upstream: demo:// providers
// get one each, started here; a loopback http:// baseURL names a fault
// upstream that is used if it answers and started here otherwise.
func (e *env) setupUpstreams(ctx context.Context, baseRules []faults.Rule) error {
	// Every baseURL is checked before any upstream starts.
	for i := range e.cfg.Providers {
		p := &e.cfg.Providers[i]
		if strings.HasPrefix(p.BaseURL, "demo://") {
			continue
		}
		pu, err := checkLoopbackURL("provider "+p.ID+" baseURL", p.BaseURL)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(pu.Path, "/"+p.ID+"/") {
			return fmt.Errorf("provider %s: baseURL %s must start with /%s/ (http://%s/%s/v1): the fault upstream tells providers apart by the first path segment, so no fault matching provider %s could ever be answered", p.ID, p.BaseURL, p.ID, pu.Host, p.ID, p.ID)
		}
	}
	byAddr := map[string]*upstream{}
	for i := range e.cfg.Providers {
		p := &e.cfg.Providers[i]
		for j := range p.Connections {
			if p.Connections[j].APIKey == "" {
				p.Connections[j].APIKey = p.Connections[j].ID // the fault upstream tells connections apart by key
			}
		}
		var u *upstream
		switch {
		case strings.HasPrefix(p.BaseURL, "demo://"):
			if !e.inProcess {
				return fmt.Errorf("provider %s: baseURL demo:// is served inside the running gateway, so a -target run cannot inject faults into it; run `breakwater upstream -listen 127.0.0.1:PORT` and point the baseURL at http://127.0.0.1:PORT/%s/v1", p.ID, p.ID)
			}
			u = &upstream{addr: "127.0.0.1:0", baseRules: baseRules, ctl: e.ctl}
			u.srv = e.newFaultServer()
			if err := u.serve(); err != nil {
				return err
			}
			p.BaseURL = "http://" + u.addr + "/" + p.ID + "/v1"
		default:
			pu, err := checkLoopbackURL("provider "+p.ID+" baseURL", p.BaseURL)
			if err != nil {
				return err
			}
			if u = byAddr[pu.Host]; u == nil {
				u = &upstream{addr: pu.Host, baseRules: baseRules, ctl: e.ctl}
				if err := e.attachUpstream(ctx, u); err != nil {
					return fmt.Errorf("provider %s: %w", p.ID, err)
				}
				byAddr[pu.Host] = u
			}
		}
		u.providers = append(u.providers, p.ID)
		e.byProv[p.ID] = u
		if !slices.Contains(e.ups, u) {
			e.ups = append(e.ups, u)
		}
	}
	for _, u := range e.ups {
		if err := u.put(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) newFaultServer() *faults.Server {
	seed := e.opts.Seed
	if seed == 0 {
		seed = 1
	}
	return faults.NewServer(nil, faults.Options{Seed: seed, MaxHold: 2 * time.Minute})
}

// attachUpstream uses the fault upstream at u.addr, or starts one there.
func (e *env) attachUpstream(ctx context.Context, u *upstream) error {
	var rules json.RawMessage
	err := getJSON(ctx, e.ctl, u.url("/_faults"), "", 2*time.Second, &rules)
	if err == nil {
		return nil // a fault upstream answers there
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s does not look like a fault upstream (GET /_faults: %v)", u.addr, err)
	}
	u.srv = e.newFaultServer()
	return u.serve()
}

// readSettings reads the settings the gateway runs with.
func (e *env) readSettings(ctx context.Context) error {
	var v struct {
		Settings json.RawMessage `json:"settings"`
	}
	if err := getJSON(ctx, e.ctl, e.base()+"/api/resilience", e.mgmtKey, 5*time.Second, &v); err != nil {
		return fmt.Errorf("reading the gateway's settings (GET /api/resilience): %w", err)
	}
	st := model.DefaultSettings()
	if err := json.Unmarshal(v.Settings, &st); err != nil {
		return fmt.Errorf("reading the gateway's settings: %w", err)
	}
	e.settings = st
	return nil
}

// startGateway opens the store and starts an in-process gateway on a
// loopback listener (the same address again after a restart).
func (e *env) startGateway(ctx context.Context) error {
	st, err := e.openStore(ctx)
	if err != nil {
		return err
	}
	cfg := *e.cfg
	cfg.Server.Listen = "127.0.0.1:0"
	gw, err := proxy.New(ctx, &cfg, proxy.Options{Logger: e.log, Store: st, Environ: e.opts.Environ, Seed: e.opts.Seed})
	if err != nil {
		_ = st.Close(ctx)
		return err
	}
	addr := e.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		_ = gw.Close(ctx)
		return fmt.Errorf("gateway listener: %w", err)
	}
	e.addr = ln.Addr().String()
	b := "http://" + e.addr
	e.baseURL.Store(&b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gw.Serve(ln)
	}()
	e.gwMu.Lock()
	e.gw, e.st, e.serveDone = gw, st, done
	e.gwMu.Unlock()
	return nil
}

// stopGateway drains and stops the in-process gateway (its store is
// flushed and closed).
func (e *env) stopGateway(ctx context.Context) error {
	e.gwMu.Lock()
	gw, done := e.gw, e.serveDone
	e.gw = nil
	e.gwMu.Unlock()
	if gw == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := gw.Shutdown(sctx)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// openStore opens the gateway's store: Options.OpenStore, else the config's
// store.url (one memory store for the whole run, so restarts keep state).
func (e *env) openStore(ctx context.Context) (proxy.StateStore, error) {
	if e.opts.OpenStore != nil {
		return e.opts.OpenStore(ctx)
	}
	u := e.cfg.Store.URL
	if u == "" || u == "memory" {
		if e.memStore == nil {
			e.memStore = store.NewMemory(store.MemoryOptions{})
		}
		return keepOpen{e.memStore}, nil
	}
	if e.pgURL == "" {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "postgres" && pu.Scheme != "postgresql") {
			return nil, fmt.Errorf("store.url: want postgres://… or empty")
		}
		host := pu.Hostname()
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("store.url: the database must be on loopback for a chaos run")
		}
		e.pgURL = u
		if e.opts.DB != nil {
			e.db = e.opts.DB
		} else {
			p, err := tcpproxy.New(pu.Host)
			if err != nil {
				return nil, err
			}
			e.dbProxy, e.db = p, p
			pu.Host = p.Addr()
			e.pgURL = pu.String()
		}
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pg, err := store.OpenPostgres(octx, e.pgURL, store.PostgresOptions{Migrate: true, Logger: e.log})
	if err != nil {
		return nil, err
	}
	return store.TolerantLoad{Postgres: pg, Log: e.log}, nil
}

// keepOpen stops a restart from closing the run's memory store.
type keepOpen struct{ *store.Memory }

func (keepOpen) Close(context.Context) error { return nil }

// storedState returns what a gateway started now on the run's store would
// restore: the store is flushed first.
func (e *env) storedState(ctx context.Context) (model.State, settings.Layer, error) {
	e.gwMu.Lock()
	st := e.st
	e.gwMu.Unlock()
	if st == nil {
		return model.State{}, nil, errors.New("no in-process store")
	}
	time.Sleep(60 * time.Millisecond) // the gateway hands changes to the store every 20 ms
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.Flush(fctx); err != nil {
		return model.State{}, nil, err
	}
	s, err := st.Load(fctx)
	if err != nil {
		return s, nil, err
	}
	saved, err := st.LoadSettings(fctx)
	return s, saved, err
}

// fixedStore restores a given state and keeps nothing: a twin gateway that
// must not write to the run's database.
type fixedStore struct {
	state model.State
	saved settings.Layer
}

func (f fixedStore) Load(context.Context) (model.State, error)            { return f.state, nil }
func (fixedStore) Apply([]model.Change)                                   {}
func (fixedStore) Flush(context.Context) error                            { return nil }
func (fixedStore) Close(context.Context) error                            { return nil }
func (f fixedStore) LoadSettings(context.Context) (settings.Layer, error) { return f.saved, nil }
func (fixedStore) SaveSettings(context.Context, settings.Layer) error     { return nil }

// twin is a second in-process gateway restored from a state.
type twin struct {
	gw   *proxy.Gateway
	base string
	done chan struct{}
}

func (e *env) startTwin(ctx context.Context, s model.State, saved settings.Layer) (*twin, error) {
	cfg := *e.cfg
	cfg.Server.Listen = "127.0.0.1:0"
	gw, err := proxy.New(ctx, &cfg, proxy.Options{Logger: e.log, Store: fixedStore{s, saved}, Environ: e.opts.Environ, Seed: e.opts.Seed})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = gw.Close(ctx)
		return nil, err
	}
	t := &twin{gw: gw, base: "http://" + ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		_ = gw.Serve(ln)
	}()
	return t, nil
}

func (t *twin) stop(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = t.gw.Shutdown(sctx)
	<-t.done
}

// teardown stops everything the run started.
func (e *env) teardown(ctx context.Context) {
	_ = e.stopGateway(ctx)
	for _, u := range e.ups {
		u.close()
	}
	if e.dbProxy != nil {
		e.dbProxy.Close()
	}
	closeIdle(e.ctl)
}
