package settings

import (
	"encoding/json"
	"errors"
	"github.com/breakwater-gw/breakwater/model"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// mustNormalize fails the test when Normalize rejects s.
func mustNormalize(t *testing.T, s model.Settings) model.Settings {
	t.Helper()
	n, err := model.Normalize(s)
	if err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	return n
}

func mustLayer(t *testing.T, js string) Layer {
	t.Helper()
	l, err := ParseLayerJSON([]byte(js))
	if err != nil {
		t.Fatalf("ParseLayerJSON(%s): %v", js, err)
	}
	return l
}

// wantSettingsError checks that err holds a *SettingsError for field whose
// message contains each of wants.
func wantSettingsError(t *testing.T, err error, field string, wants ...string) *model.SettingsError {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error for %q, got none", field)
	}
	var first *model.SettingsError
	if !errors.As(err, &first) {
		t.Fatalf("error %v (%T) is not a *SettingsError", err, err)
	}
	for _, se := range model.SettingsErrors(err) {
		if se.Field != field {
			continue
		}
		for _, w := range wants {
			if !strings.Contains(se.Error(), w) {
				t.Fatalf("error for %q = %q, want it to contain %q", field, se.Error(), w)
			}
		}
		return se
	}
	t.Fatalf("no error names %q; got %v", field, err)
	return nil
}

func TestSettingsDefaultsAreAFixedPoint(t *testing.T) {
	// docs/settings.md#layers / docs/settings.md#validation: one normalisation; the defaults pass it unchanged.
	d := model.DefaultSettings()
	n := mustNormalize(t, d)
	if !reflect.DeepEqual(n, d) {
		t.Fatalf("Normalize(model.DefaultSettings()) changed the defaults:\n got %+v\nwant %+v", n, d)
	}
	s, src, err := Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, d) {
		t.Fatalf("Resolve() with no layers = %+v, want the defaults", s)
	}
	for p, name := range src {
		if name != SourceDefault {
			t.Fatalf("Resolve() with no layers: %s came from %q", p, name)
		}
	}
}

func TestResolvePrecedence(t *testing.T) {
	file := mustLayer(t, `{"providerBreaker":{"apikey":{"failureThreshold":20,"resetTimeoutMs":"45s"}},
		"requestQueue":{"maxWaitMs":1000}}`)
	env := mustLayer(t, `{"providerBreaker":{"apikey":{"failureThreshold":25}}}`)
	saved := mustLayer(t, `{"providerBreaker":{"apikey":{"failureThreshold":30}},"waitForCooldown":{"enabled":false}}`)
	s, src, err := Resolve(NamedLayer{"file", file}, NamedLayer{"env", env}, NamedLayer{"saved", saved})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		rule, path string
		got, want  any
		src        string
	}{
		{"docs/settings.md#layers: saved beats env beats file", "providerBreaker.apikey.failureThreshold", s.ProviderBreaker.APIKey.FailureThreshold, 30, "saved"},
		{"docs/settings.md#layers: a file value with no higher layer applies", "providerBreaker.apikey.resetTimeoutMs", s.ProviderBreaker.APIKey.ResetTimeoutMs, model.Millis(45000), "file"},
		{"docs/settings.md#layers: objects merge key by key", "requestQueue.maxWaitMs", s.RequestQueue.MaxWaitMs, model.Millis(1000), "file"},
		{"docs/settings.md#layers: untouched values keep the default", "requestQueue.executionMaxWaitMs", s.RequestQueue.ExecutionMaxWaitMs, model.Millis(600000), SourceDefault},
		{"docs/settings.md#layers: saved switch", "waitForCooldown.enabled", s.WaitForCooldown.Enabled, false, "saved"},
		{"docs/settings.md#layers: sibling keys of a saved object keep their source", "waitForCooldown.maxRetries", s.WaitForCooldown.MaxRetries, 5, SourceDefault},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) || src[c.path] != c.src {
			t.Errorf("%s: %s = %v from %q, want %v from %q", c.rule, c.path, c.got, src[c.path], c.want, c.src)
		}
	}
	// Every leaf of the resolved tree has a source (GET /api/resilience shows all).
	n := 0
	walkSettingsLeaves(map[string]any(Full(s)), settingsSchema, "", true, func(p string) {
		n++
		if src[p] == "" {
			t.Errorf("docs/settings.md#layers: no source for %s", p)
		}
	})
	if n != len(src) || n < 80 {
		t.Errorf("Sources has %d entries for %d leaves", len(src), n)
	}
}

