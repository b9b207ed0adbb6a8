package proxy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/breakwater-gw/breakwater/model/settings"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/breakwater-gw/breakwater/store"
)

// Options tune a Gateway beyond its config file.
type Options struct {
	Logger *slog.Logger
	// Store persists resilience state; nil = a store.NewMemory.
	Store StateStore
	// Environ feeds the env settings layer (os.Environ()); nil = none.
	Environ []string
	// Now is the wall clock (tests may shift it); nil = time.Now.
	Now func() time.Time
	// Seed seeds the model's randomness (random / weighted / p2c); 0 = random.
	Seed uint64
	// Waiting, when set, is told +1 as the gateway starts a deliberate
	// wait (a cooldown wait, a place in an admission queue, a paced
	// dispatch slot) and -1 as it ends. A shell that drives Now (the
	// replay) lets its clock run while something waits on purpose and
	// stand still while the gateway only works, as the simulator does.
	Waiting func(delta int)
	// ReadHeaderTimeout bounds the arrival of a client's request head
	// (the client is closed then); 0 = 10 s.
	ReadHeaderTimeout time.Duration
	// Deadlines, when set, is told of every timer the gateway arms on an
	// upstream attempt (the attempt's bound and its header and
	// first-content budgets, the stream watchdogs) and of its deliberate
	// waits (a cooldown wait, an admission queue's budget, a paced slot),
	// with the request's log id and the instant it is due on Now's clock:
	// DeadlineArmed, then DeadlineDisarmed (the attempt or the wait ended
	// first, or progress moved it) or DeadlineFired (it cut the attempt,
	// or the wait ran out: the request's next flow step is owed). A shell
	// that drives Now (the replay) reads state at an instant only once
	// every deadline due by then has fired, as the simulator's timers
	// have. The timers are real ones; with the option set, one that fires
	// before Now has reached its instant waits for it (as the stream
	// watchdogs, which read Now, always do). nil costs one nil check per
	// arm or wait.
	Deadlines func(id string, at time.Time, ev DeadlineEvent)
}

// Gateway is the running gateway: the engine behind its mutex, the store
// pump, the upstream client, admission, affinity and the HTTP surfaces.
type Gateway struct {
	cfg *Config
	log *slog.Logger
	now func() time.Time
	// waiting is Options.Waiting, or a no-op.
	waiting func(delta int)
	// deadlines is Options.Deadlines (nil = unset; proxy/deadlines.go).
	deadlines func(id string, at time.Time, ev DeadlineEvent)

	// mu guards eng and pending. Held only for model calls, never for I/O.
	mu      sync.Mutex
	eng     *model.Engine
	pending []model.Change
	spare   []model.Change // the pump's second buffer (only the pump touches it)
	kick    chan struct{}  // pending reached pumpBatch: hand it over now
	wake    chan struct{}  // pending was empty and got a record: start the pump's wait

	store StateStore
	lower []settings.NamedLayer
	setMu sync.Mutex // serialises PATCH /api/resilience
	saved settings.Layer
	rt    atomic.Pointer[runtimeSettings]

	provMu    sync.RWMutex
	provs     map[string]*provRuntime
	provOrder []string

	// cfg is the config at start; keys, combos and the management key
	// live in the view a reload replaces, which is what requests read
	// (g.view(), g.conf(): proxy/reload.go).
	ops    *opsState // reload, probes, operator metrics (proxy/ops.go)
	leases *leaseMgr // exclusive session leases (docs/leases.md)

	gate      *gate
	pace      *pacers
	met       *gatewayMetrics
	transport *http.Transport // management probes and spend-wall calls
	client    *http.Client    // over transport, redirects not followed

	handler http.Handler
	srv     *http.Server
	// base is every served request's parent context: cutAll ends them all
	// with errShutdown when the drain runs out of time.
	base   context.Context
	cutAll context.CancelCauseFunc
	// bodyReadTimeout bounds the read of one request body (set before
	// Serve; tests shorten it).
	bodyReadTimeout time.Duration
	// clientWriteGrace is what a client that stopped reading gets to take
	// a cut attempt's last bytes (request.go; tests shorten it).
	clientWriteGrace time.Duration

	draining atomic.Bool
	drainCh  chan struct{} // closed when Shutdown begins: cooldown waits that would outlast the drain end
	drainBy  atomic.Int64  // the drain's deadline (Unix ns; 0 = none), set before drainCh closes
	drainMu  sync.Once
	active   atomic.Int64 // chat requests in their handler (Shutdown waits for them)
	stopPump chan struct{}
	pumpDone chan struct{}
	closed   sync.Once

	// surf is what the non-chat surfaces keep (proxy/surface_responses.go).
	surf surfaceState
}

