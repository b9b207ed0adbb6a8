package model

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var cut = Outcome{Kind: OutcomeTransport, Transport: TransportEarlyEOF}

// resumeCombo is a priority combo primary → fallback, each provider with
// one connection and the given continuation.
func resumeCombo(t *testing.T, primary, fallback string, edit func(*Settings)) *Engine {
	t.Helper()
	p := ProviderConfig{ID: "primary", Profile: ProfileAPIKey, Models: []string{"m"}, Continuation: primary, Connections: []ConnectionConfig{{ID: "k"}}}
	f := ProviderConfig{ID: "fallback", Profile: ProfileAPIKey, Models: []string{"m"}, Continuation: fallback, Connections: []ConnectionConfig{{ID: "k"}}}
	tp := topo(p, f)
	tp.Combos = []ComboConfig{{ID: "c", Strategy: Priority, Targets: []ComboTarget{{Provider: "primary", Model: "m"}, {Provider: "fallback", Model: "m"}}}}
	return mustEngine(t, tp, edit)
}

// resumeDrive is drive that also keeps whether each attempt was a resume
// and its continuation style; respond sets Continued itself.
func resumeDrive(t *testing.T, e *Engine, respond func(a *Attempt, n int) (Outcome, bool)) (Step, []string) {
	t.Helper()
	st, trail, _ := drive(t, e, at(0), "c", func(a *Attempt, n int) (Outcome, bool) {
		o, c := respond(a, n)
		return o, c
	})
	return st, trail
}

func TestResumeContinuesABrokenStreamOnTheNextTargetThatCan(t *testing.T) {
	// The stream rule: a stream cut after content reached the client is
	// continued on the next target that can continue (S08).
	e := resumeCombo(t, "assistant", "assistant", nil)
	var resumed []bool
	st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) {
		resumed = append(resumed, a.Resume)
		if n == 1 {
			return cut, true
		}
		if a.Continuation != ContinueAssistant {
			t.Fatalf("continuation %v", a.Continuation)
		}
		a.Continued = true
		return status(200), true
	})
	if st.Result != ResultFallback || st.Status != 200 || strings.Join(trail, ",") != "primary/k,fallback/k" {
		t.Fatalf("%+v %v", st, trail)
	}
	if resumed[0] || !resumed[1] {
		t.Fatalf("resume flags %v", resumed)
	}
}

func TestResumeRefusedPrefillPassesToTheOriginalTarget(t *testing.T) {
	// S14: the fallback refuses the prefill (400); the primary, whose
	// stream broke (and which is cooling from that break), continues. The
	// refusal never becomes the final error.
	e := resumeCombo(t, "assistant", "assistant", nil)
	st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) {
		switch n {
		case 1:
			return cut, true
		case 2:
			return status(400), true
		}
		a.Continued = true
		return status(200), true
	})
	if st.Result != ResultFallback || strings.Join(trail, ",") != "primary/k,fallback/k,primary/k" {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestResumeSkipsTargetsThatCannotContinue(t *testing.T) {
	// Capability: a provider without a continuation style is never sent a
	// prefill; the broken primary continues itself.
	e := resumeCombo(t, "prefix", "", nil)
	var styles []Continuation
	st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) {
		if n == 1 {
			return cut, true
		}
		styles = append(styles, a.Continuation)
		a.Continued = true
		return status(200), true
	})
	if st.Result != ResultFallback || strings.Join(trail, ",") != "primary/k,primary/k" || styles[0] != ContinuePrefix {
		t.Fatalf("%+v %v %v", st, trail, styles)
	}
}

func TestResumeThatCannotHappenEndsWithTheBreaksErrorEvent(t *testing.T) {
	cases := map[string]func(*Settings){
		"off":      func(s *Settings) { s.StreamResume.Enabled = false },
		"budget":   func(s *Settings) { s.RequestBudget.MaxAttempts = 1 },
		"no-style": nil,
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			style := "assistant"
			if name == "no-style" {
				style = ""
			}
			e := resumeCombo(t, style, style, edit)
			st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) { return cut, true })
			if st.Result != ResultStreamError || st.Err.Code != CodeStreamInterrupted || len(trail) != 1 {
				t.Fatalf("%+v %v", st, trail)
			}
		})
	}
}