func TestResolveStrictKeys(t *testing.T) {
	cases := []struct {
		rule, js, field, want string
	}{
		{"docs/config.md: unknown key names the key and the nearest known one",
			`{"providerBreaker":{"apikey":{"failureTreshold":5}}}`,
			"providerBreaker.apikey.failureTreshold",
			`unknown key "providerBreaker.apikey.failureTreshold" (did you mean "failureThreshold"?)`},
		{"docs/config.md: keys are case-sensitive, the right spelling is suggested",
			`{"RequestQueue":{}}`, "RequestQueue", `did you mean "requestQueue"?`},
		{"docs/config.md: far-off keys list what is allowed",
			`{"requestQueue":{"zzzzzzzzzzzz":1}}`, "requestQueue.zzzzzzzzzzzz", "known keys: maxWaitMs"},
		{"docs/settings.md#layers: wrong type names the field", `{"requestQueue":{"maxQueueDepth":"lots"}}`,
			"requestQueue.maxQueueDepth", "want an integer"},
		{"docs/settings.md#layers: a section must be an object", `{"requestQueue":5}`, "requestQueue", "want an object"},
		{"docs/settings.md#layers: lists must be arrays", `{"modelLockout":{"errorCodes":429}}`, "modelLockout.errorCodes", "want an array"},
		{"docs/settings.md#layers: *Ms reject non-durations", `{"requestQueue":{"maxWaitMs":"half a minute"}}`, "requestQueue.maxWaitMs", "Go duration"},
		{"docs/settings.md#layers: booleans", `{"modelLockout":{"enabled":"maybe"}}`, "modelLockout.enabled", "true or false"},
		{"docs/classification.md: rule fields are checked", `{"providerErrorRules":{"glm":[{"status":429,"match":"x","scope":"everywhere"}]}}`,
			"providerErrorRules.glm[0].scope", "model, provider or connection"},
		{"docs/classification.md: unknown rule keys", `{"providerErrorRules":{"glm":[{"status":429,"match":"x","scope":"model","cooldown":5}]}}`,
			"providerErrorRules.glm[0].cooldown", `did you mean "cooldownMs"?`},
		{"docs/classification.md: reasons are checked", `{"providerErrorRules":{"glm":[{"status":429,"match":"x","scope":"model","reason":"oops"}]}}`,
			"providerErrorRules.glm[0].reason", `unknown reason "oops"`},
		{"docs/classification.md: list elements must not be null", `{"bannedSignals":["a",null]}`, "bannedSignals[1]", "null"},
		{"docs/settings.md#layers: normalisation errors carry the layer", `{"emergencyFallback":{"enabled":true}}`,
			"emergencyFallback.target", "required"},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			_, src, err := Resolve(NamedLayer{"file", mustLayer(t, c.js)})
			se := wantSettingsError(t, err, c.field, c.want)
			if src != nil {
				t.Fatalf("Sources returned with an error")
			}
			if c.field != "emergencyFallback.target" && se.Source != "file" {
				t.Fatalf("error %q does not name the layer", se.Error())
			}
		})
	}

	t.Run("docs/settings.md#layers: errors of several layers are all reported", func(t *testing.T) {
		_, _, err := Resolve(
			NamedLayer{"file", mustLayer(t, `{"bogus":1}`)},
			NamedLayer{"saved", mustLayer(t, `{"requestQueue":{"maxWaitMs":true}}`)})
		if errs := model.SettingsErrors(err); len(errs) != 2 || errs[0].Source != "file" || errs[1].Source != "saved" {
			t.Fatalf("got %v", err)
		}
	})
}

func TestResolveLenientScalarsAndYAMLShapes(t *testing.T) {
	// What a YAML decoder hands over: ints, floats, map[any]any, typed slices.
	file := Layer{
		"providerBreaker": map[any]any{"oauth": map[string]any{"failureThreshold": 9, "resetTimeoutMs": "2m"}},
		"modelLockout":    map[string]any{"errorCodes": []int{429, 503}, "enabled": "on", "baseCooldownMs": 1500.0},
		"requestQueue":    map[string]any{"maxQueueDepth": "12", "maxWaitMs": 5 * time.Second},
		"bannedSignals":   []string{"Suspended"},
	}
	s, src, err := Resolve(NamedLayer{"file", file})
	if err != nil {
		t.Fatal(err)
	}
	if s.ProviderBreaker.OAuth.FailureThreshold != 9 || s.ProviderBreaker.OAuth.ResetTimeoutMs != 120000 ||
		!s.ModelLockout.Enabled || !slices.Equal(s.ModelLockout.ErrorCodes, []int{429, 503}) ||
		s.ModelLockout.BaseCooldownMs != 1500 || s.RequestQueue.MaxQueueDepth != 12 ||
		s.RequestQueue.MaxWaitMs != 5000 || !slices.Equal(s.BannedSignals, []string{"suspended"}) {
		t.Fatalf("got %+v", s)
	}
	if src["modelLockout.errorCodes"] != "file" || src["bannedSignals"] != "file" {
		t.Fatalf("lists are leaves in Sources: %v / %v", src["modelLockout.errorCodes"], src["bannedSignals"])
	}
	if _, ok := file["providerBreaker"].(map[any]any); !ok {
		t.Fatal("Resolve modified its input layer")
	}
}

