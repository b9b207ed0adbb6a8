package proxy

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// responseDB is a store that keeps stored responses for every replica
// (package store's Postgres). With it, a response stored on one replica
// is continued or read on another; without it (the memory store) they
// live in this replica's memory only.
type responseDB interface {
	PutResponse(ctx context.Context, r store.StoredResponse) error
	GetResponse(ctx context.Context, id, keyID string, now time.Time) (store.StoredResponse, bool, error)
	PruneResponses(ctx context.Context, before time.Time) (int64, error)
}

// responseDBTimeout bounds a stored-response read or write: a database
// that does not answer costs a continuation its history (404), never a
// hung request.
const responseDBTimeout = 2 * time.Second

var responsePuts atomic.Uint64

// storeResponse keeps a response in memory and, when the store shares
// them, in the database (pruning expired rows every 64th write).
func (g *Gateway) storeResponse(id string, rec *respRecord) {
	now := g.now()
	g.surf.putResponse(id, rec, now)
	db, ok := g.store.(responseDB)
	if !ok {
		return
	}
	turns, err := json.Marshal(rec.turns)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), responseDBTimeout)
	defer cancel()
	if err := db.PutResponse(ctx, store.StoredResponse{ID: id, KeyID: rec.key, Turns: turns, Object: rec.object, ExpiresAt: rec.expires}); err != nil {
		g.log.Warn("storing a response for other replicas failed", "error", err)
		return
	}
	if responsePuts.Add(1)%64 == 0 {
		if _, err := db.PruneResponses(ctx, now); err != nil {
			g.log.Debug("pruning stored responses failed", "error", err)
		}
	}
}

// loadResponse finds a stored response: this replica's memory first, then
// the database.
func (g *Gateway) loadResponse(ctx context.Context, id, key string) (*respRecord, bool) {
	now := g.now()
	if rec, ok := g.surf.getResponse(id, key, now); ok {
		return rec, true
	}
	db, ok := g.store.(responseDB)
	if !ok {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, responseDBTimeout)
	defer cancel()
	row, found, err := db.GetResponse(ctx, id, key, now)
	if err != nil {
		g.log.Warn("reading a stored response failed", "error", err)
		return nil, false
	}
	if !found {
		return nil, false
	}
	rec := &respRecord{key: key, object: row.Object, expires: row.ExpiresAt}
	if err := json.Unmarshal(row.Turns, &rec.turns); err != nil {
		return nil, false
	}
	return rec, true
}
