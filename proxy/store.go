package proxy

import (
	"context"
	"sync"

	"github.com/breakwater-gw/breakwater/model"
)

// StateStore is what the gateway needs from persistence (package store
// implements it for memory and Postgres). Apply must not block for I/O: the
// gateway calls it from its change pump, off the request path, and relies on
// Flush to make everything applied durable.
type StateStore interface {
	// Load returns the persisted resilience state (empty on first start).
	Load(ctx context.Context) (model.State, error)
	// Apply queues change records (last one per entity wins). It must copy
	// what it keeps: the gateway reuses the slice.
	Apply(changes []model.Change)
	// Flush makes every applied change durable.
	Flush(ctx context.Context) error
	// Close flushes and releases the store.
	Close(ctx context.Context) error
	// LoadSettings returns the saved settings layer (PATCH /api/resilience).
	LoadSettings(ctx context.Context) (model.Layer, error)
	// SaveSettings persists the saved settings layer.
	SaveSettings(ctx context.Context, saved model.Layer) error
}

// OpenStore opens the store for a non-memory store.url. The command wires
// package store in here; when nil, a postgres:// URL is refused at start.
var OpenStore func(ctx context.Context, url string) (StateStore, error)

// MemoryStore keeps state in the process: it dies with it.
type MemoryStore struct {
	mu      sync.Mutex
	state   model.State
	saved   model.Layer
	applied int
}

// NewMemoryStore returns an empty memory store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// Load returns a copy of the state folded from every applied change.
func (m *MemoryStore) Load(context.Context) (model.State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s model.State
	s.Apply(nil)
	s.Providers = append(s.Providers, m.state.Providers...)
	s.Connections = append(s.Connections, m.state.Connections...)
	s.Combos = append(s.Combos, m.state.Combos...)
	return s, nil
}

// Apply folds change records into the stored state.
func (m *MemoryStore) Apply(changes []model.Change) {
	m.mu.Lock()
	m.state.Apply(changes)
	m.applied += len(changes)
	m.mu.Unlock()
}

// Applied reports how many change records were applied (for tests).
func (m *MemoryStore) Applied() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applied
}

// Flush is a no-op: memory is as durable as it gets.
func (m *MemoryStore) Flush(context.Context) error { return nil }

// Close is a no-op.
func (m *MemoryStore) Close(context.Context) error { return nil }

// LoadSettings returns the saved layer.
func (m *MemoryStore) LoadSettings(context.Context) (model.Layer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saved, nil
}

// SaveSettings replaces the saved layer.
func (m *MemoryStore) SaveSettings(_ context.Context, l model.Layer) error {
	m.mu.Lock()
	m.saved = l
	m.mu.Unlock()
	return nil
}
