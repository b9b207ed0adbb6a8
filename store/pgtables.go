package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/breakwater-gw/breakwater/model"
)

// Table definitions of the write-behind entities: how a key and a value map
// to a row (as a JSON object read by jsonb_to_recordset, so one statement
// writes a whole batch) and how a row is read back. Typed columns are a
// projection for operators; the jsonb column, where there is one, is what a
// restore reads.

type col struct{ name, typ string }

type tableDef struct {
	kind  kind
	table string
	keys  []col
	vals  []col // written by the flush (besides version, updated_at, updated_by)
	// sel lists the columns scan reads, after the key columns.
	sel  string
	scan func(sc scanner) (key, int64, value, error)
	row  func(k key, v value) (map[string]any, error)
	// payload is the change-feed form of a value; decode reads it back.
	payload func(v value) (any, error)
	decode  func(k key, b []byte) (value, error)
}

type scanner interface{ Scan(dest ...any) error }

func (t *tableDef) keyNames() string {
	n := make([]string, len(t.keys))
	for i, c := range t.keys {
		n[i] = c.name
	}
	return strings.Join(n, ", ")
}

func recordset(cs ...[]col) string {
	var parts []string
	for _, c := range cs {
		for _, x := range c {
			parts = append(parts, x.name+" "+x.typ)
		}
	}
	return strings.Join(parts, ", ")
}

func (t *tableDef) keyJSON(k key) map[string]any {
	m, _ := t.row(k, value{})
	out := map[string]any{}
	for _, c := range t.keys {
		out[c.name] = m[c.name]
	}
	return out
}

// selectSQL reads every row, or with keys the rows of a batch ($1).
func (t *tableDef) selectSQL(byKeys bool) string {
	q := fmt.Sprintf("SELECT %s, %s FROM %s", t.keyNames(), t.sel, t.table)
	if byKeys {
		q += fmt.Sprintf(" WHERE (%s) IN (SELECT %s FROM jsonb_to_recordset($1::jsonb) AS k(%s))",
			t.keyNames(), t.keyNames(), recordset(t.keys))
	}
	return q
}

// upsertSQL writes a batch ($1) at version $2 by replica $3.
func (t *tableDef) upsertSQL() string {
	var names, sets, srcs []string
	for _, c := range t.keys {
		names = append(names, c.name)
		srcs = append(srcs, "r."+c.name)
	}
	for _, c := range t.vals {
		names = append(names, c.name)
		srcs = append(srcs, "r."+c.name)
		sets = append(sets, c.name+" = EXCLUDED."+c.name)
	}
	names = append(names, "version", "updated_at", "updated_by")
	srcs = append(srcs, "$2", "now()", "$3")
	sets = append(sets, "version = EXCLUDED.version", "updated_at = EXCLUDED.updated_at", "updated_by = EXCLUDED.updated_by")
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM jsonb_to_recordset($1::jsonb) AS r(%s) ON CONFLICT (%s) DO UPDATE SET %s",
		t.table, strings.Join(names, ", "), strings.Join(srcs, ", "), recordset(t.keys, t.vals), t.keyNames(), strings.Join(sets, ", "))
}

func (t *tableDef) deleteSQL() string {
	return fmt.Sprintf("DELETE FROM %s WHERE (%s) IN (SELECT %s FROM jsonb_to_recordset($1::jsonb) AS k(%s))",
		t.table, t.keyNames(), t.keyNames(), recordset(t.keys))
}

// keyString names a row in problems and logs (never a secret: keys are
// provider, connection and model ids, and session hashes).
func keyString(k key) string {
	switch k.kind {
	case kindConn:
		return k.provider + "/" + k.conn
	case kindLockout:
		return k.provider + "/" + k.conn + "/" + model.LockKey{Name: k.name, Exact: k.exact}.String()
	case kindCursor:
		if k.provider == "" {
			return "combo:" + k.name
		}
		return "provider:" + k.provider
	case kindPin:
		return k.provider + "/" + k.name
	}
	return k.provider
}

// ts is a model instant as a timestamptz value; 0 (unset) is NULL.
func ts(t model.Time) any {
	if t == 0 {
		return nil
	}
	return t.Std().Format(time.RFC3339Nano)
}

