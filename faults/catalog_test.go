package faults

import (
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

// TestCatalogClassification pins what each catalog behaviour means to the
// model, so a catalog body that stops saying what its name says (or a
// model change that reads it differently) is caught here. The fault
// package itself never imports model; only this test does.
func TestCatalogClassification(t *testing.T) {
	want := map[string]struct {
		typ    string
		reason model.Reason
		next   model.Next
	}{
		"ok":                          {"openai", model.ReasonNone, model.NextDone},
		"rate-limit-retry-after":      {"openai", model.ReasonRateLimitExceeded, model.NextConnection},
		"rate-limit":                  {"openai", model.ReasonRateLimitExceeded, model.NextConnection},
		"rate-limit-reset-header":     {"openai", model.ReasonRateLimitExceeded, model.NextConnection},
		"rate-limit-body-hint":        {"openai", model.ReasonRateLimitExceeded, model.NextConnection},
		"quota-exceeded":              {"openai", model.ReasonQuotaExhausted, model.NextConnection},
		"daily-quota":                 {"openai", model.ReasonQuotaExhausted, model.NextConnection},
		"credits-exhausted":           {"openai", model.ReasonCreditsExhausted, model.NextConnection},
		"payment-required":            {"openai", model.ReasonCreditsExhausted, model.NextConnection},
		"gemini-retry-info":           {"gemini", model.ReasonRateLimitExceeded, model.NextConnection},
		"gemini-daily-quota":          {"gemini", model.ReasonQuotaExhausted, model.NextConnection},
		"concurrency-limit":           {"openai", model.ReasonConcurrencyLimited, model.NextConnection},
		"glm-concurrency":             {"glm", model.ReasonConcurrencyLimited, model.NextConnection},
		"misstated-quota-403":         {"agentrouter", model.ReasonQuotaExhausted, model.NextConnection},
		"misstated-quota-400":         {"agentrouter", model.ReasonQuotaExhausted, model.NextConnection},
		"expired-401":                 {"openai", model.ReasonAuthError, model.NextConnection},
		"banned-403":                  {"openai", model.ReasonBanned, model.NextConnection},
		"request-rejected-403":        {"openai", model.ReasonRequestRejected, model.NextConnection},
		"forbidden-403":               {"openai", model.ReasonForbidden, model.NextConnection},
		"model-not-found-404":         {"openai", model.ReasonNotFound, model.NextTarget},
		"context-length":              {"openai", model.ReasonRequestScoped, model.NextModel},
		"content-filter":              {"openai", model.ReasonRequestScoped, model.NextStop},
		"timeout-408":                 {"openai", model.ReasonServerError, model.NextConnection},
		"server-error-500":            {"openai", model.ReasonServerError, model.NextConnection},
		"bad-gateway-502":             {"openai", model.ReasonServerError, model.NextConnection},
		"unavailable-503":             {"openai", model.ReasonServerError, model.NextConnection},
		"unavailable-503-retry-after": {"openai", model.ReasonServerError, model.NextConnection},
		"gateway-timeout-504":         {"openai", model.ReasonServerError, model.NextConnection},
		"overloaded-529":              {"openai", model.ReasonModelCapacity, model.NextConnection},
	}
	clf := model.NewClassifier(nil)
	for _, e := range Catalog() {
		if e.Response.Fault != None || e.Response.Latency > 0 {
			continue // transport and stream behaviours: the simulator's timeline decides
		}
		w, ok := want[e.Name]
		if !ok {
			t.Errorf("catalog entry %q has no expected classification in this test", e.Name)
			continue
		}
		h := model.HeaderMap{}
		for k, v := range e.Response.Headers {
			h[strings.ToLower(k)] = v
		}
		v := clf.Classify(model.ClassifyContext{Provider: "p", ProviderType: w.typ, Model: "m", PerModelQuota: w.typ == "gemini"},
			model.Outcome{Kind: model.OutcomeResponse, Status: e.Response.StatusOrOK(), Headers: h, Body: e.Response.ErrorBody()})
		if v.Reason != w.reason || v.Next != w.next {
			t.Errorf("%s (type %s): reason %s next %s, want %s %s (%s)", e.Name, w.typ, v.Reason, v.Next, w.reason, w.next, v.Message)
		}
	}
}

func TestCatalogValid(t *testing.T) {
	names := map[string]bool{}
	for _, e := range Catalog() {
		if names[e.Name] {
			t.Errorf("duplicate catalog name %q", e.Name)
		}
		names[e.Name] = true
		if err := e.Response.Validate(); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
		if e.Doc == "" {
			t.Errorf("%s: no doc", e.Name)
		}
		if _, ok := Preset(e.Name); !ok {
			t.Errorf("Preset(%q) not found", e.Name)
		}
	}
	for _, want := range []string{"rate-limit-retry-after", "rate-limit", "quota-exceeded", "credits-exhausted",
		"daily-quota", "gemini-retry-info", "concurrency-limit", "misstated-quota-403", "misstated-quota-400",
		"expired-401", "payment-required", "banned-403", "model-not-found-404", "timeout-408", "server-error-500",
		"unavailable-503", "overloaded-529", "reset", "no-response", "slow-first-token", "stream-cut", "stall",
		"slow-stream", "malformed-chunk", "no-done", "context-length", "content-filter"} {
		if !names[want] {
			t.Errorf("the catalog lacks %q", want)
		}
	}
}
