package model

// Admission (docs/admission.md#concurrency-gates, docs/admission.md): the pure checks behind the gateway's composite
// concurrency gate and per-connection pacing. The proxy owns the counters,
// queues and sleeping; what a request may do is decided here, so the
// simulator and the gateway admit alike.

// Level names one layer of the composite gate.
type Level uint8

const (
	LevelNone Level = iota
	LevelGlobal
	LevelProvider
	LevelConnection
	LevelModel
)

func (l Level) String() string {
	return [...]string{"", "global", "provider", "connection", "model"}[l]
}

// Slots is one gate layer: slots in use and its cap (0 = unlimited).
type Slots struct {
	InUse, Cap int
}

// Free reports whether the layer has a slot left.
func (s Slots) Free() bool { return s.Cap <= 0 || s.InUse < s.Cap }

// AdmitInput is everything the admission check looks at.
type AdmitInput struct {
	Global, Provider, Connection, Model Slots
	// Queued is how many jobs already wait for this provider+connection.
	Queued        int
	MaxQueueDepth int   // 0 = unbounded
	QueueLeftMs   int64 // what is left of the request's queue budget
	// FailOpen: quota-share serialization (docs/admission.md#concurrency-gates) proceeds without a slot
	// instead of refusing.
	FailOpen bool
	// NoConnectionCap: a quota-share request with
	// quotaShareConcurrencyLimit off is not serialized on the connection's
	// semaphore (it still counts as in use there); the other layers apply.
	NoConnectionCap bool
}

// QuotaShareAdmission is how a request's admission treats quota-share
// (docs/admission.md#concurrency-gates): a quota-share combo's requests fail open when
// quotaShareConcurrencyLimit is on (the default), and are not serialized on
// the connection semaphore at all when it is off. Other requests: neither.
func (s *Settings) QuotaShareAdmission(quotaShareCombo bool) (failOpen, noConnectionCap bool) {
	if !quotaShareCombo {
		return false, false
	}
	return s.QuotaShareConcurrencyLimit.Enabled, !s.QuotaShareConcurrencyLimit.Enabled
}

// AdmitAction is what the gate does with a request.
type AdmitAction uint8

const (
	AdmitGo     AdmitAction = iota // take the slots now
	AdmitWait                      // queue until the slots free up
	AdmitReject                    // refuse with Code
	AdmitBypass                    // fail-open: run without a slot
)

// AdmitDecision is the admission check's answer.
type AdmitDecision struct {
	Action AdmitAction
	Code   Code // with AdmitReject
	// Blocking is the first layer without a free slot.
	Blocking Level
}

// Admit is the pure admission check of the composite gate global → provider →
// connection → model, taken atomically; the strictest layer wins. A request whose every layer has a free
// slot goes at once. Otherwise it queues, unless the connection's queue is
// full (maxQueueDepth: SEMAPHORE_QUEUE_FULL when a global or provider cap
// blocks, RATE_LIMIT_QUEUE_FULL when the connection or one of its models
// does) or its queue budget is spent (SEMAPHORE_TIMEOUT). Quota-share
// requests fail open instead of being refused.
func Admit(in AdmitInput) AdmitDecision {
	blocking := LevelNone
	switch {
	case !in.Global.Free():
		blocking = LevelGlobal
	case !in.Provider.Free():
		blocking = LevelProvider
	case !in.Connection.Free() && !in.NoConnectionCap:
		blocking = LevelConnection
	case !in.Model.Free():
		blocking = LevelModel
	}
	if blocking == LevelNone {
		return AdmitDecision{Action: AdmitGo}
	}
	refuse := func(code Code) AdmitDecision {
		if in.FailOpen {
			return AdmitDecision{Action: AdmitBypass, Blocking: blocking}
		}
		return AdmitDecision{Action: AdmitReject, Code: code, Blocking: blocking}
	}
	if in.MaxQueueDepth > 0 && in.Queued >= in.MaxQueueDepth {
		if blocking == LevelGlobal || blocking == LevelProvider {
			return refuse(CodeSemaphoreQueueFull)
		}
		return refuse(CodeRateLimitQueueFull)
	}
	if in.QueueLeftMs <= 0 {
		return refuse(CodeSemaphoreTimeout)
	}
	return AdmitDecision{Action: AdmitWait, Blocking: blocking}
}

// PaceWindowMs is the rpm window.
const PaceWindowMs = 60_000

// PaceInput is a connection limiter's state at NowMs.
type PaceInput struct {
	NowMs int64
	// Hits are the dispatch times already taken (reservations included),
	// ascending; none is older than the window.
	Hits          []int64
	RPM           int   // 0 = no rpm limit
	MinTimeMs     int64 // 0 = no spacing
	Waiting       int   // reservations still in the future (queued jobs)
	MaxQueueDepth int   // 0 = unbounded
	QueueLeftMs   int64 // what is left of the request's queue budget
	// PausedUntilMs: the limiter drains until then (a body-declared retry or
	// a learned zero-remaining window, docs/admission.md); 0 = not paused.
	PausedUntilMs int64
}

// PaceDecision says when the request may dispatch, or why it may not.
type PaceDecision struct {
	AtMs int64 // dispatch time (>= NowMs) when Code is ""
	Code Code  // RATE_LIMIT_QUEUE_FULL or RATE_LIMIT_QUEUE_TIMEOUT
}

// Pace is the pure pacing rule: the earliest instant, not before the last
// reservation (FIFO), that leaves fewer than RPM dispatches in the trailing
// window and at least MinTimeMs after the previous one. A request that would
// have to wait while maxQueueDepth jobs already wait is refused
// (RATE_LIMIT_QUEUE_FULL); one whose queue budget ends before its slot is
// refused at once (RATE_LIMIT_QUEUE_TIMEOUT) instead of waiting in vain.
func Pace(in PaceInput) PaceDecision {
	at := in.NowMs
	n := len(in.Hits)
	if n > 0 {
		last := in.Hits[n-1]
		at = max(at, last)
		if in.MinTimeMs > 0 {
			at = max(at, last+in.MinTimeMs)
		}
	}
	if in.RPM > 0 && n >= in.RPM {
		// fewer than RPM hits in (at-W, at]: the RPM-th most recent one must
		// have left the window
		at = max(at, in.Hits[n-in.RPM]+PaceWindowMs)
	}
	at = max(at, in.PausedUntilMs)
	if at <= in.NowMs {
		return PaceDecision{AtMs: in.NowMs}
	}
	if in.MaxQueueDepth > 0 && in.Waiting >= in.MaxQueueDepth {
		return PaceDecision{Code: CodeRateLimitQueueFull}
	}
	if at-in.NowMs > in.QueueLeftMs {
		return PaceDecision{AtMs: at, Code: CodeRateLimitQueueTimeout}
	}
	return PaceDecision{AtMs: at}
}

// PacingApplies says whether a connection's requests go through its
// admission-queue limiter (docs/admission.md): protection is on explicitly
// (rateLimitProtection: true), or by the safety net that covers every active
// apikey-profile connection (requestQueue.autoEnableApiKeyProviders). false
// and unset mean the same. No limit needs to be set: a covered connection
// with no rpm / minTimeMs still honours body-declared retry pauses and
// learned x-ratelimit-* windows.
func (s *Settings) PacingApplies(profile Profile, protection bool) bool {
	return protection || (s.RequestQueue.AutoEnableAPIKeyProviders && profile == ProfileAPIKey)
}
