package model

// The SSE error event that ends a committed stream (docs/streams.md#abort,
// docs/classification.md#restatement) names why the stream ended. Both shells take the code from here, so a
// replayed scenario and a simulated one report the same code.

// Stream error codes of the event that ends a committed stream.
const (
	CodeStreamStall       Code = "stream_stall"              // content-stall watchdog
	CodeStreamThroughput  Code = "stream_throughput_too_low" // throughput watchdog
	CodeStreamInterrupted Code = "stream_interrupted"        // the upstream cut the stream (transport)
	CodeStreamTimeout     Code = "stream_attempt_timeout"    // the gateway cut it at upstreamTimeouts.attemptMs
	CodeStreamEmpty       Code = "empty_response"            // ended without any content
	CodeStreamUpstream    Code = "upstream_error"            // the upstream sent an error event
)

// StreamErrorCode is the code and message of the SSE error event for an
// outcome that ended a committed stream.
func StreamErrorCode(o Outcome) (Code, string) {
	switch o.Kind {
	case OutcomeStall:
		return CodeStreamStall, "the upstream stream stalled: no content within the stall budget (upstreamTimeouts.firstContentMs before the first content, streamIdleMs after it)"
	case OutcomeThroughput:
		return CodeStreamThroughput, "the upstream stream fell below the minimum useful output rate"
	case OutcomeQuality:
		return CodeStreamEmpty, "the upstream stream ended without any content"
	case OutcomeLocalQueue: // after commit only the execution bound can end an attempt locally
		return CodeExecutionTimeout, "the upstream attempt reached the execution bound (requestQueue.executionMaxWaitMs)"
	case OutcomeClientAbort:
		return CodeClientClosed, "request aborted"
	case OutcomeResponse:
		return CodeStreamUpstream, "the upstream sent an error event mid-stream"
	case OutcomeTransport:
		if o.Transport == TransportAttemptTimeout {
			// Not the upstream's cut: the gateway's own bound ended it.
			return CodeStreamTimeout, "the attempt reached its time limit (upstreamTimeouts.attemptMs) and the gateway ended the stream"
		}
		return CodeStreamInterrupted, "the upstream stream ended early (" + o.Transport.String() + ")"
	}
	return CodeStreamInterrupted, "the upstream stream ended early"
}