func TestResumeEveryTargetRefusesEndsWithTheBreakNotTheRefusal(t *testing.T) {
	e := resumeCombo(t, "assistant", "assistant", nil)
	st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) {
		if n == 1 {
			return Outcome{Kind: OutcomeStall}, true
		}
		return status(400), true
	})
	if st.Result != ResultStreamError || st.Err.Code != CodeStreamStall || len(trail) != 3 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestResumeNotForAClientAbortNorAnEmptyAnswer(t *testing.T) {
	for _, o := range []Outcome{{Kind: OutcomeQuality}, {Kind: OutcomeResponse, Status: 500}, {Kind: OutcomeLocalQueue}} {
		e := resumeCombo(t, "assistant", "assistant", nil)
		st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) { return o, true })
		if st.Result != ResultStreamError || len(trail) != 1 {
			t.Fatalf("%v: %+v %v", o.Kind, st, trail)
		}
	}
}

func TestResumeBlockedByTheShell(t *testing.T) {
	// A tool call in progress: the shell blocks resume.
	e := resumeCombo(t, "assistant", "assistant", nil)
	f := e.StartFlow(at(0), route(t, e, "c"), "", nil)
	f.ResumeBlocked = true
	var sel Selection
	st := f.Next(at(0), e, &sel)
	if _, ans := f.Record(at(10), e, &st.Attempt, Report{Outcome: cut, Committed: true}); ans == nil || ans.Result != ResultStreamError {
		t.Fatalf("%+v", ans)
	}
}

func TestResumeBoundedByMaxResumes(t *testing.T) {
	// Each break of the continued stream is a new resume, at most
	// streamResume.maxResumes of them.
	e := resumeCombo(t, "assistant", "assistant", func(s *Settings) { s.StreamResume.MaxResumes = 1 })
	st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) {
		if a.Resume {
			a.Continued = true
		}
		return cut, true
	})
	if st.Result != ResultStreamError || len(trail) != 2 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestResumeRespectsTheDeadline(t *testing.T) {
	e := resumeCombo(t, "assistant", "assistant", func(s *Settings) { s.RequestBudget.DeadlineMs = 10 })
	st, trail := resumeDrive(t, e, func(a *Attempt, n int) (Outcome, bool) { return cut, true })
	if st.Result != ResultStreamError || len(trail) != 1 {
		t.Fatalf("%+v %v", st, trail)
	}
}

func TestContinuationOfTypeDefaultAndOverride(t *testing.T) {
	if ContinuationOf("anthropic", "") != ContinueNative || ContinuationOf("openai", "") != ContinueNone ||
		ContinuationOf("local", "continue-final-message") != ContinueFinalMessage || ContinuationOf("anthropic", "none") != ContinueNone {
		t.Fatal("continuation defaults")
	}
	if _, err := ParseContinuation("sometimes"); err == nil {
		t.Fatal("unknown continuation accepted")
	}
	tp := topo(ProviderConfig{ID: "p", Continuation: "maybe", Connections: []ConnectionConfig{{ID: "k"}}})
	if err := tp.validate(); err == nil || !strings.Contains(err.Error(), "continuation") {
		t.Fatalf("validate: %v", err)
	}
}

func TestContinuationRestartsDetectsARestartedAnswer(t *testing.T) {
	d := "The capital of France is Paris, a city of"
	if !ContinuationRestarts(d, "The capital of France is Paris, a city of two") {
		t.Fatal("restart not detected")
	}
	if ContinuationRestarts(d, " two million people") {
		t.Fatal("a continuation taken for a restart")
	}
	// A repetitive answer may continue with its opening: not judged.
	rep := strings.Repeat("lorem ipsum dol ", 4)
	if RestartCheckBytes(rep) != 0 || ContinuationRestarts(rep, rep) {
		t.Fatal("repetitive text judged")
	}
	if RestartCheckBytes("short") != 0 {
		t.Fatal("too short to judge")
	}
	if ContinuationRestarts(d, "The cap") {
		t.Fatal("judged on too few bytes")
	}
}

func TestMalformedEventsBound(t *testing.T) {
	s := DefaultSettings()
	s.StreamRecovery.MalformedEvents = MalformedEventBound{MaxConsecutive: 2, MaxTotal: 3}
	var m MalformedEvents
	if !m.Bad(&s) || !m.Bad(&s) {
		t.Fatal("skipped events within the bound end the stream")
	}
	if m.Bad(&s) {
		t.Fatal("three in a row kept going")
	}
	var m2 MalformedEvents
	for i := 0; i < 3; i++ {
		if !m2.Bad(&s) {
			t.Fatalf("bad %d", i)
		}
		m2.Good()
	}
	if m2.Bad(&s) || m2.Total() != 4 {
		t.Fatal("the total bound")
	}
	var one MalformedEvents
	if d := DefaultSettings(); !one.Bad(&d) {
		t.Fatal("one malformed event is fatal by default")
	}
}