func fromNull(t sql.NullTime) model.Time {
	if !t.Valid {
		return 0
	}
	return model.TimeOf(t.Time)
}

func parseEnum[T any, P interface {
	*T
	UnmarshalText([]byte) error
}](s string) error {
	var v T
	return P(&v).UnmarshalText([]byte(s))
}

func jsonPayload[T any](v T) (any, error) {
	b, err := json.Marshal(v)
	return json.RawMessage(b), err
}

func decodeStrict(b []byte, dst any) error {
	if len(b) == 0 {
		return fmt.Errorf("empty JSON")
	}
	return json.Unmarshal(b, dst)
}

var tables = []*tableDef{breakerTable, windowTable, cursorTable, connTable, lockoutTable, pinTable}

func tableOf(k kind) *tableDef { return tables[k] }

var breakerTable = &tableDef{
	kind:  kindBreaker,
	table: "domain_circuit_breakers",
	keys:  []col{{"name", "text"}},
	vals: []col{{"state", "text"}, {"failure_count", "integer"}, {"last_failure_time", "timestamptz"},
		{"last_failure_kind", "text"}, {"opened_at", "timestamptz"}, {"open_cycles", "integer"},
		{"generation", "bigint"}, {"breaker", "jsonb"}, {"changed_at", "timestamptz"}},
	sel: "version, changed_at, state, breaker",
	scan: func(sc scanner) (key, int64, value, error) {
		var k = key{kind: kindBreaker}
		var ver int64
		var at sql.NullTime
		var state string
		var raw []byte
		if err := sc.Scan(&k.provider, &ver, &at, &state, &raw); err != nil {
			return k, 0, value{}, err
		}
		v := value{present: true, at: fromNull(at)}
		if err := parseEnum[model.BreakerState](state); err != nil {
			return k, ver, v, fmt.Errorf("state: %w", err)
		}
		if err := decodeStrict(raw, &v.breaker); err != nil {
			return k, ver, v, fmt.Errorf("breaker: %w", err)
		}
		return k, ver, v, nil
	},
	row: func(k key, v value) (map[string]any, error) {
		b := v.breaker
		raw, err := json.Marshal(b)
		last := ts(0)
		if b.HasFailure {
			last = ts(b.LastFailureAt)
		}
		return map[string]any{"name": k.provider, "state": b.State.String(), "failure_count": b.FailureCount,
			"last_failure_time": last, "last_failure_kind": b.LastFailureKind.String(), "opened_at": ts(b.OpenedAt),
			"open_cycles": b.OpenCycles, "generation": b.Generation, "breaker": json.RawMessage(raw), "changed_at": ts(v.at)}, err
	},
	payload: func(v value) (any, error) { return jsonPayload(v.breaker) },
	decode: func(_ key, b []byte) (value, error) {
		v := value{present: true}
		return v, decodeStrict(b, &v.breaker)
	},
}

var windowTable = &tableDef{
	kind:  kindWindow,
	table: "provider_cooldown_windows",
	keys:  []col{{"provider", "text"}},
	vals:  []col{{"cool_until", "timestamptz"}, {"failures", "jsonb"}, {"changed_at", "timestamptz"}},
	sel:   "version, changed_at, cool_until, failures",
	scan: func(sc scanner) (key, int64, value, error) {
		var k = key{kind: kindWindow}
		var ver int64
		var at, cool sql.NullTime
		var raw []byte
		if err := sc.Scan(&k.provider, &ver, &at, &cool, &raw); err != nil {
			return k, 0, value{}, err
		}
		v := value{present: true, at: fromNull(at)}
		v.window.CoolUntil = fromNull(cool)
		if err := decodeStrict(raw, &v.window.Failures); err != nil {
			return k, ver, v, fmt.Errorf("failures: %w", err)
		}
		if len(v.window.Failures) == 0 {
			v.window.Failures = nil
		}
		return k, ver, v, nil
	},
	row: func(k key, v value) (map[string]any, error) {
		f := v.window.Failures
		if f == nil {
			f = []model.Time{}
		}
		raw, err := json.Marshal(f)
		return map[string]any{"provider": k.provider, "cool_until": ts(v.window.CoolUntil), "failures": json.RawMessage(raw), "changed_at": ts(v.at)}, err
	},
	payload: func(v value) (any, error) { return jsonPayload(v.window) },
	decode: func(_ key, b []byte) (value, error) {
		v := value{present: true}
		err := decodeStrict(b, &v.window)
		if len(v.window.Failures) == 0 {
			v.window.Failures = nil
		}
		return v, err
	},
}