func TestResolveNullMeansUnset(t *testing.T) {
	// docs/settings.md#layers: inside a layer, null does not set the key; the lower layer applies.
	file := mustLayer(t, `{"requestQueue":{"maxWaitMs":1234}}`)
	saved := mustLayer(t, `{"requestQueue":{"maxWaitMs":null}}`)
	s, src, err := Resolve(NamedLayer{"file", file}, NamedLayer{"saved", saved})
	if err != nil {
		t.Fatal(err)
	}
	if s.RequestQueue.MaxWaitMs != 1234 || src["requestQueue.maxWaitMs"] != "file" {
		t.Fatalf("got %v from %q", s.RequestQueue.MaxWaitMs, src["requestQueue.maxWaitMs"])
	}
}

func TestResolveMapsMergeByKey(t *testing.T) {
	file := mustLayer(t, `{"providerBreaker":{"apikey":{"cooldownByKind":{"timeout":"5s"}}},
		"providerErrorRules":{"glm":[{"status":429,"match":"quota","scope":"connection"}]}}`)
	saved := mustLayer(t, `{"providerBreaker":{"apikey":{"cooldownByKind":{"server_error":3000}}},
		"providerErrorRules":{"openai":[{"status":400,"match":"model is unavailable","scope":"model","reason":"model_capacity"}]}}`)
	s, src, err := Resolve(NamedLayer{"file", file}, NamedLayer{"saved", saved})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]model.Millis{"timeout": 5000, "server_error": 3000}; !reflect.DeepEqual(s.ProviderBreaker.APIKey.CooldownByKind, want) {
		t.Fatalf("cooldownByKind = %v, want %v", s.ProviderBreaker.APIKey.CooldownByKind, want)
	}
	if len(s.ProviderErrorRules) != 2 || src["providerErrorRules.glm"] != "file" || src["providerErrorRules.openai"] != "saved" ||
		src["providerBreaker.apikey.cooldownByKind.server_error"] != "saved" || src["providerBreaker.oauth.cooldownByKind"] != SourceDefault {
		t.Fatalf("rules %v, sources %v", s.ProviderErrorRules, src)
	}
	// An empty list in a higher layer removes a lower layer's rules for that provider.
	s, _, err = Resolve(NamedLayer{"file", file}, NamedLayer{"saved", mustLayer(t, `{"providerErrorRules":{"glm":[]}}`)})
	if err != nil || s.ProviderErrorRules != nil {
		t.Fatalf("docs/settings.md#layers: arrays replace: got %v %v", s.ProviderErrorRules, err)
	}
}

