package replay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/sim"
)

// env is what a replay talks to: a gateway and, when known, its fault
// upstream.
type env struct {
	base      string // gateway base URL
	mgmtKey   string
	clientKey string
	ctl       *http.Client // management and control calls
	cli       *http.Client // client requests

	// in-process
	gw     *proxy.Gateway
	gwDone chan struct{}
	fs     *faults.Server
	fsSrv  *http.Server
	fsDone chan struct{}

	// upstream control URL (a faults.Server's /_faults and /_stats), "" =
	// unknown (target mode without -upstream)
	upstream string
	log      *slog.Logger
	// leases: the client keys of the lease actions (lease.go); nil when the
	// scenario has none or in target mode.
	leases *leaseKeys
	// counter counts upstream calls per replay request (upcount.go); nil
	// in target mode.
	counter *callCounter
	// requests holds the in-process gateway's own line on each finished
	// request (gwlog.go); nil against a target.
	requests *requestRecorder
	// prog follows each request between the fault upstream and the
	// gateway's model (quiet.go); nil against a target.
	prog *progress
	// uses0: each connection's use counter when the run started ("p/c" →
	// uses), target mode only. The management API cannot reset it, so a
	// target that served traffic before carries it; readState reports uses
	// since the start, as the simulator (and an in-process gateway) counts.
	uses0 map[string]uint64
}

func newClients() (ctl, cli *http.Client) {
	ctl = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	cli = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0, DisableCompression: true}}
	return ctl, cli
}

// randomKey returns a fresh management key for an in-process gateway.
func randomKey() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "bwreplay_" + hex.EncodeToString(b[:])
}

// gatewayConfig builds the gateway config of a scenario: every provider at
// the fault upstream (baseURL http://ADDR/<provider>/v1, each connection's
// API key its own id behind connKeyPrefix, which the call counter in front
// of the fault upstream strips, so the upstream tells them apart by id),
// with every topology key the scenario loader accepts (scenarios/load.go,
// admission.go, spendwall.go): admission caps and overrides, rate-limit
// protection, egress IPs, spend-wall opt-ins, combo modes. lk (nil when the
// scenario has no lease actions) adds the client keys leases need.
func gatewayConfig(sc *sim.Scenario, upstreamAddr, mgmtKey string, lk *leaseKeys) *proxy.Config {
	cfg := &proxy.Config{File: sc.File}
	cfg.Server.Listen = "127.0.0.1:0"
	cfg.Server.ManagementKey = mgmtKey
	cfg.Aliases = sc.Topology.Aliases
	cfg.Resilience = settings.Full(sc.Settings)
	for _, p := range sc.Topology.Providers {
		pc := proxy.ProviderConfig{ID: p.ID, Type: p.Type, Profile: p.Profile.String(), Models: p.Models,
			Strategy: p.Strategy.String(), PerModelQuota: p.PerModelQuota, DailyResetUTC: p.DailyResetUTC,
			QuotaFamilies: p.QuotaFamilies, MaxConcurrent: p.MaxConcurrent, ContextWindows: p.ContextWindows, Continuation: p.Continuation,
			BaseURL: "http://" + upstreamAddr + "/" + p.ID + "/v1"}
		for _, c := range p.Connections {
			cc := proxy.ConnectionConfig{ID: c.ID, APIKey: connKeyPrefix + c.ID, Priority: c.Priority,
				Weight: c.Weight, DisableCooling: c.DisableCooling, MaxConcurrent: c.MaxConcurrent,
				RateLimitProtection: c.RateLimitProtection, EgressIP: c.EgressIP,
				RateLimitOverrides: proxy.RateLimitOverrides{ModelConcurrency: c.ModelConcurrency, MaxWaitMs: proxy.Millis(c.MaxWaitMs),
					RPM: c.Limits.RPM, MinTimeMs: proxy.Millis(c.Limits.MinTimeMs)},
				SpendWall: proxy.SpendWallConfig{SlowLane: c.SpendWall.SlowLane, LimitReset: c.SpendWall.LimitReset}}
			if c.SpendWall.LimitReset {
				// The loader drops orgId (the simulator needs none); the
				// gateway requires one to build the reset URL, which the
				// replay's reset endpoint (limitreset.go) does not check.
				cc.SpendWall.OrgID = replayOrgID
			}
			pc.Connections = append(pc.Connections, cc)
		}
		cfg.Providers = append(cfg.Providers, pc)
	}
	for _, cb := range sc.Topology.Combos {
		cc := proxy.ComboConfig{ID: cb.ID, Strategy: cb.Strategy.String(), Mode: cb.Mode}
		for _, t := range cb.Targets {
			cc.Targets = append(cc.Targets, proxy.ComboTarget{Target: t.Provider + "/" + t.Model, Weight: t.Weight, Connection: t.Connection})
		}
		cfg.Combos = append(cfg.Combos, cc)
	}
	if lk != nil {
		cfg.ClientKeys = lk.clientKeys()
	}
	return cfg
}

