package model

import "testing"

// docs/admission.md#concurrency-gates, docs/admission.md: the composite gate's admission check.
func TestAdmit(t *testing.T) {
	free := Slots{}
	full1 := Slots{InUse: 1, Cap: 1}
	cases := []struct {
		name string
		in   AdmitInput
		want AdmitDecision
	}{
		{"all unlimited goes", AdmitInput{QueueLeftMs: 10}, AdmitDecision{Action: AdmitGo}},
		{"below every cap goes", AdmitInput{Global: Slots{1, 2}, Provider: Slots{0, 1}, Connection: Slots{3, 4}, Model: Slots{0, 1}, QueueLeftMs: 1}, AdmitDecision{Action: AdmitGo}},
		{"free goes even with others queued (no head-of-line blocking)", AdmitInput{Queued: 5, MaxQueueDepth: 1}, AdmitDecision{Action: AdmitGo}},
		{"global cap blocks first", AdmitInput{Global: full1, Connection: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelGlobal}},
		{"provider cap", AdmitInput{Provider: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelProvider}},
		{"connection cap", AdmitInput{Connection: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelConnection}},
		{"model cap", AdmitInput{Connection: free, Model: full1, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelModel}},
		{"queue full on a connection cap", AdmitInput{Connection: full1, Queued: 2, MaxQueueDepth: 2, QueueLeftMs: 5},
			AdmitDecision{Action: AdmitReject, Code: CodeRateLimitQueueFull, Blocking: LevelConnection}},
		{"queue full on a global cap", AdmitInput{Global: full1, Queued: 1, MaxQueueDepth: 1, QueueLeftMs: 5},
			AdmitDecision{Action: AdmitReject, Code: CodeSemaphoreQueueFull, Blocking: LevelGlobal}},
		{"depth 0 is unbounded", AdmitInput{Connection: full1, Queued: 1000, QueueLeftMs: 5}, AdmitDecision{Action: AdmitWait, Blocking: LevelConnection}},
		{"queue budget spent", AdmitInput{Connection: full1, QueueLeftMs: 0},
			AdmitDecision{Action: AdmitReject, Code: CodeSemaphoreTimeout, Blocking: LevelConnection}},
		{"quota-share fails open when full", AdmitInput{Connection: full1, Queued: 1, MaxQueueDepth: 1, QueueLeftMs: 5, FailOpen: true},
			AdmitDecision{Action: AdmitBypass, Blocking: LevelConnection}},
		{"quota-share fails open on timeout", AdmitInput{Connection: full1, FailOpen: true}, AdmitDecision{Action: AdmitBypass, Blocking: LevelConnection}},
		{"quota-share still queues within budget", AdmitInput{Connection: full1, QueueLeftMs: 5, FailOpen: true}, AdmitDecision{Action: AdmitWait, Blocking: LevelConnection}},
		{"quota-share serialization off: the connection cap does not hold it", AdmitInput{Connection: full1, NoConnectionCap: true}, AdmitDecision{Action: AdmitGo}},
		{"quota-share serialization off: a model cap still does", AdmitInput{Connection: full1, Model: full1, NoConnectionCap: true, QueueLeftMs: 5},
			AdmitDecision{Action: AdmitWait, Blocking: LevelModel}},
		{"a saturated model gate only waits or refuses locally (never a lockout: Admit has no engine)", AdmitInput{Model: full1},
			AdmitDecision{Action: AdmitReject, Code: CodeSemaphoreTimeout, Blocking: LevelModel}},
	}
	for _, c := range cases {
		if got := Admit(c.in); got != c.want {
			t.Errorf("%s: Admit(%+v) = %+v, want %+v", c.name, c.in, got, c.want)
		}
	}
}