var cursorTable = &tableDef{
	kind:  kindCursor,
	table: "routing_cursors",
	keys:  []col{{"kind", "text"}, {"name", "text"}},
	vals:  []col{{"cursor", "bigint"}, {"changed_at", "timestamptz"}},
	sel:   "version, changed_at, cursor",
	scan: func(sc scanner) (key, int64, value, error) {
		var k = key{kind: kindCursor}
		var ck, name string
		var ver, cur int64
		var at sql.NullTime
		if err := sc.Scan(&ck, &name, &ver, &at, &cur); err != nil {
			return k, 0, value{}, err
		}
		v := value{present: true, at: fromNull(at), cursor: uint64(cur)}
		switch ck {
		case "provider":
			k.provider = name
		case "combo":
			k.name = name
		default:
			k.name = ck + ":" + name
			return k, ver, v, fmt.Errorf("kind: unknown cursor kind %q (want provider or combo)", ck)
		}
		return k, ver, v, nil
	},
	row: func(k key, v value) (map[string]any, error) {
		ck, name := "provider", k.provider
		if k.provider == "" {
			ck, name = "combo", k.name
		}
		return map[string]any{"kind": ck, "name": name, "cursor": int64(v.cursor), "changed_at": ts(v.at)}, nil
	},
	payload: func(v value) (any, error) { return v.cursor, nil },
	decode: func(_ key, b []byte) (value, error) {
		v := value{present: true}
		return v, decodeStrict(b, &v.cursor)
	},
}

var connTable = &tableDef{
	kind:  kindConn,
	table: "provider_connections",
	keys:  []col{{"provider", "text"}, {"connection_id", "text"}},
	vals: []col{{"status", "text"}, {"rate_limited_until", "timestamptz"}, {"cooldown_set_at", "timestamptz"},
		{"backoff_level", "integer"}, {"last_error", "text"}, {"last_error_type", "text"}, {"error_code", "integer"},
		{"last_error_at", "timestamptz"}, {"rejected_count", "integer"}, {"rejected_last_at", "timestamptz"},
		{"rejected_cooldown_until", "timestamptz"}, {"expired_retry_count", "integer"}, {"expired_retry_at", "timestamptz"},
		{"uses", "bigint"}, {"last_used_at", "timestamptz"}, {"conn", "jsonb"}, {"changed_at", "timestamptz"}},
	sel: "version, changed_at, status, conn",
	scan: func(sc scanner) (key, int64, value, error) {
		var k = key{kind: kindConn}
		var ver int64
		var at sql.NullTime
		var status string
		var raw []byte
		if err := sc.Scan(&k.provider, &k.conn, &ver, &at, &status, &raw); err != nil {
			return k, 0, value{}, err
		}
		v := value{present: true, at: fromNull(at)}
		if err := parseEnum[model.ConnStatus](status); err != nil {
			return k, ver, v, fmt.Errorf("status: %w", err)
		}
		if err := decodeStrict(raw, &v.conn); err != nil {
			return k, ver, v, fmt.Errorf("conn: %w", err)
		}
		return k, ver, v, nil
	},
	row: func(k key, v value) (map[string]any, error) {
		c := v.conn
		raw, err := json.Marshal(c)
		return map[string]any{"provider": k.provider, "connection_id": k.conn, "status": c.Status.String(),
			"rate_limited_until": ts(c.RateLimitedUntil), "cooldown_set_at": ts(c.CooldownSetAt),
			"backoff_level": c.BackoffLevel, "last_error": c.LastError, "last_error_type": c.LastErrorType.String(),
			"error_code": c.ErrorCode, "last_error_at": ts(c.LastErrorAt), "rejected_count": c.Rejected.Count,
			"rejected_last_at": ts(c.Rejected.LastAt), "rejected_cooldown_until": ts(c.Rejected.CooldownUntil),
			"expired_retry_count": c.Auth.Count, "expired_retry_at": ts(c.Auth.LastAt), "uses": int64(c.Uses),
			"last_used_at": ts(c.LastUsedAt), "conn": json.RawMessage(raw), "changed_at": ts(v.at)}, err
	},
	payload: func(v value) (any, error) { return jsonPayload(v.conn) },
	decode: func(_ key, b []byte) (value, error) {
		v := value{present: true}
		return v, decodeStrict(b, &v.conn)
	},
}

