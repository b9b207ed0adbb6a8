package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sample is one look at the gateway and the upstreams.
type Sample struct {
	AtMs int64 `json:"atMs"`
	// Providers: breaker state and counted failures per provider.
	Providers map[string]ProviderSample `json:"providers,omitempty"`
	// Conns: status per "provider/connection".
	Conns map[string]ConnSample `json:"conns,omitempty"`
	// Upstream: answered attempts per provider and outcome label ("200",
	// "503", "reset"...), cumulative, read before the health.
	Upstream map[string]map[string]int `json:"upstream,omitempty"`
	// HealthErr says why the health read failed ("" = it answered).
	HealthErr string `json:"healthErr,omitempty"`
	// HealthMs is how long the health read took.
	HealthMs float64 `json:"healthMs"`
	// AfterRestart marks the first sample after a gateway restart.
	AfterRestart bool `json:"afterRestart,omitempty"`
	Resources
}

// ProviderSample is one breaker.
type ProviderSample struct {
	State    string `json:"state"`
	Failures int    `json:"failures"`
	RetryMs  int64  `json:"retryAfterMs,omitempty"`
}

// ConnSample is one connection.
type ConnSample struct {
	Status     string `json:"status"`
	CooldownMs int64  `json:"cooldownMs,omitempty"`
	Backoff    int    `json:"backoff,omitempty"`
	Lockouts   int    `json:"lockouts,omitempty"`
	// LockoutMs is the shortest time left of its lockouts.
	LockoutMs int64 `json:"lockoutMs,omitempty"`
}

// Serving reports whether the connection can be selected (no cooldown, no
// lockout, not terminal).
func (c ConnSample) Serving() bool {
	return c.Status == "active" && c.CooldownMs == 0 && c.Lockouts == 0
}

// Resources is a process's goroutines, heap and open files.
type Resources struct {
	Goroutines int    `json:"goroutines"`
	HeapBytes  uint64 `json:"heapBytes"`
	FDs        int    `json:"fds"`
}

// health is the part of GET /api/monitoring/health the checks read.
type health struct {
	Providers map[string]struct {
		State        string `json:"state"`
		FailureCount int    `json:"failureCount"`
		RetryAfterMs int64  `json:"retryAfterMs"`
	} `json:"providers"`
	Connections []struct {
		Provider            string `json:"provider"`
		Connection          string `json:"connection"`
		Status              string `json:"status"`
		CooldownRemainingMs int64  `json:"cooldownRemainingMs"`
		BackoffLevel        int    `json:"backoffLevel"`
		Lockouts            []struct {
			Model       string `json:"model"`
			RemainingMs int64  `json:"remainingMs"`
		} `json:"lockouts"`
	} `json:"connections"`
}

func (h *health) into(s *Sample) {
	s.Providers = make(map[string]ProviderSample, len(h.Providers))
	for p, v := range h.Providers {
		s.Providers[p] = ProviderSample{State: v.State, Failures: v.FailureCount, RetryMs: v.RetryAfterMs}
	}
	s.Conns = make(map[string]ConnSample, len(h.Connections))
	for _, c := range h.Connections {
		cs := ConnSample{Status: c.Status, CooldownMs: c.CooldownRemainingMs, Backoff: c.BackoffLevel, Lockouts: len(c.Lockouts)}
		for i, l := range c.Lockouts {
			if i == 0 || l.RemainingMs < cs.LockoutMs {
				cs.LockoutMs = l.RemainingMs
			}
		}
		s.Conns[c.Provider+"/"+c.Connection] = cs
	}
}

// getJSON GETs url into v with a bearer key, within timeout.
func getJSON(ctx context.Context, c *http.Client, url, key string, timeout time.Duration, v any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, snippet(b))
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}

// readHealth reads the gateway's health into a sample.
func (e *env) readHealth(ctx context.Context, s *Sample) {
	var h health
	t0 := time.Now()
	err := getJSON(ctx, e.ctl, e.base()+"/api/monitoring/health", e.mgmtKey, healthTimeout, &h)
	s.HealthMs = float64(time.Since(t0).Microseconds()) / 1e3
	if err != nil {
		s.HealthErr = err.Error()
		return
	}
	h.into(s)
}

// healthTimeout bounds one health read; a slower answer is a violation of
// "the management API answers during chaos".
const healthTimeout = 3 * time.Second

// monitor samples the gateway every interval until stopped.
type monitor struct {
	e       *env
	start   time.Time
	every   time.Duration
	maxKeep int

	mu        sync.Mutex
	samples   []Sample
	paused    bool // during a gateway restart
	restarted bool // the next sample is the first after a restart
}

func (m *monitor) markRestart() {
	m.mu.Lock()
	m.restarted = true
	m.mu.Unlock()
}

func (m *monitor) run(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		m.sampleOnce(ctx)
		select {
		case <-t.C:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (m *monitor) pause(p bool) {
	m.mu.Lock()
	m.paused = p
	m.mu.Unlock()
}

func (m *monitor) sampleOnce(ctx context.Context) Sample {
	m.mu.Lock()
	paused := m.paused
	m.mu.Unlock()
	s := Sample{AtMs: time.Since(m.start).Milliseconds()}
	if paused {
		return s
	}
	s.Upstream = m.e.upstreamStats(ctx)
	m.e.readHealth(ctx, &s)
	s.Resources = m.e.resources(ctx)
	m.mu.Lock()
	s.AfterRestart, m.restarted = m.restarted, false
	if len(m.samples) < m.maxKeep {
		m.samples = append(m.samples, s)
	}
	m.mu.Unlock()
	return s
}

func (m *monitor) all() []Sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Sample(nil), m.samples...)
}

// selfResources reads this process's goroutines, live heap and open files.
func selfResources() Resources {
	s := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	r := Resources{FDs: countFDs()}
	if s[0].Value.Kind() == metrics.KindUint64 {
		r.Goroutines = int(s[0].Value.Uint64())
	} else {
		r.Goroutines = runtime.NumGoroutine()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		r.HeapBytes = s[1].Value.Uint64()
	}
	return r
}

// countFDs counts this process's open file descriptors (-1 where /proc is
// missing).
func countFDs() int {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return -1
	}
	return len(names) - 1 // the directory itself
}

// remoteResources reads a running gateway's process metrics from /metrics.
func (e *env) remoteResources(ctx context.Context) Resources {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base()+"/metrics", nil)
	if err != nil {
		return Resources{}
	}
	if e.mgmtKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.mgmtKey)
	}
	resp, err := e.ctl.Do(req)
	if err != nil {
		return Resources{}
	}
	defer resp.Body.Close()
	var r Resources
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_goroutines":
			r.Goroutines = int(v)
		case "go_memstats_heap_alloc_bytes":
			r.HeapBytes = uint64(v)
		case "process_open_fds":
			r.FDs = int(v)
		}
	}
	return r
}

// requestsCounted sums breakwater_requests_total from /metrics (the
// gateway's own count of client chat requests).
func (e *env) requestsCounted(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	if e.mgmtKey != "" {
		req.Header.Set("Authorization", "Bearer "+e.mgmtKey)
	}
	resp, err := e.ctl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %d", resp.StatusCode)
	}
	var n float64
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "breakwater_requests_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			n += v
		}
	}
	return int64(n), sc.Err()
}
