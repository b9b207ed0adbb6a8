package wire

import (
	"encoding/json"
	"strings"
)

// GeminiEmbedItem is one request of a batchEmbedContents body, as a
// Gemini upstream reads it: its parts' text, and the dimensions it asks
// for (0: the model's own).
type GeminiEmbedItem struct {
	Text       string
	Dimensions int
}

// ParseGeminiEmbed reads a batchEmbedContents body (the body
// EmbeddingsToGemini writes): at least one request.
func ParseGeminiEmbed(body []byte) ([]GeminiEmbedItem, error) {
	if firstByte(body) != '{' {
		return nil, reqErr("", "the body must be a JSON object")
	}
	var b struct {
		Requests []gemEmbedReq `json:"requests"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, decodeErr(err)
	}
	if len(b.Requests) == 0 {
		return nil, reqErr("requests", "at least one request is required")
	}
	out := make([]GeminiEmbedItem, len(b.Requests))
	for i, q := range b.Requests {
		var text strings.Builder
		for _, p := range q.Content.Parts {
			text.WriteString(p.Text)
		}
		out[i].Text = text.String()
		if q.OutputDimensionality != nil {
			out[i].Dimensions = *q.OutputDimensionality
		}
	}
	return out, nil
}
