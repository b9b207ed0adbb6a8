package store

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"pgregory.net/rapid"
)

var logBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ringString draws the strings a record carries: empty, short config-like
// names, request-id-like hex, unicode, and strings too long for a slot.
func ringString(t *rapid.T, label string) string {
	switch rapid.IntRange(0, 5).Draw(t, label+"Kind") {
	case 0:
		return ""
	case 1:
		return rapid.SampledFrom([]string{"mock", "k1", "k2", "gpt-4o-mini", "rate_limit_exceeded", "10.0.0.1"}).Draw(t, label)
	case 2:
		return rapid.StringMatching(`[0-9a-f]{24}`).Draw(t, label)
	case 3:
		return rapid.String().Draw(t, label)
	case 4:
		return rapid.StringOfN(rapid.RuneFrom([]rune("aé€😀")), 1, 40, -1).Draw(t, label)
	default:
		return strings.Repeat("x", rapid.IntRange(100, 300).Draw(t, label+"Len"))
	}
}

func ringRecord(t *rapid.T, label string) LogRecord {
	r := LogRecord{
		Time: time.Unix(rapid.Int64Range(-1e10, 1e10).Draw(t, label+"Sec"),
			rapid.Int64Range(0, 999_999_999).Draw(t, label+"Nsec")).UTC(),
		RequestID: ringString(t, label+"RequestID"), Provider: ringString(t, label+"Provider"),
		Connection: ringString(t, label+"Connection"), Model: ringString(t, label+"Model"),
		Status: rapid.Int().Draw(t, label+"Status"), LatencyMs: rapid.Int64().Draw(t, label+"LatencyMs"),
		FirstByteMs: rapid.Int64().Draw(t, label+"FirstByteMs"), ErrorType: ringString(t, label+"ErrorType"),
		Reason: ringString(t, label+"Reason"), EgressIP: ringString(t, label+"EgressIP"),
	}
	switch rapid.IntRange(0, 5).Draw(t, label+"Extra") {
	case 1:
		r.Headers = map[string]string{}
	case 2:
		r.Headers = rapid.MapOf(rapid.String(), rapid.String()).Draw(t, label+"Headers")
	case 3:
		r.ErrorBody = ringString(t, label+"ErrorBody")
	case 4:
		r.Time = time.Now() // a monotonic reading and the local zone
	case 5:
		r.Time = r.Time.In(time.FixedZone("X", 3600))
	}
	return r
}

// fitsSlot is when a record must be kept in its slot, not in the side map.
func fitsSlot(r LogRecord) bool {
	n := len(r.RequestID) + len(r.Provider) + len(r.Connection) + len(r.Model) + len(r.ErrorType) + len(r.Reason) + len(r.EgressIP)
	return r.Headers == nil && r.ErrorBody == "" && r.Time.Location() == time.UTC && r.Time == r.Time.Round(0) && n <= logSlotData
}

func newest(recs []LogRecord) []LogRecord {
	out := slices.Clone(recs)
	slices.Reverse(out)
	return out
}

func TestLogRingRoundTrip(t *testing.T) {
	// A record comes back from the ring equal (reflect.DeepEqual) to the one
	// added, newest first, whether its slot holds it or the side map does;
	// ordinary records are held by their slot. Through the memory store a
	// record comes back as sanitize made it, as it did when the ring kept
	// LogRecords.
	rapid.Check(t, func(t *rapid.T) {
		recs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) LogRecord { return ringRecord(t, "r") }), 1, 60).Draw(t, "recs")
		var l logRing
		m := NewMemory(MemoryOptions{})
		var sanitized []LogRecord
		for _, r := range recs {
			l.add(r)
			m.LogAttempt(r)
			sanitized = append(sanitized, sanitize(r))
		}
		if got := l.query(LogQuery{Limit: logRingSize}); !reflect.DeepEqual(got, newest(recs)) {
			t.Fatalf("ring:\n got %#v\nwant %#v", got, newest(recs))
		}
		for i, r := range recs {
			if l.slots[i].side == fitsSlot(r) {
				t.Fatalf("record %d: in side map %v, want %v: %#v", i, l.slots[i].side, !fitsSlot(r), r)
			}
		}
		got, _ := m.RecentAttempts(t.Context(), LogQuery{Limit: logRingSize})
		if !reflect.DeepEqual(got, newest(sanitized)) {
			t.Fatalf("memory store:\n got %#v\nwant %#v", got, newest(sanitized))
		}
	})
	// At the edge: strings of exactly logSlotData bytes fit, one more does not.
	var l logRing
	for _, n := range []int{logSlotData, logSlotData + 1} {
		r := LogRecord{Time: logBase, RequestID: strings.Repeat("r", 128), Provider: "p", EgressIP: strings.Repeat("€", (n-129)/3)}
		r.Model = strings.Repeat("m", n-len(r.RequestID)-len(r.Provider)-len(r.EgressIP))
		l.add(r)
		if got := l.query(LogQuery{Limit: 1}); !reflect.DeepEqual(got, []LogRecord{r}) || l.slots[l.next-1].side == fitsSlot(r) {
			t.Fatalf("%d bytes of strings: got %#v, in side map %v", n, got, l.slots[l.next-1].side)
		}
	}
}