func TestMergePatch(t *testing.T) {
	saved := mustLayer(t, `{"requestQueue":{"maxWaitMs":5000,"maxQueueDepth":3},"bannedSignals":["a","b"]}`)
	savedCopy := cloneSettingsValue(map[string]any(saved))

	t.Run("docs/settings.md#layers: null deletes the saved value", func(t *testing.T) {
		file := mustLayer(t, `{"requestQueue":{"maxWaitMs":7000}}`)
		next, s, src, err := ApplyPatch([]NamedLayer{{"file", file}}, saved, mustLayer(t, `{"requestQueue":{"maxWaitMs":null}}`))
		if err != nil {
			t.Fatal(err)
		}
		if s.RequestQueue.MaxWaitMs != 7000 || src["requestQueue.maxWaitMs"] != "file" {
			t.Fatalf("after deleting the saved value the file value applies: got %v from %q", s.RequestQueue.MaxWaitMs, src["requestQueue.maxWaitMs"])
		}
		if want := mustLayer(t, `{"requestQueue":{"maxQueueDepth":3},"bannedSignals":["a","b"]}`); !reflect.DeepEqual(next, want) {
			t.Fatalf("saved layer = %v, want %v", next, want)
		}
	})
	t.Run("RFC 7386: arrays replace, objects merge, emptied objects disappear", func(t *testing.T) {
		next, err := MergePatch(saved, mustLayer(t, `{"bannedSignals":["c"],"requestQueue":{"maxWaitMs":null,"maxQueueDepth":null},"modelLockout":{"enabled":true}}`))
		if err != nil {
			t.Fatal(err)
		}
		if want := mustLayer(t, `{"bannedSignals":["c"],"modelLockout":{"enabled":true}}`); !reflect.DeepEqual(next, want) {
			t.Fatalf("got %v, want %v", next, want)
		}
	})
	t.Run("docs/api.md: a bad patch changes nothing and names the field", func(t *testing.T) {
		_, err := MergePatch(saved, mustLayer(t, `{"requestQueue":{"maxWaitMz":null}}`))
		se := wantSettingsError(t, err, "requestQueue.maxWaitMz", `did you mean "maxWaitMs"?`)
		if se.Source != "patch" {
			t.Fatalf("source = %q", se.Source)
		}
		next, _, _, err := ApplyPatch(nil, saved, mustLayer(t, `{"emergencyFallback":{"enabled":true}}`))
		wantSettingsError(t, err, "emergencyFallback.target", "required")
		if next != nil {
			t.Fatalf("a rejected PATCH returned a layer to save")
		}
		if !reflect.DeepEqual(map[string]any(saved), savedCopy) {
			t.Fatalf("MergePatch modified the saved layer")
		}
	})
	t.Run("docs/api.md#operator-actions: emergency fallback is switchable at run time", func(t *testing.T) {
		file := mustLayer(t, `{"emergencyFallback":{"target":"openai/gpt-5"}}`)
		_, s, _, err := ApplyPatch([]NamedLayer{{"file", file}}, nil, mustLayer(t, `{"emergencyFallback":{"enabled":true}}`))
		if err != nil || !s.EmergencyFallback.Enabled || s.EmergencyFallback.Target != "openai/gpt-5" {
			t.Fatalf("got %+v %v", s.EmergencyFallback, err)
		}
	})
}

func TestSettingsGETOutputResubmits(t *testing.T) {
	// docs/settings.md#validation: the API can always re-submit what it returns.
	file := mustLayer(t, `{"providerBreaker":{"local":{"failureThreshold":1,"degradationThreshold":9}},
		"bannedSignals":["Account Suspended"],
		"comboCooldownWait":{"maxWaitMs":"90s"},
		"providerErrorRules":{"glm":[{"status":429,"match":"Quota","scope":"connection"}]},
		"statusRestatements":{"agentrouter":[{"id":"q","fromStatuses":[403,400],"toStatus":429,"textMarkers":["额度不足"]}]}}`)
	env := mustLayer(t, `{"modelLockout":{"maxCooldownMs":1}}`)
	s, _, err := Resolve(NamedLayer{"file", file}, NamedLayer{"env", env})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "null") {
		t.Fatalf("GET output holds null, which PATCH reads as delete: %s", body)
	}
	patch, err := ParseLayerJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	_, again, src, err := ApplyPatch([]NamedLayer{{"file", file}, {"env", env}}, nil, patch)
	if err != nil {
		t.Fatalf("re-submitting GET output failed: %v", err)
	}
	if !reflect.DeepEqual(again, s) {
		t.Fatalf("re-submitted settings differ:\n got %+v\nwant %+v", again, s)
	}
	if src["requestQueue.maxWaitMs"] != "saved" {
		t.Fatalf("a full PATCH pins every value in saved")
	}
	// The full tree also resolves as a single layer.
	if s2, _, err := Resolve(NamedLayer{"saved", Full(s)}); err != nil || !reflect.DeepEqual(s2, s) {
		t.Fatalf("Resolve(Full(s)) = %+v, %v", s2, err)
	}
}

