package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/breakwater-gw/breakwater/sim"
)

// A traffic item's client format (sim.Traffic.Format) decides the
// endpoint, the body and how the answer's error code and status read, so
// a scenario plays through the gateway's own surface for that format.

// requestFor is the endpoint and body of request n of a traffic item.
func requestFor(t *sim.Traffic, n int) (string, []byte) {
	text := "replay request " + strconv.Itoa(n)
	var path string
	var body map[string]any
	switch t.Format {
	case sim.FormatMessages:
		path = "/v1/messages"
		body = map[string]any{"model": t.Model, "stream": t.Stream, "max_tokens": 1024,
			"messages": []map[string]string{{"role": "user", "content": text}}}
	case sim.FormatResponses:
		path = "/v1/responses"
		body = map[string]any{"model": t.Model, "stream": t.Stream, "input": text}
	case sim.FormatEmbeddings:
		path = "/v1/embeddings"
		body = map[string]any{"model": t.Model, "input": []string{text}}
	default:
		path = "/v1/chat/completions"
		body = map[string]any{"model": t.Model, "stream": t.Stream,
			"messages": []map[string]string{{"role": "user", "content": text}}}
	}
	b, _ := json.Marshal(body)
	return path, b
}

// modelStatus is the status the simulator would give for what a client
// of format saw: Anthropic's 529 overloaded_error is the gateway's 503.
func modelStatus(format string, status int) int {
	if format == sim.FormatMessages && status == 529 {
		return http.StatusServiceUnavailable
	}
	return status
}

// formatErrorCode reads the gateway's error code from an error body of a
// format: the OpenAI shape's code, or Anthropic's message, which the
// gateway leads with its code ("stream_interrupted: …").
func formatErrorCode(format string, b []byte) string {
	if format != sim.FormatMessages {
		return errorCode(b)
	}
	var v struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &v) != nil {
		return ""
	}
	if code, _, ok := strings.Cut(v.Error.Message, ": "); ok && !strings.ContainsAny(code, " \t") {
		return code
	}
	return v.Error.Type
}

// readFormatSSE reads a stream of a format to its end and returns the
// error code of its error event ("" when none) and, for a stream the
// gateway resumed, who continued it and after how many attempts.
func readFormatSSE(format string, body io.Reader) (code, by string, attempts int, err error) {
	if format == "" || format == sim.FormatChat {
		return readSSE(body)
	}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	code, event := "", ""
	for sc.Scan() {
		line := sc.Bytes()
		if who, n, ok := resumedBy(line); ok {
			by, attempts = who, n
			continue
		}
		if name, ok := bytes.CutPrefix(line, []byte("event:")); ok {
			event = string(bytes.TrimSpace(name))
			continue
		}
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok || event != "error" {
			continue
		}
		data = bytes.TrimSpace(data)
		switch format {
		case sim.FormatMessages:
			code = formatErrorCode(format, data)
		case sim.FormatResponses:
			var v struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal(data, &v)
			code = v.Code
		}
		if code == "" {
			code = "stream_error"
		}
	}
	return code, by, attempts, sc.Err()
}