func TestLogRingWrapAround(t *testing.T) {
	// More than logRingSize adds keep exactly the newest logRingSize, newest
	// first, and an overwritten slot's side-map entry is gone: the map holds
	// only records still in the ring.
	var l logRing
	var recs []LogRecord
	add := func(n int, withBody func(i int) bool) {
		for range n {
			i := len(recs)
			r := LogRecord{Time: logBase.Add(time.Duration(i) * time.Millisecond), RequestID: fmt.Sprintf("%024x", i),
				Provider: "mock", Connection: "k1", Model: "gpt-4o-mini", Status: 200}
			if withBody(i) {
				r.Status, r.ErrorBody = 503, fmt.Sprint("upstream error ", i)
			}
			l.add(r)
			recs = append(recs, r)
		}
	}
	sideIn := func(recs []LogRecord) int {
		n := 0
		for _, r := range recs {
			if r.ErrorBody != "" {
				n++
			}
		}
		return n
	}
	add(logRingSize+2_345, func(i int) bool { return i%3 == 0 })
	kept := recs[len(recs)-logRingSize:]
	if got := l.query(LogQuery{Limit: 100_000}); !reflect.DeepEqual(got, newest(kept)) {
		t.Fatalf("after wrapping: %d records, want the newest %d", len(got), logRingSize)
	}
	if len(l.side) != sideIn(kept) {
		t.Fatalf("side map holds %d records, want %d", len(l.side), sideIn(kept))
	}
	add(logRingSize, func(int) bool { return false })
	if got := l.query(LogQuery{Limit: 100_000}); !reflect.DeepEqual(got, newest(recs[len(recs)-logRingSize:])) {
		t.Fatal("after a second lap: not the newest records")
	}
	if len(l.side) != 0 {
		t.Fatalf("side map holds %d records after every slot was overwritten by one that fits", len(l.side))
	}
}

func TestLogRingFilters(t *testing.T) {
	// Since, Until, Provider, Connection, RequestID and Limit select what
	// LogQuery.matches and clampLimit say, newest first, both for records in
	// their slots (filtered on the encoded fields) and in the side map.
	times := []time.Time{logBase, logBase.Add(time.Nanosecond), logBase.Add(time.Second), logBase.Add(time.Hour)}
	names := []string{"", "a", "b", "é"}
	rapid.Check(t, func(t *rapid.T) {
		var l logRing
		recs := make([]LogRecord, rapid.IntRange(0, 80).Draw(t, "n"))
		for i := range recs {
			r := LogRecord{Time: rapid.SampledFrom(times).Draw(t, "time"), RequestID: fmt.Sprint(i),
				Provider: rapid.SampledFrom(names).Draw(t, "provider"), Connection: rapid.SampledFrom(names).Draw(t, "connection")}
			if rapid.Bool().Draw(t, "side") {
				r.ErrorBody = "error"
			}
			recs[i] = r
			l.add(r)
		}
		pickTime := func(label string) time.Time {
			if rapid.Bool().Draw(t, label+"Zero") {
				return time.Time{}
			}
			return rapid.SampledFrom(times).Draw(t, label)
		}
		q := LogQuery{Since: pickTime("since"), Until: pickTime("until"), Provider: rapid.SampledFrom(names).Draw(t, "qProvider"),
			Connection: rapid.SampledFrom(names).Draw(t, "qConnection"), Limit: rapid.IntRange(-1, 90).Draw(t, "limit"),
			RequestID: rapid.SampledFrom([]string{"", "", "0", "3", "17", "none"}).Draw(t, "qRequestID")}
		var want []LogRecord
		for _, r := range newest(recs) {
			if q.matches(r) && len(want) < clampLimit(q.Limit) {
				want = append(want, r)
			}
		}
		if got := l.query(q); !reflect.DeepEqual(got, want) {
			t.Fatalf("query %+v:\n got %v\nwant %v", q, got, want)
		}
	})
	// With no Limit a query returns the newest 1000.
	var l logRing
	for i := range 1_200 {
		l.add(LogRecord{Time: logBase.Add(time.Duration(i) * time.Second), RequestID: fmt.Sprint(i)})
	}
	got := l.query(LogQuery{})
	if len(got) != 1_000 || got[0].RequestID != "1199" || got[999].RequestID != "200" {
		t.Fatalf("default limit: %d records, %v … %v", len(got), got[0], got[len(got)-1])
	}
}