func TestSetPath(t *testing.T) {
	cases := []struct {
		rule, path, value string
		check             func(model.Settings) bool
	}{
		{"docs/scenarios.md: -set uses the settings path", "providerBreaker.apikey.failureThreshold", "5",
			func(s model.Settings) bool { return s.ProviderBreaker.APIKey.FailureThreshold == 5 }},
		{"docs/settings.md#layers: *Ms accept a duration", "requestQueue.maxWaitMs", "30s",
			func(s model.Settings) bool { return s.RequestQueue.MaxWaitMs == 30000 }},
		{"docs/settings.md#layers: booleans", "modelLockout.enabled", "true",
			func(s model.Settings) bool { return s.ModelLockout.Enabled }},
		{"docs/settings.md#layers: lists as JSON", "modelLockout.errorCodes", "[429, 503]",
			func(s model.Settings) bool { return slices.Equal(s.ModelLockout.ErrorCodes, []int{429, 503}) }},
		{"docs/settings.md#layers: whole objects as JSON", "waitForCooldown", `{"enabled":false}`,
			func(s model.Settings) bool { return !s.WaitForCooldown.Enabled && s.WaitForCooldown.MaxRetries == 5 }},
		{"docs/api.md#operator-actions: plain strings", "emergencyFallback.target", "openai/gpt-5",
			func(s model.Settings) bool { return s.EmergencyFallback.Target == "openai/gpt-5" }},
		{"docs/classification.md: provider ids may contain dots", "providerErrorRules.my.provider", `[{"status":429,"match":"x","scope":"model"}]`,
			func(s model.Settings) bool { return len(s.ProviderErrorRules["my.provider"]) == 1 }},
		{"docs/breaker.md: map entries", "providerBreaker.oauth.cooldownByKind.timeout", "1m",
			func(s model.Settings) bool { return s.ProviderBreaker.OAuth.CooldownByKind["timeout"] == 60000 }},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			in := Layer{}
			l, err := SetPath(in, c.path, c.value)
			if err != nil {
				t.Fatal(err)
			}
			if len(in) != 0 {
				t.Fatal("SetPath modified its input")
			}
			s, src, err := Resolve(NamedLayer{"set", l})
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(s) {
				t.Fatalf("-set %s=%s not applied: %+v", c.path, c.value, s)
			}
			found := false
			for p, name := range src {
				if name == "set" && (p == c.path || strings.HasPrefix(p, c.path+".")) {
					found = true
				}
			}
			if !found {
				t.Fatalf("Sources does not credit the set layer for %s", c.path)
			}
		})
	}

	errCases := []struct {
		rule, path, value, field, want string
	}{
		{"docs/config.md: unknown path names the nearest key", "providerBreaker.apikey.failureTreshold", "5",
			"providerBreaker.apikey.failureTreshold", `did you mean "failureThreshold"?`},
		{"docs/config.md: unknown section", "providerBraker.apikey.failureThreshold", "5", "providerBraker", `did you mean "providerBreaker"?`},
		{"docs/settings.md#layers: wrong type", "providerBreaker.apikey.failureThreshold", "many", "providerBreaker.apikey.failureThreshold", "want an integer"},
		{"docs/settings.md#layers: below a value", "requestQueue.maxWaitMs.x", "5", "requestQueue.maxWaitMs", "is a value"},
		{"docs/settings.md#layers: empty path", "", "5", "", "empty"},
		{"docs/settings.md#layers: trailing dot", "requestQueue.", "5", "requestQueue.", "dot"},
	}
	for _, c := range errCases {
		t.Run(c.rule, func(t *testing.T) {
			_, err := SetPath(Layer{}, c.path, c.value)
			wantSettingsError(t, err, c.field, c.want)
		})
	}

	t.Run("docs/settings.md#layers: null removes the key from the layer", func(t *testing.T) {
		l, err := SetPath(mustLayer(t, `{"requestQueue":{"maxWaitMs":5}}`), "requestQueue.maxWaitMs", "null")
		if err != nil {
			t.Fatal(err)
		}
		if rq, _ := l["requestQueue"].(map[string]any); len(rq) != 0 {
			t.Fatalf("got %v", l)
		}
	})
}

func TestSettingsGet(t *testing.T) {
	s := model.DefaultSettings()
	s.ProviderErrorRules = map[string][]model.ProviderErrorRule{"a.b": {{Status: 429, Match: "x", Scope: model.ScopeModel, Reason: model.ReasonQuotaExhausted}}}
	cases := []struct {
		path string
		want any
	}{
		{"providerBreaker.apikey.failureThreshold", json.Number("12")},
		{"waitForCooldown.enabled", true},
		{"modelLockout.errorCodes", []any{json.Number("403"), json.Number("404"), json.Number("429"), json.Number("502"), json.Number("503"), json.Number("504")}},
		{"bannedSignals", []any{}},
		{"providerErrorRules.a.b", []any{map[string]any{"status": json.Number("429"), "match": "x", "scope": "model", "reason": "quota_exhausted", "cooldownMs": json.Number("0")}}},
	}
	for _, c := range cases {
		got, err := Get(s, c.path)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Get(%s) = %#v, %v; want %#v", c.path, got, err, c.want)
		}
	}
	if _, err := Get(s, "providerErrorRules.nope"); err == nil {
		t.Errorf("Get of an absent map key must fail")
	}
}

