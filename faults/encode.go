package faults

import "time"

// RuleJSON is a rule in the scenario format (durations as Go duration
// strings), as GET /_faults shows it; PUT /_faults accepts it back.
type RuleJSON struct {
	Match       *Match         `json:"match,omitempty"`
	From        string         `json:"from,omitempty"`
	Until       string         `json:"until,omitempty"`
	Respond     *ResponseJSON  `json:"respond,omitempty"`
	Sequence    []ResponseJSON `json:"sequence,omitempty"`
	Flap        *FlapJSON      `json:"flap,omitempty"`
	Probability float64        `json:"probability,omitempty"`
}

// FlapJSON is Flap in the scenario format.
type FlapJSON struct {
	Down string `json:"down"`
	Up   string `json:"up"`
}

// ResponseJSON is a Response in the scenario format.
type ResponseJSON struct {
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	Latency string            `json:"latency,omitempty"`
	Jitter  string            `json:"jitter,omitempty"`
	Fault   string            `json:"fault,omitempty"`
	Stream  *StreamJSON       `json:"stream,omitempty"`
}

// StreamJSON is Stream in the scenario format.
type StreamJSON struct {
	Chunks         int    `json:"chunks,omitempty"`
	Interval       string `json:"interval,omitempty"`
	StallAfter     int    `json:"stallAfter,omitempty"`
	StallFor       string `json:"stallFor,omitempty"`
	BytesPerSecond int    `json:"bytesPerSecond,omitempty"`
	Numbered       bool   `json:"numbered,omitempty"`
	Malformed      int    `json:"malformed,omitempty"`
}

func dur(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// EncodeRules converts rules to the scenario format.
func EncodeRules(rules []Rule) []RuleJSON {
	out := make([]RuleJSON, 0, len(rules))
	for i := range rules {
		r := &rules[i]
		j := RuleJSON{From: dur(r.From), Until: dur(r.Until), Probability: r.Probability}
		if r.Match != (Match{}) {
			m := r.Match
			j.Match = &m
		}
		if r.Respond != nil {
			x := encodeResponse(r.Respond)
			j.Respond = &x
		}
		for k := range r.Sequence {
			j.Sequence = append(j.Sequence, encodeResponse(&r.Sequence[k]))
		}
		if r.Flap != nil {
			j.Flap = &FlapJSON{Down: dur(r.Flap.Down), Up: dur(r.Flap.Up)}
		}
		out = append(out, j)
	}
	return out
}

func encodeResponse(r *Response) ResponseJSON {
	j := ResponseJSON{Status: r.Status, Headers: r.Headers, Body: r.Body, Latency: dur(r.Latency),
		Jitter: dur(r.Jitter), Fault: r.Fault.String()}
	if r.Stream != (Stream{}) {
		j.Stream = &StreamJSON{Chunks: r.Stream.Chunks, Interval: dur(r.Stream.Interval),
			StallAfter: r.Stream.StallAfter, StallFor: dur(r.Stream.StallFor), BytesPerSecond: r.Stream.BytesPerSecond,
			Numbered: r.Stream.Numbered, Malformed: r.Stream.Malformed}
	}
	return j
}
