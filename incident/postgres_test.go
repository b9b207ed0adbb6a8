package incident

import (
	"context"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
	"github.com/breakwater-gw/breakwater/store"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestReadPostgresWindow: the database source reads exactly what a
// Postgres store wrote to its request log (docs/store.md#request-log) for [from, to), in
// time order, across keyset pages, and exports it. Without a database it
// skips locally and FAILS under CI=true (pgtest).
func TestReadPostgresWindow(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := store.OpenPostgres(ctx, url, store.PostgresOptions{NoSubscribe: true})
	if err != nil {
		t.Fatal(err)
	}
	// More than one 5000-row page, written out of order, plus records just
	// outside the window on both sides.
	const n = 6001
	pg.LogAttempt(store.LogRecord{Time: at(-time.Millisecond), Provider: "p", Connection: "k", Model: "m", Status: 200})
	pg.LogAttempt(store.LogRecord{Time: at(time.Hour), Provider: "p", Connection: "k", Model: "m", Status: 200})
	for i := n - 1; i >= 0; i-- {
		r := store.LogRecord{Time: at(time.Duration(i) * 100 * time.Millisecond), RequestID: "r", Provider: "p", Connection: "k", Model: "m", Status: 200, LatencyMs: int64(i)}
		if i%3 == 0 {
			r.Status, r.ErrorType, r.Headers, r.ErrorBody = 429, "response", map[string]string{"retry-after": "2"}, `{"error":"slow"}`
		}
		pg.LogAttempt(r)
	}
	if err := pg.Close(ctx); err != nil { // drains the request log
		t.Fatal(err)
	}
	recs, err := ReadPostgres(ctx, url, t0, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("read %d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if !r.Time.Equal(at(time.Duration(i)*100*time.Millisecond)) || r.LatencyMs != int64(i) {
			t.Fatalf("record %d out of order: %+v", i, r)
		}
		if i%3 == 0 && (r.Status != 429 || r.Headers["retry-after"] != "2" || r.ErrorBody != `{"error":"slow"}`) {
			t.Fatalf("record %d lost fields: %+v", i, r)
		}
	}
	out, sum, err := Export(recs, Options{From: t0, To: at(time.Hour), Source: "postgres"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check("pg.yaml", out); err != nil {
		t.Fatal(err)
	}
	if sum.Records != n || sum.Requests != 1 {
		t.Errorf("summary %+v", sum)
	}
	if _, err := ReadPostgres(ctx, "postgres://127.0.0.1:1/nope?sslmode=disable&connect_timeout=2", t0, at(time.Hour)); err == nil {
		t.Error("an unreachable database must be an error")
	}
}
