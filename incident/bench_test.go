package incident

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/breakwater-gw/breakwater/store"
)

// benchRecords is an hour of a busy incident: 100 000 attempts over 4
// providers × 8 connections, every fifth a 429 with Retry-After, every
// tenth request failing over once.
func benchRecords(n int) []store.LogRecord {
	recs := make([]store.LogRecord, 0, n)
	for i := 0; len(recs) < n; i++ {
		p := fmt.Sprintf("p%d", i%4)
		r := store.LogRecord{Time: at(time.Duration(i) * 36 * time.Millisecond), RequestID: fmt.Sprintf("r%d", i), Provider: p,
			Connection: fmt.Sprintf("k%d", i%8), Model: "m", Status: 200, LatencyMs: 800, FirstByteMs: 90}
		if i%5 == 0 {
			r.Status, r.ErrorType, r.Headers, r.ErrorBody = 429, "response", map[string]string{"retry-after": "3"}, `{"error":{"message":"rate limited"}}`
		}
		recs = append(recs, r)
		if i%10 == 0 {
			f := r
			f.Connection, f.Status, f.ErrorType, f.Headers, f.ErrorBody = fmt.Sprintf("k%d", (i+1)%8), 200, "", nil, ""
			recs = append(recs, f)
		}
	}
	return recs
}

// BenchmarkExport measures turning 100 000 request log records into a
// scenario (the export itself, without the load check).
func BenchmarkExport(b *testing.B) {
	recs := benchRecords(100_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Export(recs, Options{From: t0, To: at(time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadJSONL measures reading 100 000 JSONL records.
func BenchmarkReadJSONL(b *testing.B) {
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, benchRecords(100_000)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ReadJSONL(bytes.NewReader(buf.Bytes()), "b.jsonl", t0, at(time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
}
