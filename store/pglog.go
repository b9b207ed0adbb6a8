package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lib/pq"
)

// pgLog writes the request log behind: LogAttempt appends to a bounded
// buffer (dropping the oldest when the database has been down long enough to
// fill it) and a goroutine copies batches into proxy_logs.
type pgLog struct {
	s       *Postgres
	mu      sync.Mutex
	buf     []LogRecord
	max     int
	dropped atomic.Int64
	removed int64 // records ever removed from the front of buf (written or dropped)
	kick    chan struct{}
	text    []byte      // write's COPY data, kept for the next batch (one writer goroutine)
	batch   []LogRecord // flush's copy of the records it writes, kept likewise
}

const (
	logFlushEvery = 500 * time.Millisecond
	logBatchMax   = 2000
)

func newPGLog(s *Postgres, max int) *pgLog {
	return &pgLog{s: s, max: max, kick: make(chan struct{}, 1)}
}

func (s *Postgres) LogAttempt(rec LogRecord) {
	rec = sanitize(rec)
	l := s.reqlog
	l.mu.Lock()
	if len(l.buf) >= l.max {
		// Drop the oldest tenth at once, so a long outage costs O(1) per record.
		n := len(l.buf) - l.max + max(1, l.max/10)
		l.buf = append(l.buf[:0], l.buf[n:]...)
		l.removed += int64(n)
		l.dropped.Add(int64(n))
	}
	l.buf = append(l.buf, rec)
	full := len(l.buf) >= logBatchMax
	l.mu.Unlock()
	if full {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
}

func (l *pgLog) loop() {
	defer l.s.wg.Done()
	wait := logFlushEvery
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-l.s.stop:
			return
		case <-t.C:
		case <-l.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := l.flush(ctx)
		cancel()
		if err != nil {
			wait = min(2*wait, 5*time.Second)
		} else {
			wait = logFlushEvery
		}
		t.Reset(wait)
	}
}

// flush writes everything buffered, in batches.
func (l *pgLog) flush(ctx context.Context) error {
	for {
		l.mu.Lock()
		n := min(len(l.buf), logBatchMax)
		// The writer's own batch slice, reused: a fresh copy per batch
		// and a buffer regrown from nil after each flush cost the Postgres
		// gateway a visible share of its CPU under load (growslice, its
		// memmove, and the scavenger returning the garbage).
		batch := append(l.batch[:0], l.buf[:n]...)
		l.batch = batch
		start := l.removed
		l.mu.Unlock()
		if n == 0 {
			return nil
		}
		err := l.write(ctx, batch)
		switch {
		case err == nil:
		case isUnavailable(err):
			l.s.noteDown(err)
			n = 0 // the records stay in l.buf
		default:
			// The database refused the batch for something in it: write the
			// records one by one, so one it refuses is dropped (and counted)
			// instead of holding every later record back for ever.
			l.s.log.Warn("store: writing the request log failed; writing the batch record by record", "err", redactErr(err, l.s.url))
			n, err = l.writeEach(ctx, batch)
		}
		clear(batch) // no record outlives its batch in the reused slice
		if n == 0 {
			return err
		}
		l.mu.Lock()
		// Records dropped meanwhile already left the front of the buffer.
		rest := min(max(0, int64(n)-(l.removed-start)), int64(len(l.buf)))
		// Keep the buffer's room: move what arrived meanwhile to the
		// front (a few records) rather than slicing the front away.
		k := copy(l.buf, l.buf[rest:])
		clear(l.buf[k:])
		l.buf = l.buf[:k]
		if cap(l.buf) > 32*logBatchMax && k < logBatchMax {
			// After an outage filled it: not kept at that size.
			l.buf = append([]LogRecord(nil), l.buf...)
		}
		l.removed += rest
		l.mu.Unlock()
	}
}

// writeEach writes the records of batch one at a time and returns how many
// were dealt with from the front (written, or refused and dropped), stopping
// at the first error that says the database is unavailable.
func (l *pgLog) writeEach(ctx context.Context, batch []LogRecord) (int, error) {
	for i := range batch {
		err := l.write(ctx, batch[i:i+1])
		if err == nil {
			continue
		}
		if isUnavailable(err) {
			l.s.noteDown(err)
			return i, err
		}
		if ctx.Err() != nil {
			return i, err
		}
		l.dropped.Add(1)
		l.s.log.Warn("store: the request log refused a record; dropped", "provider", batch[i].Provider,
			"connection", batch[i].Connection, "err", redactErr(err, l.s.url))
	}
	return len(batch), nil
}

