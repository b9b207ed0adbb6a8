package sim

import (
	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/model"
)

// A resume attempt (model.Attempt.Resume) continues a broken stream: the
// gateway sends the delivered text as a prefill, and the upstream answers
// with the rest of its answer, refuses the prefill (prefill-refusal: 400),
// or starts over (prefill-restart), which the gateway detects when the
// text is numbered (model.ContinuationRestarts) and otherwise cannot.

// resumed is what sim knows of a resume attempt beyond its timeline.
type resumed struct {
	refused bool // the upstream answered the prefill with 400
	restart bool // the continuation restarts the answer, and that shows
}

// resumeResponse is the upstream's behaviour for a resume attempt after
// delivered content chunks.
func resumeResponse(resp *faults.Response, delivered int64) (*faults.Response, resumed) {
	c := resp.Clone()
	var rs resumed
	switch resp.Fault {
	case faults.PrefillRefusal:
		c.Fault, c.Status, c.Body = faults.None, 400, faults.PrefillRefusalBody
		rs.refused = true
		return &c, rs
	case faults.PrefillRestart:
		c.Fault = faults.None
		rs.restart = resp.Stream.Numbered
	}
	// A continuation with nothing left to say still streams its finish:
	// one chunk stands for it.
	c.Stream.Chunks = max(faults.ContinuationChunks(resp, int(delivered)), 1)
	c.Stream.StallAfter = min(c.Stream.StallAfter, c.Stream.Chunks)
	return &c, rs
}

// resumeEnd settles what a committed or resume attempt leaves: the chunks
// the client now has, and for a resume attempt whether its continuation
// reached the client (model.Attempt.Continued) — a restart is caught at its
// first content and ends the attempt as an output-validation failure.
// It returns when the attempt ends.
func (s *sim) resumeEnd(r *request, x *attempt, tl *timeline, rs *resumed, endAt model.Time) model.Time {
	if !x.a.Resume {
		r.delivered = tl.chunks
		return endAt
	}
	x.committed = r.stream // the client's stream is open whatever this attempt does
	switch {
	case rs.refused:
		x.out.Body = faults.PrefillRefusalBody
	case rs.restart && tl.firstByte >= 0 && s.now.Add(tl.firstByte) <= endAt && x.abort == abortNone:
		x.out = model.Outcome{Kind: model.OutcomeQuality}
		return s.now.Add(tl.firstByte)
	case tl.firstByte >= 0 && s.now.Add(tl.firstByte) <= endAt:
		x.a.Continued = true
		r.delivered += tl.chunks
	}
	return endAt
}
