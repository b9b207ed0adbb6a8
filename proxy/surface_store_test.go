package proxy

import (
	"strconv"
	"testing"
	"time"
)

// Stored responses: past the retention they are gone; only the key that
// stored one reads it; the count and byte bounds evict the oldest first.
func TestResponsesStoreRetentionAndBounds(t *testing.T) {
	var s surfaceState
	t0 := time.Unix(1000, 0)
	s.putResponse("a", &respRecord{key: "k", expires: t0.Add(time.Hour), size: 10}, t0)
	if _, ok := s.getResponse("a", "k", t0.Add(time.Minute)); !ok {
		t.Fatal("stored response not found")
	}
	if _, ok := s.getResponse("a", "other", t0); ok {
		t.Fatal("another key read it")
	}
	if _, ok := s.getResponse("a", "k", t0.Add(time.Hour+time.Second)); ok {
		t.Fatal("read past its retention")
	}
	for i := 0; i < maxStoredResponses+10; i++ {
		s.putResponse(strconv.Itoa(i), &respRecord{expires: t0.Add(time.Hour), size: 1}, t0)
	}
	if len(s.resps) != maxStoredResponses || len(s.order) != maxStoredResponses {
		t.Fatalf("count bound: %d %d", len(s.resps), len(s.order))
	}
	if _, ok := s.getResponse("0", "", t0); ok {
		t.Fatal("the oldest was kept over the bound")
	}
	s.putResponse("big", &respRecord{expires: t0.Add(time.Hour), size: maxStoredResponseBytes - 5}, t0)
	if s.bytes > maxStoredResponseBytes {
		t.Fatalf("byte bound: %d", s.bytes)
	}
	if _, ok := s.getResponse("big", "", t0); !ok {
		t.Fatal("the newest is kept")
	}
	s.putResponse("huge", &respRecord{expires: t0.Add(time.Hour), size: maxStoredResponseBytes + 1}, t0)
	if _, ok := s.getResponse("huge", "", t0); ok {
		t.Fatal("a record over the whole bound is not kept")
	}
}