func TestEnvLayer(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin",
		"BREAKWATER_LISTEN=:8080", // someone else's variable
		"BREAKWATER_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD=20",
		"BREAKWATER_PROVIDER_BREAKER_OAUTH_RESET_TIMEOUT_MS=2m",
		"BREAKWATER_PROVIDER_BREAKER_LOCAL_DEGRADATION_THRESHOLD=1",
		"BREAKWATER_PROVIDER_COOLDOWN_ENABLED=on",
		"BREAKWATER_RATE_LIMIT_AUTO_ENABLE=0",
		"BREAKWATER_RATE_LIMIT_MAX_WAIT_MS=15000",
		"BREAKWATER_RATE_LIMIT_EXECUTION_MAX_WAIT_MS=5m",
		"BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH=50",
		"BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_ENABLED=TRUE",
		"BREAKWATER_MODEL_LOCKOUT_ENABLED=1",
		"BREAKWATER_SESSION_AFFINITY_TTL_MS=1h",
		"BREAKWATER_SETTINGS__emergencyFallback__target=openai/gpt-5",
		"BREAKWATER_SETTINGS__bannedSignals=[\"Suspended\"]",
		"BREAKWATER_SETTINGS__waitForCooldown__enabled=0",
		"BREAKWATER_SETTINGS__streamStallCooldown__enabled=1",
		"BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH=99",   // repeated: the first wins, as with os.Getenv
		"BREAKWATER_MODEL_LOCKOUT_BASE_COOLDOWN_MS=", // empty = unset
	}
	l, err := EnvLayer(environ)
	if err != nil {
		t.Fatal(err)
	}
	s, src, err := Resolve(NamedLayer{"env", l})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		rule string
		ok   bool
	}{
		{"docs/breaker.md: BREAKWATER_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD", s.ProviderBreaker.APIKey.FailureThreshold == 20},
		{"docs/breaker.md: BREAKWATER_PROVIDER_BREAKER_OAUTH_RESET_TIMEOUT_MS takes a duration", s.ProviderBreaker.OAuth.ResetTimeoutMs == 120000},
		{"docs/breaker.md: BREAKWATER_PROVIDER_BREAKER_LOCAL_*", s.ProviderBreaker.Local.DegradationThreshold == 1},
		{"docs/breaker.md#provider-cooldown: BREAKWATER_PROVIDER_COOLDOWN_ENABLED", s.ProviderCooldown.Enabled},
		{"docs/admission.md: BREAKWATER_RATE_LIMIT_AUTO_ENABLE=0 turns the safety net off", !s.RequestQueue.AutoEnableAPIKeyProviders},
		{"docs/admission.md: BREAKWATER_RATE_LIMIT_MAX_WAIT_MS", s.RequestQueue.MaxWaitMs == 15000},
		{"docs/admission.md: BREAKWATER_RATE_LIMIT_EXECUTION_MAX_WAIT_MS", s.RequestQueue.ExecutionMaxWaitMs == 300000},
		{"docs/admission.md: BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH (first occurrence)", s.RequestQueue.MaxQueueDepth == 50},
		{"docs/streams.md: BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_ENABLED", s.StreamRecovery.ThroughputWatchdog.Enabled},
		{"docs/lockouts.md: BREAKWATER_MODEL_LOCKOUT_ENABLED", s.ModelLockout.Enabled},
		{"docs/lockouts.md: an empty variable is unset", s.ModelLockout.BaseCooldownMs == 120000},
		{"docs/selection.md#session-affinity: BREAKWATER_SESSION_AFFINITY_TTL_MS", s.SessionAffinityTTLMs == 3_600_000},
		{"docs/settings.md#layers: generic BREAKWATER_SETTINGS__ form", s.EmergencyFallback.Target == "openai/gpt-5" && slices.Equal(s.BannedSignals, []string{"suspended"})},
		{"README: env booleans take 1/0 in the generic form too", !s.WaitForCooldown.Enabled && s.StreamStallCooldown.Enabled},
		{"docs/settings.md#layers: Sources credits env", src["requestQueue.maxWaitMs"] == "env" && src["requestQueue.maxQueueDepth"] == "env"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not applied (%+v)", c.rule, s)
		}
	}

	for _, v := range []string{"false", "0", "off", "OFF", " False "} {
		l, err := EnvLayer([]string{"BREAKWATER_RATE_LIMIT_AUTO_ENABLE=" + v})
		if err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		if s, _, _ := Resolve(NamedLayer{"env", l}); s.RequestQueue.AutoEnableAPIKeyProviders {
			t.Errorf("docs/admission.md: BREAKWATER_RATE_LIMIT_AUTO_ENABLE=%q must turn it off", v)
		}
	}

	errCases := []struct {
		rule, env, field, want string
	}{
		{"docs/settings.md#layers: a bad value names the variable (no silent fallback)", "BREAKWATER_RATE_LIMIT_MAX_WAIT_MS=soon",
			"requestQueue.maxWaitMs", "env BREAKWATER_RATE_LIMIT_MAX_WAIT_MS"},
		{"docs/settings.md#layers: negative numbers are bad values", "BREAKWATER_PROVIDER_BREAKER_OAUTH_FAILURE_THRESHOLD=-1",
			"providerBreaker.oauth.failureThreshold", "negative"},
		{"docs/admission.md: booleans are true/1/on or false/0/off", "BREAKWATER_RATE_LIMIT_AUTO_ENABLE=yes please",
			"requestQueue.autoEnableApiKeyProviders", "true/1/on"},
		{"docs/breaker.md: a misspelt settings variable names the nearest", "BREAKWATER_PROVIDER_BREAKER_APIKEY_FAILURE_THRESHOLD=5",
			"BREAKWATER_PROVIDER_BREAKER_APIKEY_FAILURE_THRESHOLD", `did you mean "BREAKWATER_PROVIDER_BREAKER_API_KEY_FAILURE_THRESHOLD"?`},
		{"docs/settings.md#layers: generic form: unknown path", "BREAKWATER_SETTINGS__requestQueue__maxWait=5",
			"requestQueue.maxWait", "env BREAKWATER_SETTINGS__requestQueue__maxWait"},
		{"docs/settings.md#layers: generic form: bad value", "BREAKWATER_SETTINGS__modelLockout__enabled=perhaps",
			"modelLockout.enabled", "true or false"},
	}
	for _, c := range errCases {
		t.Run(c.rule, func(t *testing.T) {
			_, err := EnvLayer([]string{c.env})
			wantSettingsError(t, err, c.field, c.want)
		})
	}

	t.Run("docs/settings.md#layers: two variables for one setting are an error", func(t *testing.T) {
		_, err := EnvLayer([]string{
			"BREAKWATER_RATE_LIMIT_MAX_WAIT_MS=1000",
			"BREAKWATER_SETTINGS__requestQueue=" + `{"maxWaitMs":2000}`,
		})
		wantSettingsError(t, err, "requestQueue", "also set by BREAKWATER_RATE_LIMIT_MAX_WAIT_MS")
	})
}

