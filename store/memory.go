package store

import (
	"context"
	"github.com/breakwater-gw/breakwater/model/settings"
	"sync"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Memory is the embedded default store: the process is the only arbiter and
// everything dies with it. Load returns what Apply accepted, so a restore
// within one process (tests, the simulator) behaves like the Postgres store.
type Memory struct {
	m        *mirror
	leases   *memLeases
	log      logRing
	mu       sync.Mutex
	settings settings.Layer
	updates  chan struct{}
}

var _ Store = (*Memory)(nil)

// MemoryOptions tune a memory store; the zero value is fine.
type MemoryOptions struct {
	// Now is the lease clock (default time.Now).
	Now func() time.Time
}

// NewMemory returns an empty memory store.
func NewMemory(o MemoryOptions) *Memory {
	return &Memory{m: newMirror(false), leases: newMemLeases(o.Now), updates: make(chan struct{})}
}

func (s *Memory) Load(context.Context) (model.State, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.m.state(), nil
}

func (s *Memory) Apply(changes []model.Change) {
	if len(changes) == 0 {
		return
	}
	s.m.mu.Lock()
	s.m.apply(changes)
	s.m.mu.Unlock()
}

func (s *Memory) Flush(context.Context) error { return nil }
func (s *Memory) Close(context.Context) error { return nil }

func (s *Memory) SaveSettings(_ context.Context, l settings.Layer) error {
	b, err := layerJSON(l)
	if err != nil {
		return err
	}
	c, err := settings.ParseLayerJSON(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.settings = c
	s.mu.Unlock()
	return nil
}

func (s *Memory) LoadSettings(context.Context) (settings.Layer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settings == nil {
		return settings.Layer{}, nil
	}
	b, err := layerJSON(s.settings)
	if err != nil {
		return nil, err
	}
	return settings.ParseLayerJSON(b)
}

func (s *Memory) Leases() Leases { return s.leases }

func (s *Memory) LogAttempt(rec LogRecord) { s.log.add(sanitize(rec)) }

func (s *Memory) RecentAttempts(_ context.Context, q LogQuery) ([]LogRecord, error) {
	return s.log.query(q), nil
}

func (s *Memory) LastEgressIPs(_ context.Context, provider string, since time.Time) (map[string]string, error) {
	recs := s.log.query(LogQuery{Since: since, Provider: provider, Limit: logRingSize})
	out := map[string]string{}
	for _, r := range recs { // newest first: the first seen wins
		if _, ok := out[r.Connection]; !ok && r.EgressIP != "" {
			out[r.Connection] = r.EgressIP
		}
	}
	return out, nil
}

func (s *Memory) Updates() <-chan struct{} { return s.updates }

func (s *Memory) ApplyRemote(*model.Engine, model.Time) (RemoteResult, error) {
	return RemoteResult{}, nil
}

func (s *Memory) Health() Health { return Health{Kind: "memory", Up: true} }