// docs/admission.md: per-connection pacing (rpm over 60 s, minTimeMs spacing).
func TestPace(t *testing.T) {
	cases := []struct {
		name string
		in   PaceInput
		want PaceDecision
	}{
		{"no limits", PaceInput{NowMs: 1000, Hits: []int64{999}, QueueLeftMs: 0}, PaceDecision{AtMs: 1000}},
		{"rpm not reached", PaceInput{NowMs: 1000, Hits: []int64{10, 20}, RPM: 3, QueueLeftMs: 0}, PaceDecision{AtMs: 1000}},
		{"rpm reached: wait for the oldest to leave", PaceInput{NowMs: 1000, Hits: []int64{10, 20, 30}, RPM: 3, QueueLeftMs: 60000},
			PaceDecision{AtMs: 60010}},
		{"rpm: the RPM-th most recent hit", PaceInput{NowMs: 1000, Hits: []int64{10, 20, 30}, RPM: 2, QueueLeftMs: 60000},
			PaceDecision{AtMs: 60020}},
		{"minTime spacing", PaceInput{NowMs: 1000, Hits: []int64{900}, MinTimeMs: 350, QueueLeftMs: 1000}, PaceDecision{AtMs: 1250}},
		{"minTime already passed", PaceInput{NowMs: 1000, Hits: []int64{500}, MinTimeMs: 350}, PaceDecision{AtMs: 1000}},
		{"FIFO behind a future reservation", PaceInput{NowMs: 1000, Hits: []int64{1200}, QueueLeftMs: 1000}, PaceDecision{AtMs: 1200}},
		{"slot after the queue budget: refused at once", PaceInput{NowMs: 1000, Hits: []int64{900}, MinTimeMs: 350, QueueLeftMs: 100},
			PaceDecision{AtMs: 1250, Code: CodeRateLimitQueueTimeout}},
		{"queue full", PaceInput{NowMs: 1000, Hits: []int64{1100}, Waiting: 2, MaxQueueDepth: 2, QueueLeftMs: 1000},
			PaceDecision{Code: CodeRateLimitQueueFull}},
		{"queue depth only matters when waiting", PaceInput{NowMs: 1000, Hits: []int64{10}, Waiting: 5, MaxQueueDepth: 1}, PaceDecision{AtMs: 1000}},
	}
	for _, c := range cases {
		if got := Pace(c.in); got != c.want {
			t.Errorf("%s: Pace = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestPacingApplies(t *testing.T) {
	// docs/admission.md rateLimitProtection and the apikey safety net: protection puts
	// a connection through the admission queue with NO rpm by default.
	s := DefaultSettings()
	cases := []struct {
		name       string
		profile    Profile
		protection bool
		autoEnable bool
		want       bool
	}{
		{"apikey covered by the safety net, no limit needed", ProfileAPIKey, false, true, true},
		{"safety net off: apikey needs explicit protection", ProfileAPIKey, false, false, false},
		{"oauth needs explicit protection", ProfileOAuth, false, true, false},
		{"local needs explicit protection", ProfileLocal, false, true, false},
		{"explicit protection", ProfileOAuth, true, false, true},
	}
	for _, c := range cases {
		s.RequestQueue.AutoEnableAPIKeyProviders = c.autoEnable
		if got := s.PacingApplies(c.profile, c.protection); got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}

// docs/admission.md#concurrency-gates: quota-share combos fail open with quotaShareConcurrencyLimit on
// (default), are not serialized with it off; other requests are neither.
func TestQuotaShareAdmission(t *testing.T) {
	s := DefaultSettings()
	if !s.QuotaShareConcurrencyLimit.Enabled {
		t.Fatalf("quotaShareConcurrencyLimit.enabled defaults to true")
	}
	if fo, nc := s.QuotaShareAdmission(true); !fo || nc {
		t.Fatalf("on: fail-open, serialized: %v %v", fo, nc)
	}
	if fo, nc := s.QuotaShareAdmission(false); fo || nc {
		t.Fatalf("not quota-share: hard cap: %v %v", fo, nc)
	}
	s.QuotaShareConcurrencyLimit.Enabled = false
	if fo, nc := s.QuotaShareAdmission(true); fo || !nc {
		t.Fatalf("off: no serialization: %v %v", fo, nc)
	}
}
