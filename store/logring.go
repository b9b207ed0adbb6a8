package store

import (
	"sync"
	"time"
)

// logRing is the memory store's request log: the last logRingSize records.
//
// The records are encoded into slots that hold no pointers, so the slot
// array is one noscan allocation the GC never walks. Kept as []LogRecord,
// the ring would be most of the live heap and tens of thousands of
// pointers to separate heap objects, all re-scanned every GC cycle: GC work
// on every proxied request under load. A record its slot cannot
// hold (see logSlot.encode) is kept whole in side, which holds at most one
// entry per slot that failed that way.
type logRing struct {
	mu    sync.Mutex
	slots []logSlot
	side  map[int]LogRecord // slot index → the record, for slots marked side
	next  int
	full  bool
}

func (l *logRing) add(r LogRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.slots == nil {
		l.slots = make([]logSlot, logRingSize)
	}
	s := &l.slots[l.next]
	if s.side {
		delete(l.side, l.next)
	}
	if !s.encode(&r) {
		s.side = true
		if l.side == nil {
			l.side = map[int]LogRecord{}
		}
		l.side[l.next] = r
	}
	l.next++
	if l.next == len(l.slots) {
		l.next, l.full = 0, true
	}
}

// query returns matching records newest first.
func (l *logRing) query(q LogQuery) []LogRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := clampLimit(q.Limit)
	var out []LogRecord
	n := l.next
	if l.full {
		n = len(l.slots)
	}
	for i := 0; i < n && len(out) < limit; i++ {
		j := l.next - 1 - i
		if j < 0 {
			j += len(l.slots)
		}
		s := &l.slots[j]
		if s.side {
			if r := l.side[j]; q.matches(r) {
				out = append(out, r)
			}
		} else if s.matches(q) {
			out = append(out, s.decode())
		}
	}
	return out
}

// The strings of a record, in the order a slot stores them.
const (
	slotRequestID = iota
	slotProvider
	slotConnection
	slotModel
	slotErrorType
	slotReason
	slotEgressIP
	slotRoute
	slotStrings
)

// logSlotData is the room a slot has for a record's strings; 211 bytes make
// the slot 256 and the ring 2.5 MB (the LogRecords alone were 1.8 MB, their
// strings extra). A typical record needs 57 bytes (a 24-hex-char request id,
// "mock", "k1", "gpt-4o-mini" and the route "mock/gpt-4o-mini"); one with a
// UUID request id, a 50-byte model name asked for by name, a transport
// error, a reason and an IPv6 egress address about 195. Only a client's
// request id near its 128-byte cap together with long names does not fit,
// and goes to the side map. It must stay below 256 so that a length fits
// its uint8.
const logSlotData = 211

// logSlot is one record, encoded. String i of the record is the lens[i]
// bytes of data after those of the strings before it. When side is set the
// record lives in logRing.side and the rest of the slot is stale.
type logSlot struct {
	sec, latencyMs, firstByteMs, status int64
	nsec                                uint32
	lens                                [slotStrings]uint8
	side                                bool
	data                                [logSlotData]byte
}

// encode stores r in s and reports whether it could. It cannot when r has
// Headers (even an empty map, which must come back non-nil) or an
// ErrorBody, when its strings need more than logSlotData bytes, or when its
// Time would not come back identical from Unix seconds and nanoseconds in
// UTC (a zone, or a monotonic reading; sanitize removes both).
func (s *logSlot) encode(r *LogRecord) bool {
	if r.Headers != nil || r.ErrorBody != "" {
		return false
	}
	sec, nsec := r.Time.Unix(), r.Time.Nanosecond()
	// == compares the representation, which is what a caller comparing
	// records (reflect.DeepEqual) sees.
	if time.Unix(sec, int64(nsec)).UTC() != r.Time {
		return false
	}
	strs := [slotStrings]string{r.RequestID, r.Provider, r.Connection, r.Model, r.ErrorType, r.Reason, r.EgressIP, r.Route}
	total := 0
	for _, v := range strs {
		total += len(v)
	}
	if total > len(s.data) {
		return false
	}
	s.sec, s.nsec = sec, uint32(nsec)
	s.latencyMs, s.firstByteMs, s.status = r.LatencyMs, r.FirstByteMs, int64(r.Status)
	s.side = false
	off := 0
	for i, v := range strs {
		s.lens[i] = uint8(len(v))
		off += copy(s.data[off:], v)
	}
	return true
}

func (s *logSlot) time() time.Time { return time.Unix(s.sec, int64(s.nsec)).UTC() }

// field returns the bytes of string i.
func (s *logSlot) field(i int) []byte {
	off := 0
	for _, n := range s.lens[:i] {
		off += int(n)
	}
	return s.data[off : off+int(s.lens[i])]
}

// matches is LogQuery.matches read off the encoded fields, so a record that
// is filtered out costs no allocation. TestLogRingFilters checks that the
// two agree.
func (s *logSlot) matches(q LogQuery) bool {
	t := s.time()
	return (q.Since.IsZero() || !t.Before(q.Since)) && (q.Until.IsZero() || t.Before(q.Until)) &&
		(q.Provider == "" || string(s.field(slotProvider)) == q.Provider) &&
		(q.Connection == "" || string(s.field(slotConnection)) == q.Connection) &&
		(q.RequestID == "" || string(s.field(slotRequestID)) == q.RequestID)
}

func (s *logSlot) decode() LogRecord {
	total := 0
	for _, n := range s.lens {
		total += int(n)
	}
	all := string(s.data[:total]) // one allocation for the eight strings
	var strs [slotStrings]string
	off := 0
	for i, n := range s.lens {
		strs[i] = all[off : off+int(n)]
		off += int(n)
	}
	return LogRecord{Time: s.time(), RequestID: strs[slotRequestID], Provider: strs[slotProvider],
		Connection: strs[slotConnection], Model: strs[slotModel], Status: int(s.status), LatencyMs: s.latencyMs,
		FirstByteMs: s.firstByteMs, ErrorType: strs[slotErrorType], Reason: strs[slotReason], EgressIP: strs[slotEgressIP],
		Route: strs[slotRoute]}
}