type runtimeSettings struct {
	s   model.Settings
	src settings.Sources
}

type provRuntime struct {
	cfg       ProviderConfig
	chatReq   *http.Request // the chat URL parsed once: the template newPostRequest copies
	chatErr   error         // why the chat URL did not parse (every attempt reports it)
	modelsURL string
	conns     map[string]*connRuntime
	wire      wireAdapter // native wire format (anthropic, gemini); nil = OpenAI-compatible
	egress    bool        // egress-bucketed (docs/classification.md): learn each attempt's egress IP
	plain     bool        // an http:// upstream: its attempts watch for bytes outside answers (transport.go)
	pool      *upstreamPool
}

type connRuntime struct {
	cfg      ConnectionConfig
	provider string
	auth     string   // "Bearer <key>", never logged
	authHdr  []string // auth as a header value (shared by every request)
	// The head of an upstream chat request that adds nothing of its own
	// (setUpstreamHead), JSON and stream, shared by every such request:
	// never modified once built.
	headJSON, headSSE http.Header
	met               connMetrics
	// limiter is the connection's pacer limiter once an attempt looked
	// it up (pacers.limiterIn; pacers.mu guards it).
	limiter *model.Limiter
}

// is reports whether cr is provider's connection conn.
func (cr *connRuntime) is(provider, conn string) bool {
	return cr != nil && cr.provider == provider && cr.cfg.ID == conn
}

type clientKey struct {
	id      string
	digest  [32]byte
	allowed []model.ConnRef
}

