package mgmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// DecodeJSON decodes a JSON management body strictly into v: unknown
// fields, trailing data and wrong types are refused with a message naming
// the problem (the text of a 400), "" when the body decoded. An empty body
// leaves v at its zero value when allowEmpty.
func DecodeJSON(b []byte, v any, allowEmpty bool) string {
	if len(bytes.TrimSpace(b)) == 0 {
		if allowEmpty {
			return ""
		}
		return "a JSON body is required"
	}
	// Every management body is an object: `null` would decode to the zero
	// value (POST /api/resilience/reset with `null` reset every breaker) and
	// an array's type error would name a Go struct.
	if kind := JSONKind(b); kind != "an object" && kind != "invalid JSON" {
		return "invalid body: want a JSON object, got " + kind
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return "invalid body: " + JSONProblem(err)
	}
	if dec.More() {
		return "invalid body: trailing data after the JSON value"
	}
	return ""
}

// JSONKind names the kind of the JSON value b starts with.
func JSONKind(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return "nothing"
	}
	switch c := b[0]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	}
	return "invalid JSON"
}

// jsonTypeName names a Go type the way the JSON body spells it, so a
// message never shows a Go struct or a package name.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonTypeName(t.Elem()), "an "), "a ") + "s"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}

// millis is a millisecond duration field of a body (confval.Millis): its
// refusal says what the field accepts.
type millis interface{ Duration() time.Duration }

var millisType = reflect.TypeFor[millis]()

// JSONProblem is a decoding error of encoding/json as a 400 message that
// names the field and what it must be, never a Go type.
func JSONProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Type != nil && te.Type.Kind() == reflect.Int64 && te.Type.Implements(millisType) {
			return fmt.Sprintf("field %q must be a whole, non-negative number of milliseconds or a Go duration such as \"30s\", got %s", te.Field, te.Value)
		}
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, got %s", te.Field, jsonTypeName(te.Type), te.Value)
		}
		return fmt.Sprintf("want %s, got %s", jsonTypeName(te.Type), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