func TestEnvVarsDocumented(t *testing.T) {
	vars := EnvVars()
	byName := map[string]EnvVar{}
	for _, v := range vars {
		if _, dup := byName[v.Name]; dup {
			t.Errorf("duplicate variable %s", v.Name)
		}
		byName[v.Name] = v
		if settingsPathNode(v.Path) == nil || v.Kind == "invalid" || v.Doc == "" {
			t.Errorf("%s: bad entry %+v", v.Name, v)
		}
	}
	required := []string{
		"BREAKWATER_PROVIDER_COOLDOWN_ENABLED", "BREAKWATER_RATE_LIMIT_AUTO_ENABLE", "BREAKWATER_RATE_LIMIT_MAX_WAIT_MS",
		"BREAKWATER_RATE_LIMIT_EXECUTION_MAX_WAIT_MS", "BREAKWATER_RATE_LIMIT_MAX_QUEUE_DEPTH",
		"BREAKWATER_STREAM_THROUGHPUT_WATCHDOG_ENABLED", "BREAKWATER_MODEL_LOCKOUT_ENABLED", "BREAKWATER_SESSION_AFFINITY_TTL_MS",
	}
	for _, p := range []string{"OAUTH", "API_KEY", "LOCAL"} {
		for _, f := range []string{"FAILURE_THRESHOLD", "DEGRADATION_THRESHOLD", "RESET_TIMEOUT_MS", "HALF_OPEN_REQUESTS", "MAX_BACKOFF_MULTIPLIER", "BACKOFF_ESCALATION_COUNT"} {
			required = append(required, "BREAKWATER_PROVIDER_BREAKER_"+p+"_"+f)
		}
	}
	for _, name := range required {
		if _, ok := byName[name]; !ok {
			t.Errorf("docs/breaker.md/docs/admission.md/docs/streams.md/docs/settings.md#layers: %s is not supported", name)
		}
	}
	// Each variable works with a plausible value of its kind.
	for _, v := range vars {
		value := map[string]string{"bool": "true", "int": "3", "ms": "2s"}[v.Kind]
		if _, err := EnvLayer([]string{v.Name + "=" + value}); err != nil {
			t.Errorf("%s=%s: %v", v.Name, value, err)
		}
	}
}