// connKeyPrefix makes a connection's API key unlike any word of an error
// body: the gateway redacts its key from what it keeps of an upstream
// body, so a connection named "banned" with the key "banned" would hide
// the very word that classifies a ban.
const connKeyPrefix = "rk_"

// startLocal starts the fault upstream and the gateway of a scenario on
// loopback listeners. now is the gateway's clock.
func startLocal(ctx context.Context, sc *sim.Scenario, o *Options, now func() time.Time) (*env, error) {
	e := &env{log: cmpOr(o.Logger, discard()), mgmtKey: randomKey(), prog: newProgress()}
	e.prog.onBusy, e.prog.onBound = o.busy, o.bound
	e.ctl, e.cli = newClients()
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	upAddr, err := e.startUpstream(sc, o, now)
	if err != nil {
		return nil, err
	}
	if err := e.startGateway(ctx, sc, o, now, upAddr); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// startUpstream starts the scenario's fault upstream, counted and fed to
// the progress tracker, and returns its address.
func (e *env) startUpstream(sc *sim.Scenario, o *Options, now func() time.Time) (string, error) {
	// The fault upstream holds a `timeout` no longer than the run could
	// need it: the gateway gives up first.
	hold := time.Duration(sc.Settings.UpstreamTimeouts.AttemptMs)*time.Millisecond + 5*time.Second
	e.fs = faults.NewServer(nil, faults.Options{Seed: sim.DeriveSeed(sc.Seed, "faults"), MaxHold: hold, Now: now,
		Waiting: func(ctx context.Context, d int, length time.Duration) time.Time {
			due := now().Add(length)
			if o.waiting != nil {
				o.waiting(d)
			}
			n, ok := reqNum(ctx)
			if !ok {
				return time.Time{} // no replay request's: no bound holds the clock for it
			}
			e.prog.upstream(n, d, due)
			if d < 0 || o.WallClock {
				return time.Time{}
			}
			// A replay request's wait ends on the replay's clock, at the
			// instant the progress tracker bounds that clock by.
			return due
		}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("fault upstream listener: %w", err)
	}
	var up http.Handler = e.fs
	if h := newLimitResetHandler(sc, e.fs, now); h != nil {
		up = h
	}
	e.counter = newCallCounter(up)
	e.counter.prog = e.prog
	up = e.counter
	e.fsSrv = &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	e.fsDone = make(chan struct{})
	go func() { defer close(e.fsDone); _ = e.fsSrv.Serve(ln) }()
	e.upstream = "http://" + ln.Addr().String()

	return ln.Addr().String(), nil
}

// startGateway starts the scenario's gateway against the fault upstream at
// upAddr, its log, waits and deadlines fed to the progress tracker.
func (e *env) startGateway(ctx context.Context, sc *sim.Scenario, o *Options, now func() time.Time, upAddr string) error {
	e.leases = newLeaseKeys(sc)
	if e.leases != nil {
		e.clientKey = e.leases.client
	}
	cfg := gatewayConfig(sc, upAddr, e.mgmtKey, e.leases)
	e.requests = newRequestRecorder(e.log.Handler(), e.prog)
	gw, err := proxy.New(ctx, cfg, proxy.Options{Logger: slog.New(e.requests),
		Seed: sim.DeriveSeed(sc.Seed, "engine"), Now: now,
		Waiting: func(d int) {
			if o.waiting != nil {
				o.waiting(d)
			}
			e.prog.gatewayWaiting(d)
		},
		Deadlines: func(id string, at time.Time, ev proxy.DeadlineEvent) {
			if n, ok := replayNum(id); ok {
				e.prog.deadline(n, at, ev)
			}
		}})
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = gw.Close(ctx)
		return fmt.Errorf("gateway listener: %w", err)
	}
	e.gw, e.gwDone = gw, make(chan struct{})
	go func() { defer close(e.gwDone); _ = gw.Serve(gln) }()
	e.base = "http://" + gln.Addr().String()
	return nil
}

// attachTarget checks an operator's gateway (and fault upstream) answers.
func attachTarget(ctx context.Context, o *Options) (*env, error) {
	e := &env{log: o.Logger, mgmtKey: o.ManagementKey, clientKey: o.ClientKey}
	e.ctl, e.cli = newClients()
	u, err := url.Parse(o.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-target wants http(s)://HOST:PORT, got %q", o.Target)
	}
	e.base = strings.TrimRight(u.String(), "/")
	if err := e.call(ctx, http.MethodGet, "/healthz", "", nil, nil); err != nil {
		return nil, fmt.Errorf("the target gateway does not answer GET /healthz: %w", err)
	}
	if o.Upstream != "" {
		uu, err := url.Parse(o.Upstream)
		if err != nil || (uu.Scheme != "http" && uu.Scheme != "https") || uu.Host == "" {
			return nil, fmt.Errorf("-upstream wants http://HOST:PORT of a `breakwater upstream`, got %q", o.Upstream)
		}
		e.upstream = uu.Scheme + "://" + uu.Host
		if err := e.upstreamCall(ctx, http.MethodGet, "/_faults", nil, nil); err != nil {
			return nil, fmt.Errorf("-upstream %s does not look like a `breakwater upstream` (GET /_faults: %w)", o.Upstream, err)
		}
	}
	return e, nil
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.gw != nil {
		_ = e.gw.Shutdown(ctx)
		<-e.gwDone
		e.gw = nil
	}
	if e.fsSrv != nil {
		_ = e.fsSrv.Close()
		<-e.fsDone
		e.fsSrv = nil
	}
	for _, c := range []*http.Client{e.ctl, e.cli} {
		if c != nil {
			c.CloseIdleConnections()
		}
	}
}

// apiError is a management call that did not answer 2xx.
type apiError struct {
	Method, Path string
	Status       int
	Body         string
}

func (a *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", a.Method, a.Path, a.Status, a.Body)
}

// call makes one management call (JSON in, JSON out).
func (e *env) call(ctx context.Context, method, path, key string, in, out any) error {
	return e.do(ctx, e.base+path, method, path, key, in, out)
}

// mgmt makes a management-authenticated call.
func (e *env) mgmt(ctx context.Context, method, path string, in, out any) error {
	return e.call(ctx, method, path, e.mgmtKey, in, out)
}

func (e *env) upstreamCall(ctx context.Context, method, path string, in, out any) error {
	return e.do(ctx, e.upstream+path, method, path, "", in, out)
}

func (e *env) do(ctx context.Context, u, method, path, key string, in, out any) error {
	return e.doHeaders(ctx, u, method, path, key, nil, in, out)
}

// doHeaders is do with extra request headers.
func (e *env) doHeaders(ctx context.Context, u, method, path, key string, hdr http.Header, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := e.ctl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return &apiError{Method: method, Path: path, Status: resp.StatusCode, Body: msg}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return nil
}

// health is GET /api/monitoring/health.
type health struct {
	Providers map[string]struct {
		State        model.BreakerState `json:"state"`
		FailureCount int                `json:"failureCount"`
		RetryAfterMs int64              `json:"retryAfterMs"`
	} `json:"providers"`
	Connections []model.ConnectionView `json:"connections"`
}

// readState reads the gateway's state in one call (breakers, connections
// and their lockouts), as a StateObservation ordered like the simulator's.
func (e *env) readState(ctx context.Context, topo *model.Topology) (sim.StateObservation, error) {
	var h health
	if err := e.mgmt(ctx, http.MethodGet, "/api/monitoring/health", nil, &h); err != nil {
		return sim.StateObservation{}, err
	}
	var st sim.StateObservation
	for _, p := range topo.Providers {
		if v, ok := h.Providers[p.ID]; ok {
			st.Providers = append(st.Providers, model.ProviderView{Provider: p.ID, State: v.State, FailureCount: v.FailureCount, RetryAfterMs: v.RetryAfterMs})
		}
	}
	st.Connections = h.Connections
	for i := range st.Connections {
		c := &st.Connections[i]
		c.Uses -= min(c.Uses, e.uses0[c.Provider+"/"+c.Connection])
	}
	return st, nil
}

// installRules puts the (scaled) rules on the fault upstream and restarts
// its rule clock and counters: the scenario starts now.
func (e *env) installRules(ctx context.Context, rules []faults.Rule) error {
	if e.fs != nil {
		e.fs.SetRules(rules, false)
		return nil
	}
	if e.upstream == "" {
		return nil
	}
	if err := e.upstreamCall(ctx, http.MethodPut, "/_faults", map[string]any{"rules": faults.EncodeRules(rules)}, nil); err != nil {
		return err
	}
	return e.upstreamCall(ctx, http.MethodDelete, "/_stats", nil, nil)
}

// upstreamStats reads the fault upstream's attempt counters (nil when the
// upstream is unknown).
func (e *env) upstreamStats(ctx context.Context) (*faults.Stats, error) {
	if e.fs != nil {
		st := e.fs.Stats()
		return &st, nil
	}
	if e.upstream == "" {
		return nil, errors.New("no fault upstream known (give -upstream)")
	}
	var st faults.Stats
	if err := e.upstreamCall(ctx, http.MethodGet, "/_stats", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func cmpOr(l, def *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return def
}
