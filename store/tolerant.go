package store

import (
	"context"
	"errors"
	"log/slog"

	"github.com/breakwater-gw/breakwater/model"
)

// TolerantLoad is a Postgres store whose Load keeps a partial load: rows
// the store skipped (a *LoadError) are logged, and the gateway starts on
// the rest instead of refusing to start.
type TolerantLoad struct {
	*Postgres
	Log *slog.Logger
}

func (t TolerantLoad) Load(ctx context.Context) (model.State, error) {
	s, err := t.Postgres.Load(ctx)
	var le *LoadError
	if errors.As(err, &le) {
		t.Log.Warn("some stored state was skipped", "err", err)
		return s, nil
	}
	return s, err
}
