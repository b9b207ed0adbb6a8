package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"

	"github.com/breakwater-gw/breakwater/internal/jsonvalid"
)

// readChunk decodes a chat.completion.chunk into c as encoding/json
// would, without reflection: the stream's first chunk (the role) and its
// last ones (the finish, the usage) are on the way to the client's first
// and last events, and encoding/json costs several times the rest of
// their translation. Whatever the walk does not read the way
// encoding/json does — an error object, a key only case-insensitive
// matching finds, a value of an unexpected type — is decoded by
// encoding/json instead, so the result is the same either way. Strings
// are copied; StopReason is a slice of data.
func readChunk(data []byte, c *ChatChunk) error {
	choices := c.Choices[:0]
	*c = ChatChunk{Choices: choices}
	if firstByte(data) == '{' && jsonvalid.Valid(data) && c.read(data[skipWS(data, 0):]) == nil {
		return nil
	}
	*c = ChatChunk{}
	return json.Unmarshal(data, c)
}

// errSlowChunk: the chunk needs encoding/json.
var errSlowChunk = errors.New("wire: chunk read by encoding/json")

var chunkKeys = []string{"id", "model", "choices", "usage", "error"}

func (c *ChatChunk) read(obj []byte) error {
	var err error
	for k, v := range members(obj) {
		switch string(k) {
		case "id":
			c.ID, err = chunkStr(v)
		case "model":
			c.Model, err = chunkStr(v)
		case "choices":
			c.Choices = c.Choices[:0]
			err = c.readChoices(v)
		case "usage":
			switch {
			case firstByte(v) == '{' && !foldedUsage(v):
				c.Usage = &ChatUsage{}
				err = readUsage(v, c.Usage)
			case !isNull(v):
				err = errSlowChunk
			}
		case "error":
			if !isNull(v) {
				err = errSlowChunk // rare: encoding/json reads it
			}
		default:
			err = oddKey(k, chunkKeys)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var choiceKeys = []string{"index", "delta", "finish_reason", "stop_reason"}

func (c *ChatChunk) readChoices(arr []byte) error {
	if isNull(arr) {
		c.Choices = nil
		return nil
	}
	if c.Choices == nil {
		c.Choices = []ChatChunkChoice{} // [] is an empty list, not none
	}
	return eachObject(arr, func(el []byte) error {
		c.Choices = append(c.Choices, ChatChunkChoice{})
		return c.Choices[len(c.Choices)-1].read(el)
	})
}

func (ch *ChatChunkChoice) read(obj []byte) error {
	var err error
	for k, v := range members(obj) {
		switch string(k) {
		case "index":
			ch.Index, err = chunkInt(v)
		case "delta":
			err = ch.Delta.read(v)
		case "finish_reason":
			ch.FinishReason, err = chunkStrPtr(v)
		case "stop_reason":
			ch.StopReason = v
		default:
			err = oddKey(k, choiceKeys)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// eachObject calls fn with each element of an array of objects (null is
// none; anything else is encoding/json's to read).
func eachObject(arr []byte, fn func(obj []byte) error) error {
	if isNull(arr) {
		return nil
	}
	if firstByte(arr) != '[' {
		return errSlowChunk
	}
	for _, el := range elements(arr) {
		if firstByte(el) != '{' {
			return errSlowChunk
		}
		if err := fn(el); err != nil {
			return err
		}
	}
	return nil
}

var deltaKeys = []string{"content", "reasoning_content", "reasoning", "tool_calls"}

func (d *ChatChunkDelta) read(obj []byte) error {
	return eachMember(obj, func(k, v []byte) error {
		var err error
		switch string(k) {
		case "content":
			d.Content, err = chunkStrPtr(v)
		case "reasoning_content":
			d.ReasoningContent, err = chunkStrPtr(v)
		case "reasoning":
			d.Reasoning, err = chunkStrPtr(v)
		case "tool_calls":
			err = d.readCalls(v)
		default:
			err = oddKey(k, deltaKeys)
		}
		return err
	})
}

// eachMember calls fn with each member of an object (null is none;
// anything else is encoding/json's to read).
func eachMember(obj []byte, fn func(k, v []byte) error) error {
	if isNull(obj) {
		return nil
	}
	if firstByte(obj) != '{' {
		return errSlowChunk
	}
	for k, v := range members(obj) {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

var callKeys = []string{"index", "id", "function"}

func (d *ChatChunkDelta) readCalls(arr []byte) error {
	if isNull(arr) {
		return nil
	}
	d.ToolCalls = []ChatChunkCall{}
	return eachObject(arr, func(obj []byte) error {
		var tc ChatChunkCall
		for k, v := range members(obj) {
			var err error
			switch string(k) {
			case "index":
				tc.Index, err = chunkInt(v)
			case "id":
				tc.ID, err = chunkStr(v)
			case "function":
				err = readChunkFunction(v, &tc.Function)
			default:
				err = oddKey(k, callKeys)
			}
			if err != nil {
				return err
			}
		}
		d.ToolCalls = append(d.ToolCalls, tc)
		return nil
	})
}

func readChunkFunction(obj []byte, f *ChatFunction) error {
	return eachMember(obj, func(k, v []byte) error {
		var err error
		switch string(k) {
		case "name":
			f.Name, err = chunkStr(v)
		case "arguments":
			f.Arguments, err = chunkStr(v)
		default:
			err = oddKey(k, fnKeys)
		}
		return err
	})
}

var fnKeys = []string{"name", "arguments"}

// oddKey: a key the walk does not know is skipped, as encoding/json
// skips it, unless encoding/json would match it to a field (another
// letter case, escapes).
func oddKey(k []byte, known []string) error {
	if bytes.IndexByte(k, '\\') >= 0 {
		return errSlowChunk
	}
	for _, n := range known {
		if len(k) == len(n) && bytes.EqualFold(k, []byte(n)) {
			return errSlowChunk
		}
	}
	return nil
}

var usageKeys = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
	"completion_tokens_details", "cached_tokens", "reasoning_tokens"}

// foldedUsage reports whether usage (or its details) has a key only
// encoding/json's case-insensitive matching reads.
func foldedUsage(obj []byte) bool {
	for k, v := range members(obj) {
		if oddKey(k, usageKeys) != nil && !slices.Contains(usageKeys, string(k)) {
			return true
		}
		if firstByte(v) == '{' && foldedUsage(v) {
			return true
		}
	}
	return false
}

// chunkStr reads a string (null: ""; another type: encoding/json's error).
func chunkStr(v []byte) (string, error) {
	switch firstByte(v) {
	case '"':
		return str(v), nil
	case 'n':
		return "", nil
	}
	return "", errSlowChunk
}

func chunkStrPtr(v []byte) (*string, error) {
	switch firstByte(v) {
	case '"':
		s := str(v)
		return &s, nil
	case 'n':
		return nil, nil
	}
	return nil, errSlowChunk
}

func chunkInt(v []byte) (int, error) {
	if firstByte(v) == 'n' {
		return 0, nil
	}
	n, ok, err := intVal(v, nil, "")
	if err != nil || !ok {
		return 0, errSlowChunk
	}
	return n, nil
}