// New builds a gateway from a validated config: it resolves the settings
// (file < env < saved), restores the stored state and prepares the
// handlers. It does not listen; see Serve.
func New(ctx context.Context, cfg *Config, opts Options) (*Gateway, error) {
	opts.fillDefaults()
	if err := cfg.accessProblem(); err != nil { // also checked by ParseConfig; a Config built in code gets it here
		return nil, err
	}
	topo, err := cfg.Topology()
	if err != nil {
		return nil, err
	}
	lower, err := cfg.SettingsLayers(opts.Environ)
	if err != nil {
		return nil, err
	}
	saved, err := opts.Store.LoadSettings(ctx)
	if err != nil {
		return nil, fmt.Errorf("load saved settings: %w", err)
	}
	layers := append(append([]settings.NamedLayer(nil), lower...), settings.NamedLayer{Name: "saved", Tree: saved})
	settings, src, err := settings.Resolve(layers...)
	if err != nil {
		return nil, cfg.settingsError(err)
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	eng, err := model.NewEngine(topo, settings, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
	if err != nil {
		return nil, err
	}
	waiting := opts.Waiting
	if waiting == nil {
		waiting = func(int) {}
	}
	g := &Gateway{cfg: cfg, log: opts.Logger, now: opts.Now, eng: eng, kick: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		store: opts.Store, lower: lower, saved: saved,
		provs: map[string]*provRuntime{}, gate: newGate(waiting), pace: newPacers(opts.Now, waiting), waiting: waiting, deadlines: opts.Deadlines,
		stopPump: make(chan struct{}), pumpDone: make(chan struct{})}
	g.rt.Store(&runtimeSettings{s: settings, src: src})
	g.logSavedOverrides() // proxy/ops_settings.go
	g.ops = newOps(g, opts.Environ)
	for _, p := range cfg.Providers {
		g.provs[p.ID] = newProvRuntime(p, newUpstreamPool(g, p.ID, idleConnsFor(p, settings.RequestQueue.GlobalMaxConcurrent)))
		g.provOrder = append(g.provOrder, p.ID)
	}
	g.gate.configure(settings.RequestQueue.GlobalMaxConcurrent, cfg.Providers)
	if err := g.restoreState(ctx, topo, &settings); err != nil {
		return nil, err
	}
	g.restoreEgress(ctx) // docs/classification.md: last known egress IPs (proxy/egress.go)
	g.leases = newLeaseMgr(ctx, g)
	g.transport = newTransport(g)
	g.client = &http.Client{Transport: sendOnceTransport{g.transport}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	g.met = newMetrics(g)
	g.handler = g.routes()
	g.base, g.cutAll = context.WithCancelCause(context.Background())
	g.bodyReadTimeout = bodyReadTimeout
	g.clientWriteGrace = clientWriteGrace
	g.srv = g.newServer(cmp.Or(opts.ReadHeaderTimeout, readHeaderTimeout))
	g.drainCh = make(chan struct{})
	go g.pump()
	return g, nil
}

// fillDefaults sets what an embedder may leave out: the default logger,
// the wall clock and an in-memory store.
func (opts *Options) fillDefaults() {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Store == nil {
		opts.Store = store.NewMemory(store.MemoryOptions{Now: opts.Now})
	}
}

// restoreState loads the stored resilience state into the engine (what
// the config no longer names is skipped with a warning) and gives the
// engine the key this process holds for each connection.
func (g *Gateway) restoreState(ctx context.Context, topo model.Topology, s *model.Settings) error {
	st, err := g.store.Load(ctx)
	if err != nil {
		return fmt.Errorf("load resilience state: %w", err)
	}
	profiles := map[string]model.Profile{}
	for _, p := range topo.Providers {
		profiles[p.ID] = p.Profile
	}
	if err := g.eng.Restore(st.Durable(s, func(p string) model.Profile { return profiles[p] })); err != nil {
		var re *model.RestoreError
		if !errors.As(err, &re) {
			return err
		}
		g.log.Warn("stored state names things the config no longer has; skipped them", "skipped", re.Skipped)
	}

	// The key this process holds for each connection: one the shared state
	// lists as retired while terminal (replaced at runtime with PUT
	// /api/providers, here before a restart or on another replica) is
	// terminal for this process.
	g.lock()
	for _, p := range g.cfg.Providers {
		for _, c := range p.Connections {
			_, _ = g.eng.SetCredential(g.modelNow(), model.ConnRef{Provider: p.ID, Connection: c.ID}, credentialFingerprint(c.APIKey))
		}
	}
	g.unlock()
	return nil
}

// newServer is the client listener's http.Server, with the gateway's
// bounds on heads, bodies and idle connections.
func (g *Gateway) newServer(readHeaderTimeout time.Duration) *http.Server {
	return &http.Server{
		Handler:           g.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		// The whole request, head and body, from its first byte: the
		// body's bound (net/http sets it once the head is in and clears it
		// once the body has been read to its end), so readBody sets no
		// deadline of its own (serverBoundsBody), and the bound of a
		// handler that reads no body itself (the management API, a 404
		// whose unread body net/http drains).
		ReadTimeout:    g.bodyReadTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		IdleTimeout:    idleTimeout,
		BaseContext:    func(net.Listener) context.Context { return g.base },
		// net/http reports what it refuses or recovers (a handler's panic)
		// here; a request's own outcome is logged by the handler.
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}

// newProvRuntime prepares a provider's runtime config; pool is its
// upstream connections (kept when PUT /api/providers replaces the rest).
func newProvRuntime(p ProviderConfig, pool *upstreamPool) *provRuntime {
	base := strings.TrimRight(p.BaseURL, "/")
	pr := &provRuntime{cfg: p, modelsURL: base + "/models", conns: map[string]*connRuntime{},
		egress: model.EgressBucketed(p.Type), pool: pool, plain: strings.HasPrefix(base, "http://")}
	if pr.wire = newWireAdapter(p.Type, base); pr.wire != nil {
		pr.modelsURL = pr.wire.modelsURL()
	} else {
		pr.chatReq, pr.chatErr = http.NewRequest(http.MethodPost, base+"/chat/completions", nil)
	}
	for _, c := range p.Connections {
		cr := &connRuntime{cfg: c, provider: p.ID}
		if c.APIKey != "" && pr.wire == nil { // a wire adapter sets its own credential headers
			cr.auth = "Bearer " + c.APIKey
			cr.authHdr = []string{cr.auth}[:1:1]
		}
		cr.headJSON, cr.headSSE = make(http.Header, 4), make(http.Header, 4)
		setUpstreamHead(cr.headJSON, cr, false)
		setUpstreamHead(cr.headSSE, cr, true)
		pr.conns[c.ID] = cr
	}
	return pr
}

// head is the shared head of conn's upstream chat requests (headJSON,
// headSSE).
func (cr *connRuntime) head(stream bool) http.Header {
	if stream {
		return cr.headSSE
	}
	return cr.headJSON
}

// dialUpstream opens an upstream connection under the connect timeout
// (upstreamTimeouts.connectMs, read at dial time so PATCH applies).
func (g *Gateway) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	if c := clockOf(ctx); c != nil {
		// Connecting runs under connectMs alone; the header budget starts
		// when the connection is up (it ran from before the dial, so a
		// slow connect was charged to responseHeaderMs and reported as a
		// header timeout).
		defer c.progress(c.suspend())
	}
	d := net.Dialer{Timeout: g.settings().UpstreamTimeouts.ConnectMs.Duration(), KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &upConn{Conn: c}, nil // the reuse guard's view of it (transport.go)
}

// newTransport is the Transport of the gateway's calls outside an attempt
// (the models probe, connection tests, spend-wall resets, token counts,
// through g.client and sendOnceTransport): few, so few idle connections.
// Attempts go through their provider's Transport (transport.go).
func newTransport(g *Gateway) *http.Transport {
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            g.dialUpstream,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		DisableCompression:     true, // pass bodies through as they are
	}
}

// Handler returns the gateway's HTTP handler (client API, management API,
// metrics).
func (g *Gateway) Handler() http.Handler { return g.handler }

// Engine calls: lock, call, unlock (which drains the change records).

func (g *Gateway) lock() { g.mu.Lock() }

func (g *Gateway) unlock() {
	if ch := g.eng.Changes(); len(ch) > 0 {
		first := len(g.pending) == 0
		g.pending = append(g.pending, ch...)
		if first {
			signal(g.wake)
		}
		if len(g.pending) >= pumpBatch {
			signal(g.kick)
		}
	}
	g.mu.Unlock()
}

// The pump hands change records to the store pumpEvery after the first of
// them arrived, or at once when pumpBatch records wait: no per-request
// wake-up on the hot path, and none at all while nothing changes (a
// ticker would wake an idle gateway fifty times a second).
const (
	pumpEvery = 20 * time.Millisecond
	pumpBatch = 4096
)

func (g *Gateway) modelNow() model.Time { return model.TimeOf(g.now()) }

func (g *Gateway) settings() *model.Settings { return &g.rt.Load().s }

// pump hands drained change records to the store, off the request path.
func (g *Gateway) pump() {
	defer close(g.pumpDone)
	t := time.NewTimer(pumpEvery)
	t.Stop()
	defer t.Stop()
	armed := false
	remote := g.updates()
	for {
		select {
		case <-remote:
			g.applyRemote()
		case <-g.wake:
			if !armed {
				t.Reset(pumpEvery)
				armed = true
			}
		case <-g.kick:
			g.drainToStore()
		case <-t.C:
			armed = false
			g.drainToStore()
		case <-g.stopPump:
			g.drainToStore()
			return
		}
	}
}

// signal wakes c's receiver without blocking; one signal waits at most.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (g *Gateway) drainToStore() {
	g.mu.Lock()
	batch := g.pending
	if len(batch) == 0 {
		g.mu.Unlock()
		return
	}
	g.pending = g.spare[:0]
	g.mu.Unlock()
	g.store.Apply(batch) // the store copies what it keeps
	clear(batch)         // drop references held by the records
	g.spare = batch[:0]
}

// provider returns the runtime config of a provider (nil when unknown).
func (g *Gateway) provider(id string) *provRuntime {
	g.provMu.RLock()
	p := g.provs[id]
	g.provMu.RUnlock()
	return p
}

// authClient checks the client key (constant-time) and returns it; with no
// client keys configured the gateway is open (loopback only).
func (g *Gateway) authClient(r *http.Request) (*clientKey, bool) {
	keys := g.view().clientKeys // the view a reload replaces (proxy/reload.go)
	if len(keys) == 0 {
		return nil, true
	}
	tok, ok := clientToken(r)
	if !ok {
		return nil, false
	}
	d := sha256.Sum256([]byte(tok))
	var found *clientKey
	for i := range keys {
		if subtle.ConstantTimeCompare(d[:], keys[i].digest[:]) == 1 {
			found = &keys[i]
		}
	}
	return found, found != nil
}

func (g *Gateway) authManagement(r *http.Request) bool {
	v := g.view()
	if v.mgmtOpen {
		return true
	}
	tok, ok := bearer(r)
	if !ok {
		return false
	}
	d := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(d[:], v.mgmtKey[:]) == 1
}

func bearer(r *http.Request) (string, bool) {
	h := headerValue(r.Header, "Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	t := strings.TrimSpace(h[7:])
	return t, t != ""
}

// The client edge's bounds (net/http's Server does the framing).
const (
	// readHeaderTimeout bounds the arrival of a request head: a client
	// that trickles one is closed then.
	readHeaderTimeout = 10 * time.Second
	// maxHeaderBytes bounds a request head (431 past it).
	maxHeaderBytes = 64 << 10
	// idleTimeout ends a kept-alive client connection with no next request.
	idleTimeout = 120 * time.Second
	// bodyReadTimeout bounds the read of a request, head and body, from
	// its first byte (408 past it): a body declared large and sent slowly
	// holds a connection no longer than this.
	bodyReadTimeout = 60 * time.Second
	// clientWriteGrace is how long a client gets to take what is pending
	// once an attempt was cut: a client that reads nothing holds its slot
	// no longer than this past the cut.
	clientWriteGrace = 5 * time.Second
)

// Serve serves the gateway on l until Shutdown; like http.Server.Serve it
// may run on several listeners at once.
func (g *Gateway) Serve(l net.Listener) error {
	err := g.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ErrDrainCut is in Shutdown's error when the drain ran out of time and the
// requests still in flight were cut (their outcomes are still recorded and
// flushed).
var ErrDrainCut = errors.New("the shutdown drain ran out of time; in-flight requests were cut")

// finalFlushTimeout bounds the store flush after the drain, which gets its
// own time: the drain may have spent the caller's.
const finalFlushTimeout = 10 * time.Second

// Shutdown stops accepting requests, waits for in-flight ones (streams
// included) until ctx ends, then drains the change records and flushes and
// closes the store. When ctx ends first, the requests still in flight are
// cut (a stream gets its error event where it can) and their outcomes are
// recorded before the final flush, which has finalFlushTimeout of its own:
// nothing the gateway learned is lost because the drain ran out of time.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.draining.Store(true)
	g.drainMu.Do(func() {
		if dl, ok := ctx.Deadline(); ok {
			g.drainBy.Store(dl.UnixNano())
		}
		close(g.drainCh) // a cooldown wait that would outlast the drain ends now
	})
	var err error
	e := g.srv.Shutdown(ctx)
	// The final flush's own time starts when the drain is over: made
	// before it, a drain of 10 s or more left the flush none, and the
	// state and request-log records of the drained requests were lost.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
	defer cancel()
	if e != nil {
		err = fmt.Errorf("%w: %w", ErrDrainCut, e)
		// Cut what is still in flight while the connections are open, so
		// each request is answered — 503 gateway_shutting_down, or a
		// committed stream's error event — rather than reset; then close.
		g.cutAll(errShutdown)
		for cut := time.Now(); g.active.Load() > 0 && time.Since(cut) < cutGrace; {
			time.Sleep(5 * time.Millisecond)
		}
		g.srv.Close() // closes every connection: anything left sees it and returns
		for g.active.Load() > 0 && fctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return errors.Join(err, g.Close(fctx))
}

// credentialFingerprint is a one-way fingerprint of a connection's key, for
// the model to tell which key this process holds and which keys a state
// lists as retired (model.Conn.Retired, stored with the state): 16 hex
// digits of SHA-256, which cannot be turned back into a key. "" for a
// connection without one.
func credentialFingerprint(key string) string {
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("breakwater-credential\x00" + key))
	return hex.EncodeToString(sum[:8])
}

// cutGrace is how long requests cut at the end of a drain get to write
// their answer before the connections close.
const cutGrace = time.Second

// errShutdown is the cause of a request cut by Shutdown.
var errShutdown = errors.New("the gateway is shutting down")

// shuttingDown is the typed error of a request the shutdown cut:
// neutral, and worth retrying at once (on another replica).
func shuttingDown() *model.Error {
	return &model.Error{Code: model.CodeShuttingDown, RetryAfterMs: 1000,
		Message: "the gateway is shutting down and cut this request; retry it"}
}

// Close stops the change pump and flushes and closes the store. Shutdown
// calls it; tests that only use Handler call it directly.
func (g *Gateway) Close(ctx context.Context) error {
	var err error
	g.closed.Do(func() {
		close(g.stopPump)
		<-g.pumpDone
		g.drainToStore()
		if e := g.store.Flush(ctx); e != nil {
			err = e
		}
		if e := g.store.Close(ctx); e != nil {
			err = e // the store's own account: it says what could not be written
		}
		g.transport.CloseIdleConnections()
		g.provMu.RLock()
		for _, p := range g.provs {
			p.pool.closeIdle()
		}
		g.provMu.RUnlock()
	})
	return err
}