func TestLogSlotHoldsNoPointers(t *testing.T) {
	// The slot type has no pointer-bearing field, so the slot array stays a
	// noscan allocation: a field that brought pointers back would bring back
	// the GC's scanning of the whole ring on every cycle.
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		switch typ.Kind() {
		case reflect.Pointer, reflect.String, reflect.Slice, reflect.Map, reflect.Interface, reflect.Chan,
			reflect.Func, reflect.UnsafePointer:
			t.Errorf("%s is a %s, which holds a pointer", path, typ.Kind())
		case reflect.Array:
			walk(typ.Elem(), path+"[]")
		case reflect.Struct:
			for f := range typ.Fields() {
				walk(f.Type, path+"."+f.Name)
			}
		}
	}
	walk(reflect.TypeFor[logSlot](), "logSlot")
}

func TestLogSlotSize(t *testing.T) {
	// A slot is 256 bytes (the ring 2.5 MB): a new field takes its room from
	// logSlotData rather than growing every slot unnoticed.
	if n := unsafe.Sizeof(logSlot{}); n != 256 {
		t.Fatalf("logSlot is %d bytes, want 256", n)
	}
}

func BenchmarkLogRingAdd(b *testing.B) {
	var l logRing
	r := LogRecord{Time: logBase, RequestID: "0123456789abcdef01234567", Provider: "mock", Connection: "k1",
		Model: "gpt-4o-mini", Status: 200, LatencyMs: 12, FirstByteMs: 5}
	l.add(r) // the slots are allocated on the first add
	b.ReportAllocs()
	for b.Loop() {
		l.add(r)
	}
}

// TestStorableTextRule pins storableText to its rule for every length and
// byte (the short-ASCII pass included): valid UTF-8 without NUL is kept as
// it is; anything else has each invalid sequence and each NUL replaced by
// U+FFFD, as Postgres text can hold it.
func TestStorableTextRule(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte{'a', 'Z', '0', '-', ' ', 0, 0x7f, 0x80, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xff}), 0, 90).Draw(t, "bytes")
		s := string(b)
		want := s
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			want = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		}
		if got := storableText(s); got != want {
			t.Fatalf("storableText(%q) = %q, want %q", s, got, want)
		}
	})
}

// FuzzStorableText checks the word-at-a-time ASCII pass against the
// byte-by-byte rule and storableText against the slow path, on any input.
func FuzzStorableText(f *testing.F) {
	for _, s := range []string{"", "a", "abcdefgh", "abcdefg\x00", "\x00bcdefgh", "abc\x80defgh", "01234567\x7f", "café", "req-\xff\x00id", "12345678\x01\x7f\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ascii := true
		for i := 0; i < len(s); i++ {
			if s[i] == 0 || s[i] >= utf8.RuneSelf {
				ascii = false
			}
		}
		if got := plainASCII(s); got != ascii {
			t.Fatalf("plainASCII(%q) = %v, want %v", s, got, ascii)
		}
		want := s
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			want = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		}
		if got := storableText(s); got != want {
			t.Fatalf("storableText(%q) = %q, want %q", s, got, want)
		}
	})
}