func TestParseLayerJSON(t *testing.T) {
	for _, in := range []string{`[1]`, `5`, `{"a":`, `{} {}`} {
		if _, err := ParseLayerJSON([]byte(in)); err == nil {
			t.Errorf("ParseLayerJSON(%s) accepted", in)
		} else if len(model.SettingsErrors(err)) == 0 {
			t.Errorf("ParseLayerJSON(%s): %v is not a SettingsError", in, err)
		}
	}
	for _, in := range []string{``, `null`, `{}`} {
		if l, err := ParseLayerJSON([]byte(in)); err != nil || len(l) != 0 {
			t.Errorf("ParseLayerJSON(%q) = %v, %v", in, l, err)
		}
	}
	if _, err := LayerOf(map[string]any{"a": []any{func() {}}}); err == nil {
		t.Errorf("LayerOf accepted a func")
	}
}

// TestSettingsSchemaMatchesStruct pins the hand-written schema (the model may
// not import reflect) to the Settings struct and its json tags: adding a field
// to settings.go without adding it to buildSettingsSchema fails here.
func TestSettingsSchemaMatchesStruct(t *testing.T) {
	var walk func(t2 reflect.Type, n *settingsNode, path string)
	walk = func(rt reflect.Type, n *settingsNode, path string) {
		switch {
		case rt == reflect.TypeFor[model.Millis]():
			if n.kind != schemaMs {
				t.Errorf("%s: model.Millis field is not schemaMs", path)
			}
		case rt == reflect.TypeFor[model.Scope]():
			if n.kind != schemaScope {
				t.Errorf("%s: model.Scope field is not schemaScope", path)
			}
		case rt == reflect.TypeFor[model.Reason]():
			if n.kind != schemaReason {
				t.Errorf("%s: model.Reason field is not schemaReason", path)
			}
		case rt.Kind() == reflect.Int:
			if n.kind != schemaInt {
				t.Errorf("%s: int field is not schemaInt", path)
			}
		case rt.Kind() == reflect.Bool:
			if n.kind != schemaBool {
				t.Errorf("%s: bool field is not schemaBool", path)
			}
		case rt.Kind() == reflect.String:
			if n.kind != schemaString {
				t.Errorf("%s: string field is not schemaString", path)
			}
		case rt.Kind() == reflect.Slice:
			if n.kind != schemaList {
				t.Errorf("%s: slice is not schemaList", path)
				return
			}
			walk(rt.Elem(), n.elem, path+"[]")
		case rt.Kind() == reflect.Map:
			if n.kind != schemaMap || rt.Key().Kind() != reflect.String {
				t.Errorf("%s: map is not schemaMap", path)
				return
			}
			walk(rt.Elem(), n.elem, path+".*")
		case rt.Kind() == reflect.Struct:
			if n.kind != schemaObject {
				t.Errorf("%s: struct is not schemaObject", path)
				return
			}
			var names []string
			for i := 0; i < rt.NumField(); i++ {
				f := rt.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if !f.IsExported() || name == "-" {
					continue
				}
				if name == "" {
					t.Errorf("%s.%s has no json tag", path, f.Name)
					name = f.Name
				}
				names = append(names, name)
				child := n.field(name)
				if child == nil {
					t.Errorf("%s: schema lacks %q (add it to buildSettingsSchema)", path, name)
					continue
				}
				walk(f.Type, child, joinSettingsPath(path, name))
			}
			if !slices.Equal(names, n.fieldNames()) {
				t.Errorf("%s: schema fields %v, struct fields %v", path, n.fieldNames(), names)
			}
		default:
			t.Errorf("%s: unexpected type %s", path, rt)
		}
	}
	walk(reflect.TypeFor[model.Settings](), settingsSchema, "")
}