// plainRecord is an ordinary served attempt: no error, reason, egress IP,
// headers or body, the columns whose table defaults say the same.
func plainRecord(r *LogRecord) bool {
	return r.ErrorType == "" && r.Reason == "" && r.EgressIP == "" && len(r.Headers) == 0 && r.ErrorBody == ""
}

func (l *pgLog) write(ctx context.Context, batch []LogRecord) error {
	// A batch of ordinary served attempts (a healthy gateway's every batch)
	// copies only the columns that vary and lets the table's defaults fill
	// the rest. A batch with any failure copies every column, in one
	// statement, so rows keep the order the request log reads them back in
	// (ts, id).
	plain := true
	for i := range batch {
		if !plainRecord(&batch[i]) {
			plain = false
			break
		}
	}
	cols := []string{"ts", "request_id", "provider", "connection_id", "model", "status", "latency_ms", "first_byte_ms", "route"}
	if !plain {
		cols = append(cols, "error_type", "reason", "egress_ip", "headers", "error_body")
	}
	// The rows are encoded here, in COPY's text format, and handed to the
	// driver as one piece: a database/sql Exec per row (argument
	// conversion, locking, a result each, 11 allocations) was most of the
	// log's CPU in the gateway.
	text := l.text[:0]
	for i := range batch {
		var err error
		if text, err = appendCopyRow(text, &batch[i], plain); err != nil {
			return err
		}
	}
	l.text = text
	return l.copyRows(ctx, cols, text)
}

// copyRows runs one COPY of text (rows in COPY's text format, each ending
// in a newline) into proxy_logs' cols, in a transaction of its own.
func (l *pgLog) copyRows(ctx context.Context, cols []string, text []byte) error {
	conn, err := l.s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		begin, ok1 := dc.(driver.ConnBeginTx)
		prepare, ok2 := dc.(driver.ConnPrepareContext)
		if !ok1 || !ok2 {
			return fmt.Errorf("store: the Postgres driver (%T) cannot run a COPY here", dc)
		}
		tx, err := begin.BeginTx(ctx, driver.TxOptions{})
		if err != nil {
			return err
		}
		committed := false
		defer func() {
			if !committed {
				_ = tx.Rollback()
			}
		}()
		st, err := prepare.PrepareContext(ctx, pq.CopyIn("proxy_logs", cols...))
		if err != nil {
			return err
		}
		defer st.Close()
		cp, ok := st.(copyData)
		if !ok {
			return fmt.Errorf("store: the Postgres driver's COPY statement (%T) takes no raw data", st)
		}
		if _, err := cp.CopyData(ctx, string(text[:len(text)-1])); err != nil { // CopyData ends the line itself
			return err
		}
		if _, err := st.Exec(nil); err != nil { //nolint:staticcheck // lib/pq's COPY ends with Exec(nil)
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		committed = true
		return nil
	})
}

// copyData is lib/pq's raw COPY input (its COPY statement has it since v1.11).
type copyData interface {
	CopyData(ctx context.Context, line string) (driver.Result, error)
}

// appendCopyTime appends t in UTC as "2006-01-02 15:04:05.999999999Z"
// (time.Time.AppendFormat's output for that layout, which it takes ~20 times
// longer to produce; years outside 1..9999 still go through it).
func appendCopyTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 1 || year > 9999 {
		return t.AppendFormat(b, "2006-01-02 15:04:05.999999999Z07:00")
	}
	hour, min, sec := t.Clock()
	b = appendDigits(b, year, 4)
	b = appendDigits(append(b, '-'), int(month), 2)
	b = appendDigits(append(b, '-'), day, 2)
	b = appendDigits(append(b, ' '), hour, 2)
	b = appendDigits(append(b, ':'), min, 2)
	b = appendDigits(append(b, ':'), sec, 2)
	if ns := t.Nanosecond(); ns != 0 {
		digits := 9
		for ns%10 == 0 {
			ns /= 10
			digits--
		}
		b = appendDigits(append(b, '.'), ns, digits)
	}
	return append(b, 'Z')
}