// The resume rules as properties, over random breaks, refusals, restarts
// and continuations: a flow whose stream committed never answers anything
// but the stream's end (served after a resume, its error event, or the
// client's going away), never makes more attempts than the budget, never
// sends a prefill to a provider that cannot continue, and never resumes a
// stream more often than maxResumes.
func TestResumePropertiesRapid(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		styles := []string{"", "assistant", "prefix", "native"}
		pStyle := rapid.SampledFrom(styles).Draw(rt, "primary")
		fStyle := rapid.SampledFrom(styles).Draw(rt, "fallback")
		maxAttempts := rapid.IntRange(1, 8).Draw(rt, "maxAttempts")
		maxResumes := rapid.IntRange(0, 3).Draw(rt, "maxResumes")
		e := resumeCombo(t, pStyle, fStyle, func(s *Settings) {
			s.RequestBudget.MaxAttempts = maxAttempts
			s.StreamResume.MaxResumes = maxResumes
		})
		f := e.StartFlow(at(0), route(t, e, "c"), "", nil)
		var sel Selection
		now := at(0)
		breaks, committed := 0, false
		outcomes := []Outcome{cut, {Kind: OutcomeStall}, {Kind: OutcomeThroughput}, status(400), status(200),
			{Kind: OutcomeQuality}, {Kind: OutcomeClientAbort}, status(503)}
		for i := 0; i < 50; i++ {
			st := f.Next(now, e, &sel)
			if st.Kind == StepAnswer {
				if committed && !(st.Result == ResultStreamError || st.Result == ResultFallback || st.Result == ResultServed || st.Status == 499) {
					rt.Fatalf("a committed stream answered %+v", st)
				}
				if committed && st.Result == ResultStreamError && st.Status != 200 {
					rt.Fatalf("stream error with status %d", st.Status)
				}
				if f.Attempts() > maxAttempts {
					rt.Fatalf("%d attempts, budget %d", f.Attempts(), maxAttempts)
				}
				if f.resumes() > maxResumes || f.resumes() > breaks {
					rt.Fatalf("%d resumes, %d breaks, max %d", f.resumes(), breaks, maxResumes)
				}
				return
			}
			if st.Kind == StepWait {
				now = now.Add(st.WaitMs)
				continue
			}
			a := st.Attempt
			if a.Resume && e.continuationOf(int(a.p)) == ContinueNone {
				rt.Fatalf("a prefill sent to %s, which cannot continue", a.Provider)
			}
			if a.Resume && !committed {
				rt.Fatal("a resume before anything was committed")
			}
			o := rapid.SampledFrom(outcomes).Draw(rt, "outcome")
			c := committed || rapid.Bool().Draw(rt, "commits")
			if a.Resume {
				a.Continued = rapid.Bool().Draw(rt, "continued")
			}
			if c && resumable(o) && (!a.Resume || a.Continued) {
				breaks++
			}
			committed = c
			now = now.Add(10)
			if _, ans := f.Record(now, e, &a, Report{Outcome: o, Committed: c}); ans != nil {
				if committed && !(ans.Result == ResultStreamError || ans.Result == ResultFallback || ans.Result == ResultServed || ans.Status == 499) {
					rt.Fatalf("a committed stream answered %+v", ans)
				}
				if f.Attempts() > maxAttempts {
					rt.Fatalf("%d attempts, budget %d", f.Attempts(), maxAttempts)
				}
				return
			}
		}
		rt.Fatal("the flow did not end")
	})
}

// ResumeResult: a 4xx to a prefill not yet continued is a refusal, a
// quality failure there a restart, anything delivered a continuation.
func TestResumeResultNamesHowAResumeEnded(t *testing.T) {
	fresh, cont := &Attempt{}, &Attempt{Continued: true}
	cases := []struct {
		a         *Attempt
		o         Outcome
		delivered bool
		want      string
	}{
		{fresh, Outcome{Kind: OutcomeResponse, Status: 200}, true, "continued"},
		{fresh, Outcome{Kind: OutcomeResponse, Status: 400}, false, "refused"},
		{cont, Outcome{Kind: OutcomeResponse, Status: 400}, false, "failed"},
		{fresh, Outcome{Kind: OutcomeResponse, Status: 503}, false, "failed"},
		{fresh, Outcome{Kind: OutcomeQuality}, false, "restarted"},
		{fresh, Outcome{Kind: OutcomeTransport}, false, "failed"},
	}
	for _, c := range cases {
		if got := ResumeResult(c.a, &c.o, c.delivered); got != c.want {
			t.Errorf("%+v %+v delivered=%v: %q, want %q", c.a, c.o, c.delivered, got, c.want)
		}
	}
}
