package proxy

import (
	"context"
	"github.com/breakwater-gw/breakwater/model/settings"

	"github.com/breakwater-gw/breakwater/model"
)

// StateStore is what the gateway needs from persistence (package store
// implements it for memory and Postgres; a nil Options.Store is a
// store.NewMemory). Apply must not block for I/O: the
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
	LoadSettings(ctx context.Context) (settings.Layer, error)
	// SaveSettings persists the saved settings layer.
	SaveSettings(ctx context.Context, saved settings.Layer) error
}