// appendDigits appends v (non-negative) zero-padded to width digits.
func appendDigits(b []byte, v, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// appendCopyRow appends r as one line of COPY's text format, in the column
// order of write: tab-separated, \N for NULL, backslash escapes for the
// characters COPY gives meaning to. Text is valid UTF-8 without NUL already
// (sanitize).
func appendCopyRow(b []byte, r *LogRecord, plain bool) ([]byte, error) {
	b = appendCopyTime(b, r.Time)
	for _, v := range [...]string{r.RequestID, r.Provider, r.Connection, r.Model} {
		b = appendCopyText(append(b, '\t'), v)
	}
	b = strconv.AppendInt(append(b, '\t'), int64(r.Status), 10)
	b = strconv.AppendInt(append(b, '\t'), r.LatencyMs, 10)
	b = append(b, '\t')
	if r.FirstByteMs > 0 {
		b = strconv.AppendInt(b, r.FirstByteMs, 10)
	} else {
		b = append(b, `\N`...)
	}
	b = appendCopyText(append(b, '\t'), r.Route)
	if !plain {
		b = appendCopyText(append(b, '\t'), r.ErrorType)
		b = appendCopyText(append(b, '\t'), r.Reason)
		b = append(b, '\t')
		if r.EgressIP != "" {
			b = appendCopyText(b, r.EgressIP)
		} else {
			b = append(b, `\N`...)
		}
		hb := []byte("{}")
		if len(r.Headers) > 0 {
			var err error
			if hb, err = json.Marshal(r.Headers); err != nil {
				return b, err
			}
		}
		b = appendCopyText(append(b, '\t'), string(hb))
		b = appendCopyText(append(b, '\t'), r.ErrorBody)
	}
	return append(b, '\n'), nil
}

// appendCopyText appends s with COPY's text-format escapes.
func appendCopyText(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		var esc byte
		switch s[i] {
		case '\\':
			esc = '\\'
		case '\n':
			esc = 'n'
		case '\r':
			esc = 'r'
		case '\t':
			esc = 't'
		default:
			continue
		}
		b = append(append(b, s[start:i]...), '\\', esc)
		start = i + 1
	}
	return append(b, s[start:]...)
}

// drain writes what is left at Close.
func (l *pgLog) drain(ctx context.Context) error {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		err := l.flush(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			l.mu.Lock()
			n := len(l.buf)
			l.mu.Unlock()
			return fmt.Errorf("%d record(s) not written: %w", n, err)
		case <-time.After(wait):
		}
	}
}

func (s *Postgres) RecentAttempts(ctx context.Context, q LogQuery) ([]LogRecord, error) {
	var until, since any
	if !q.Since.IsZero() {
		since = q.Since
	}
	if !q.Until.IsZero() {
		until = q.Until
	}
	rows, err := s.db.QueryContext(ctx, `SELECT ts, request_id, provider, connection_id, model, status, latency_ms,
		COALESCE(first_byte_ms, 0), error_type, reason, COALESCE(egress_ip, ''), headers, error_body, route
		FROM proxy_logs
		WHERE ($1::timestamptz IS NULL OR ts >= $1) AND ($2::timestamptz IS NULL OR ts < $2)
		  AND ($3 = '' OR provider = $3) AND ($4 = '' OR connection_id = $4) AND ($6 = '' OR request_id = $6)
		ORDER BY ts DESC, id DESC LIMIT $5`, since, until, q.Provider, q.Connection, clampLimit(q.Limit), q.RequestID)
	if err != nil {
		return nil, s.wrapRead(err)
	}
	defer rows.Close()
	var out []LogRecord
	for rows.Next() {
		var r LogRecord
		var hb []byte
		if err := rows.Scan(&r.Time, &r.RequestID, &r.Provider, &r.Connection, &r.Model, &r.Status, &r.LatencyMs,
			&r.FirstByteMs, &r.ErrorType, &r.Reason, &r.EgressIP, &hb, &r.ErrorBody, &r.Route); err != nil {
			return nil, s.wrapRead(err)
		}
		if len(hb) > 2 {
			_ = json.Unmarshal(hb, &r.Headers)
		}
		r.Time = r.Time.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrapRead(err)
	}
	return out, nil
}

func (s *Postgres) LastEgressIPs(ctx context.Context, provider string, since time.Time) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT ON (connection_id) connection_id, egress_ip
		FROM proxy_logs WHERE provider = $1 AND ts >= $2 AND egress_ip IS NOT NULL
		ORDER BY connection_id, ts DESC`, provider, since)
	if err != nil {
		return nil, s.wrapRead(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var c string
		var ip sql.NullString
		if err := rows.Scan(&c, &ip); err != nil {
			return nil, s.wrapRead(err)
		}
		out[c] = ip.String
	}
	return out, s.wrapReadNil(rows.Err())
}

func (s *Postgres) wrapReadNil(err error) error {
	if err == nil {
		return nil
	}
	return s.wrapRead(err)
}
