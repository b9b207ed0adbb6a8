package apierr

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

// TestWriteEnvelope pins the error envelope every surface answers with
// (docs/api.md): the status's type, the code and message, a trailing
// newline counted in Content-Length.
func TestWriteEnvelope(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, 404, "not_found", `provider "x" not found`)
	want := `{"error":{"message":"provider \"x\" not found","type":"not_found_error","code":"not_found"}}` + "\n"
	if rec.Code != 404 || rec.Body.String() != want {
		t.Fatalf("got %d %q, want 404 %q", rec.Code, rec.Body.String(), want)
	}
	if got := rec.Header().Get("Content-Length"); got != "93" {
		t.Fatalf("Content-Length %s, want 93", got)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
}

// TestTypeForStatus: a 405 and a 413 are malformed requests, as OpenAI
// types them; an unlisted status is a server error.
func TestTypeForStatus(t *testing.T) {
	for status, want := range map[int]string{400: "invalid_request_error", 405: "invalid_request_error", 413: "invalid_request_error",
		401: "authentication_error", 403: "permission_error", 404: "not_found_error", 429: "rate_limit_error", 409: "server_error", 503: "server_error"} {
		if got := TypeForStatus(status); got != want {
			t.Errorf("TypeForStatus(%d) = %q, want %q", status, got, want)
		}
	}
}

// TestWriteSettingsNamesEveryProblem: a refused settings patch lists every
// problem, and the first one's field is the envelope's field.
func TestWriteSettingsNamesEveryProblem(t *testing.T) {
	err := errors.Join(&model.SettingsError{Field: "a.b", Problem: "too big", Source: "patch"},
		&model.SettingsError{Field: "c", Problem: "unknown"})
	rec := httptest.NewRecorder()
	WriteSettings(rec, err)
	if rec.Code != 400 {
		t.Fatalf("status %d", rec.Code)
	}
	body := rec.Body.String()
	for _, s := range []string{`"code":"invalid_settings"`, `"field":"a.b"`, `{"field":"a.b","problem":"too big","source":"patch"}`, `{"field":"c","problem":"unknown"}`} {
		if !strings.Contains(body, s) {
			t.Errorf("body %s lacks %s", body, s)
		}
	}
}