var lockoutTable = &tableDef{
	kind:  kindLockout,
	table: "model_lockouts",
	keys:  []col{{"provider", "text"}, {"connection_id", "text"}, {"lock_name", "text"}, {"exact", "boolean"}},
	vals: []col{{"reason", "text"}, {"until_at", "timestamptz"}, {"locked_at", "timestamptz"}, {"failure_count", "integer"},
		{"last_failure_at", "timestamptz"}, {"last_cooldown_ms", "bigint"}, {"changed_at", "timestamptz"}},
	sel: "version, changed_at, reason, until_at, locked_at, failure_count, last_failure_at, last_cooldown_ms",
	scan: func(sc scanner) (key, int64, value, error) {
		var k = key{kind: kindLockout}
		var ver int64
		var at, until, locked, lastFail sql.NullTime
		var reason string
		var l model.Lockout
		if err := sc.Scan(&k.provider, &k.conn, &k.name, &k.exact, &ver, &at, &reason, &until, &locked,
			&l.FailureCount, &lastFail, &l.LastCooldownMs); err != nil {
			return k, 0, value{}, err
		}
		l.Key = model.LockKey{Name: k.name, Exact: k.exact}
		l.Until, l.LockedAt, l.LastFailureAt = fromNull(until), fromNull(locked), fromNull(lastFail)
		v := value{present: true, at: fromNull(at), lock: l}
		if err := v.lock.Reason.UnmarshalText([]byte(reason)); err != nil {
			return k, ver, v, fmt.Errorf("reason: %w", err)
		}
		if l.FailureCount < 1 {
			return k, ver, v, fmt.Errorf("failure_count: %d, want at least 1", l.FailureCount)
		}
		return k, ver, v, nil
	},
	row: func(k key, v value) (map[string]any, error) {
		l := v.lock
		return map[string]any{"provider": k.provider, "connection_id": k.conn, "lock_name": k.name, "exact": k.exact,
			"reason": l.Reason.String(), "until_at": ts(l.Until), "locked_at": ts(l.LockedAt), "failure_count": l.FailureCount,
			"last_failure_at": ts(l.LastFailureAt), "last_cooldown_ms": l.LastCooldownMs, "changed_at": ts(v.at)}, nil
	},
	payload: func(v value) (any, error) { return jsonPayload(v.lock) },
	decode: func(_ key, b []byte) (value, error) {
		v := value{present: true}
		return v, decodeStrict(b, &v.lock)
	},
}

var pinTable = &tableDef{
	kind:  kindPin,
	table: "session_affinity_pins",
	keys:  []col{{"provider", "text"}, {"session_hash", "text"}},
	vals:  []col{{"connection_id", "text"}, {"expires_at", "timestamptz"}, {"changed_at", "timestamptz"}},
	sel:   "version, changed_at, connection_id, expires_at",
	scan: func(sc scanner) (key, int64, value, error) {
		var k = key{kind: kindPin}
		var ver int64
		var p model.Pin
		var at, x sql.NullTime
		if err := sc.Scan(&k.provider, &k.name, &ver, &at, &p.Connection, &x); err != nil {
			return k, 0, value{}, err
		}
		p.Provider, p.Session, p.ExpiresAt = k.provider, k.name, fromNull(x)
		v := value{present: true, pin: p, at: fromNull(at)}
		if p.Connection == "" || p.Session == "" {
			return k, ver, v, fmt.Errorf("connection_id and session_hash must be non-empty")
		}
		return k, ver, v, nil
	},
	row: func(k key, v value) (map[string]any, error) {
		return map[string]any{"provider": k.provider, "session_hash": k.name, "connection_id": v.pin.Connection,
			"expires_at": ts(max(v.pin.ExpiresAt, 1)), "changed_at": ts(v.at)}, nil
	},
	payload: func(v value) (any, error) { return jsonPayload(v.pin) },
	decode: func(_ key, b []byte) (value, error) {
		v := value{present: true}
		return v, decodeStrict(b, &v.pin)
	},
}
