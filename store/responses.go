package store

import (
	"context"
	"database/sql"
	"errors"
	"time"
)

// StoredResponse is one Responses-API response the gateway keeps for
// previous_response_id and GET /v1/responses/{id}.
type StoredResponse struct {
	ID        string
	KeyID     string // the client key id that created it; only it reads it
	Turns     []byte // the conversation, as JSON chat messages
	Object    []byte // the response object as the client got it
	ExpiresAt time.Time
}

// PutResponse stores a response (an id already stored is left as it is:
// ids are random and never reused).
func (s *Postgres) PutResponse(ctx context.Context, r StoredResponse) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO stored_responses (id, key_id, turns, object, expires_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING`, r.ID, r.KeyID, r.Turns, r.Object, r.ExpiresAt)
	return err
}

// GetResponse reads a response stored by keyID that has not expired at
// now; false when there is none.
func (s *Postgres) GetResponse(ctx context.Context, id, keyID string, now time.Time) (StoredResponse, bool, error) {
	r := StoredResponse{ID: id, KeyID: keyID}
	err := s.db.QueryRowContext(ctx, `SELECT turns, object, expires_at FROM stored_responses
		WHERE id = $1 AND key_id = $2 AND expires_at > $3`, id, keyID, now).Scan(&r.Turns, &r.Object, &r.ExpiresAt)
	if errors.Is(err, sql.ErrNoRows) {
		return StoredResponse{}, false, nil
	}
	if err != nil {
		return StoredResponse{}, false, err
	}
	return r, true, nil
}

// PruneResponses deletes the responses expired before before.
func (s *Postgres) PruneResponses(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM stored_responses WHERE expires_at < $1`, before)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
