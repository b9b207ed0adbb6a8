package incident

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

const (
	// MaxLineBytes bounds one JSONL line: a record holds at most a 2 KB
	// error body and a few short headers, so anything far larger is not a
	// request log record.
	MaxLineBytes = 1 << 20
	// MaxRecords bounds the records one export reads.
	MaxRecords = 2_000_000
)

// ReadJSONL reads request log records, one store.LogRecord JSON object per
// line (the format of `GET /api/request-log?format=jsonl`), and keeps those
// in [from, to). Blank lines are skipped. A malformed line is an
// *InputError naming name:line; the records read so far are not returned.
func ReadJSONL(r io.Reader, name string, from, to time.Time) ([]store.LogRecord, error) {
	var out []store.LogRecord
	err := ScanJSONL(r, name, func(rec store.LogRecord) error {
		if rec.Time.Before(from) || !rec.Time.Before(to) {
			return nil
		}
		if len(out) >= MaxRecords {
			return &InputError{Field: name, Problem: fmt.Sprintf("more than %d records in the window; export a shorter one", MaxRecords)}
		}
		out = append(out, rec)
		return nil
	})
	return out, err
}

// ScanJSONL calls fn for every record of a JSONL request log, in file order.
func ScanJSONL(r io.Reader, name string, fn func(store.LogRecord) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		b, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, errLineTooLong) {
				return &InputError{Field: fmt.Sprintf("%s:%d", name, line), Problem: fmt.Sprintf("line longer than %d bytes: not a request log record", MaxLineBytes)}
			}
			return fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			rec, perr := parseRecord(t)
			if perr != nil {
				return &InputError{Field: fmt.Sprintf("%s:%d", name, line), Problem: perr.Error()}
			}
			if ferr := fn(rec); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns one line without its newline; io.EOF with the last
// (possibly empty) line.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > MaxLineBytes+1 {
			// Stop here: the caller names this line and gives up.
			return nil, errLineTooLong
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, err
		}
	}
}

// parseRecord decodes and checks one record: a record the export cannot
// place (no time, no provider or connection, an impossible status) is an
// error rather than something silently dropped, so a truncated or foreign
// file is noticed.
func parseRecord(b []byte) (store.LogRecord, error) {
	var rec store.LogRecord
	if b[0] != '{' {
		return rec, fmt.Errorf("want a JSON object (one request log record per line), got %q", clip(b))
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("invalid request log record: %v", err)
	}
	switch {
	case rec.Time.IsZero():
		return rec, errors.New(`a record needs "time" (RFC 3339)`)
	case rec.ErrorType == store.OperatorAction:
		if rec.Reason == "" {
			return rec, errors.New(`an operator action record needs "reason" (the action)`)
		}
	case rec.Provider == "" || rec.Connection == "":
		return rec, errors.New(`a record needs "provider" and "connection" (an operator action, errorType "operator", may name neither)`)
	case rec.Status != 0 && (rec.Status < 100 || rec.Status > 599):
		return rec, fmt.Errorf(`"status" must be 0 (no response) or an HTTP status 100..599, got %d`, rec.Status)
	case rec.LatencyMs < 0 || rec.FirstByteMs < 0:
		return rec, errors.New(`"latencyMs" and "firstByteMs" must not be negative`)
	}
	rec.Time = rec.Time.UTC()
	return rec, nil
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// WriteJSONL writes records one JSON object per line (the format ReadJSONL
// reads).
func WriteJSONL(w io.Writer, recs []store.LogRecord) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}
