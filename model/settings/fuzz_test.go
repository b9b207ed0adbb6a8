package settings

import (
	"encoding/json"
	"errors"
	"github.com/breakwater-gw/breakwater/model"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Property tests and fuzz targets of the settings layers (docs/settings.md#layers, "does
// better" 12): one normalisation that is idempotent, strict decoding that
// fails with a typed error naming a field, never a panic.

// drawSettingsTree draws a settings tree shaped by the schema. With wild it
// also draws wrong kinds, unknown keys and nulls.
func drawSettingsTree(t *rapid.T, n *settingsNode, wild bool, label string, depth int) any {
	if wild && rapid.IntRange(0, 24).Draw(t, label+"/wild?") == 0 {
		return drawWildSettingsValue(t, label, depth)
	}
	switch n.kind {
	case schemaObject:
		m := map[string]any{}
		for _, f := range n.fields {
			if rapid.IntRange(0, 3).Draw(t, label+"."+f.name+"?") == 0 {
				m[f.name] = drawSettingsTree(t, f.node, wild, label+"."+f.name, depth+1)
			}
		}
		if wild && rapid.IntRange(0, 9).Draw(t, label+"/unknown?") == 0 {
			k := rapid.SampledFrom([]string{"bogus", "failureTreshold", "Enabled", "maxWait", ""}).Draw(t, label+"/unknown")
			m[k] = drawWildSettingsValue(t, label+"/unknown", depth)
		}
		return m
	case schemaMap:
		keys := []string{"glm", "openai", "a.b"}
		if n.elem.kind == schemaMs {
			keys = []string{"timeout", "server_error", "transport"}
		}
		if wild {
			keys = append(keys, "", "rate_limit")
		}
		m := map[string]any{}
		for range rapid.IntRange(0, 3).Draw(t, label+"/len") {
			k := rapid.SampledFrom(keys).Draw(t, label+"/key")
			m[k] = drawSettingsTree(t, n.elem, wild, label+"."+k, depth+1)
		}
		return m
	case schemaList:
		size := rapid.IntRange(0, 4).Draw(t, label+"/len")
		a := make([]any, size)
		for i := range a {
			a[i] = drawSettingsTree(t, n.elem, wild, label+"[]", depth+1)
		}
		return a
	case schemaInt:
		return drawSettingsNumber(t, label, wild, 0)
	case schemaMs:
		// A well-kinded tree holds no negative value and no timer of 0
		// (both are refused); a wild one may.
		lo := int64(0)
		if n.positive {
			lo = 1
		}
		if rapid.Bool().Draw(t, label+"/asDuration") {
			ds := []string{"250ms", "30s", "1m30s", "2h", "1500", " 42 ", "8760h"}
			if wild || !n.positive {
				ds = append(ds, "0s")
			}
			if wild {
				ds = append(ds, "-5s")
			}
			return rapid.SampledFrom(ds).Draw(t, label)
		}
		return drawSettingsNumber(t, label, wild, lo)
	case schemaBool:
		return rapid.SampledFrom([]any{true, false, "on", "OFF", "1", "0", "true"}).Draw(t, label)
	case schemaString:
		if rapid.Bool().Draw(t, label+"/sampled") {
			return rapid.SampledFrom([]string{"", " ", "x", " Quota Exceeded ", "额度不足", "openai/gpt-5", "İSTANBUL", "\xff\xfe"}).Draw(t, label)
		}
		// Any text but NUL, which a setting refuses (the Postgres store's
		// jsonb cannot keep it): TestSettingsRefuseNUL pins that.
		return rapid.String().Filter(func(s string) bool { return !strings.Contains(s, "\x00") }).Draw(t, label)
	case schemaScope:
		scopes := []string{"model", "provider", "connection", "", "exact", "family"}
		return rapid.SampledFrom(scopes).Draw(t, label)
	case schemaReason:
		return rapid.SampledFrom(reasonNames()).Draw(t, label)
	}
	return nil
}

func drawSettingsNumber(t *rapid.T, label string, wild bool, lo int64) any {
	var n int64
	switch rapid.IntRange(0, 3).Draw(t, label+"/numKind") {
	case 0:
		n = rapid.Int64Range(-10, 1100).Draw(t, label)
	case 1:
		n = rapid.Int64Range(-1, 700_000_000).Draw(t, label)
	case 2:
		n = rapid.SampledFrom([]int64{0, 1, -1, 99, 100, 599, 600, 1000, 5000, 86_400_000, math.MaxInt64, math.MinInt64}).Draw(t, label)
	default:
		n = rapid.Int64().Draw(t, label)
	}
	if !wild && n < lo {
		n = lo
	}
	if wild && rapid.IntRange(0, 5).Draw(t, label+"/asString?") == 0 {
		return strconv.FormatInt(n, 10)
	}
	return json.Number(strconv.FormatInt(n, 10))
}

func drawWildSettingsValue(t *rapid.T, label string, depth int) any {
	choices := []any{nil, true, "soon", json.Number("1.5"), json.Number("1e400"), json.Number("-0"), "", []any{}, map[string]any{}, []any{nil}}
	if depth < 6 && rapid.Bool().Draw(t, label+"/nest") {
		return map[string]any{"x": drawWildSettingsValue(t, label+".x", depth+1)}
	}
	return rapid.SampledFrom(choices).Draw(t, label+"/value")
}

// flattenErrors returns the leaves of a (joined) error tree.
func flattenErrors(err error) []error {
	switch u := err.(type) {
	case nil:
		return nil
	case interface{ Unwrap() []error }:
		var out []error
		for _, e := range u.Unwrap() {
			out = append(out, flattenErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// checkSettingsErrorsNamed asserts every problem in err is a *SettingsError
// naming a field.
func checkSettingsErrorsNamed(t interface{ Fatalf(string, ...any) }, err error) {
	leaves := flattenErrors(err)
	ses := model.SettingsErrors(err)
	if len(leaves) == 0 || len(ses) != len(leaves) {
		t.Fatalf("error %v: %d problems, %d of them *SettingsError", err, len(leaves), len(ses))
	}
	for _, se := range ses {
		// An unknown key may itself be "" (named by the quotes in its message).
		if (se.Field == "" && se.Problem != model.ProblemUnknownKey) || se.Problem == "" {
			t.Fatalf("docs/settings.md#layers: problem %q names no field", se.Error())
		}
	}
}

func TestSettingsNormalizeIdempotentRapid(t *testing.T) {
	// docs/settings.md#layers: Normalize(Normalize(x)) == Normalize(x) for any decodable settings.
	rapid.Check(t, func(t *rapid.T) {
		tree := drawSettingsTree(t, settingsSchema, false, "s", 0).(map[string]any)
		raw, err := decodeSettingsTree(mergeSettingsTrees(map[string]any(Full(model.DefaultSettings())), tree))
		if err != nil {
			t.Fatalf("a well-kinded tree failed to decode: %v", err)
		}
		before := cloneSettingsValue(map[string]any(Full(raw)))
		n, err := model.Normalize(raw)
		if !reflect.DeepEqual(before, map[string]any(Full(raw))) {
			t.Fatalf("Normalize modified its input")
		}
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		again, err := model.Normalize(n)
		if err != nil {
			t.Fatalf("normalised settings rejected: %v", err)
		}
		if !reflect.DeepEqual(again, n) {
			t.Fatalf("not idempotent:\n first %+v\nsecond %+v", n, again)
		}
	})
}

func TestResolveRandomTreesRapid(t *testing.T) {
	// Any tree either fails with SettingsErrors naming fields, or resolves to a
	// fixed point of Normalize whose GET output re-submits (docs/settings.md#validation).
	rapid.Check(t, func(t *rapid.T) {
		tree := drawSettingsTree(t, settingsSchema, true, "s", 0)
		l, _ := tree.(map[string]any)
		s, src, err := Resolve(NamedLayer{"r", l})
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		checkResolvedFixedPoint(t, s, src)
	})
}

func checkResolvedFixedPoint(t interface{ Fatalf(string, ...any) }, s model.Settings, src Sources) {
	n, err := model.Normalize(s)
	if err != nil || !reflect.DeepEqual(n, s) {
		t.Fatalf("resolved settings are not a fixed point of Normalize: %v", err)
	}
	body, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	l, err := ParseLayerJSON(body)
	if err != nil {
		t.Fatalf("GET output does not parse: %v", err)
	}
	again, _, err := Resolve(NamedLayer{"saved", l})
	if err != nil || !reflect.DeepEqual(again, s) {
		t.Fatalf("GET output does not re-submit: %v", err)
	}
	if len(src) == 0 {
		t.Fatalf("no sources")
	}
}

func TestResolveSourcesRapid(t *testing.T) {
	// docs/settings.md#layers: every value comes from the highest layer that sets it.
	names := []string{"file", "env", "saved"}
	rapid.Check(t, func(t *rapid.T) {
		var layers []NamedLayer
		leaves := make([]map[string]bool, len(names))
		for i, name := range names {
			tree := drawSettingsTree(t, settingsSchema, false, name, 0).(map[string]any)
			l, err := LayerOf(tree)
			if err != nil {
				t.Fatal(err)
			}
			layers = append(layers, NamedLayer{name, l})
			leaves[i] = map[string]bool{}
			walkSettingsLeaves(map[string]any(l), settingsSchema, "", false, func(p string) { leaves[i][p] = true })
		}
		_, src, err := Resolve(layers...)
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		for p, got := range src {
			want := SourceDefault
			for i, name := range names {
				if leaves[i][p] {
					want = name
				}
			}
			if got != want {
				t.Fatalf("%s: source %q, want %q", p, got, want)
			}
		}
	})
}

func TestMergePatchRapid(t *testing.T) {
	// RFC 7386: applying the same patch twice changes nothing more, and a saved
	// layer never keeps a null.
	rapid.Check(t, func(t *rapid.T) {
		saved := drawSettingsTree(t, settingsSchema, false, "saved", 0).(map[string]any)
		patch := drawSettingsTree(t, settingsSchema, false, "patch", 0).(map[string]any)
		if rapid.Bool().Draw(t, "nullify") {
			for k := range patch {
				patch[k] = nil
				break
			}
		}
		once, err := MergePatch(saved, patch)
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		twice, err := MergePatch(once, patch)
		if err != nil || !reflect.DeepEqual(once, twice) {
			t.Fatalf("merge patch not idempotent: %v", err)
		}
		var hasNull func(v any) bool
		hasNull = func(v any) bool {
			switch x := v.(type) {
			case nil:
				return true
			case map[string]any:
				for _, e := range x {
					if hasNull(e) {
						return true
					}
				}
			}
			return false
		}
		if hasNull(map[string]any(once)) {
			t.Fatalf("saved layer keeps a null: %v", once)
		}
	})
}

func TestEnvLayerRapid(t *testing.T) {
	vars := EnvVars()
	names := make([]string, 0, len(vars)+4)
	for _, v := range vars {
		names = append(names, v.Name)
	}
	names = append(names, "BREAKWATER_SETTINGS__requestQueue__maxWaitMs", "BREAKWATER_SETTINGS__bogus",
		"BREAKWATER_LISTEN", "BREAKWATER_RATE_LIMIT_MAX_WAIT")
	rapid.Check(t, func(t *rapid.T) {
		var environ []string
		for range rapid.IntRange(0, 6).Draw(t, "n") {
			name := rapid.SampledFrom(names).Draw(t, "name")
			value := rapid.SampledFrom([]string{"", "1", "0", "on", "off", "30s", "-1", "abc", "{}", "[1]", "99999999999999999999"}).Draw(t, "value")
			environ = append(environ, name+"="+value)
		}
		l, err := EnvLayer(environ)
		if err != nil {
			if len(model.SettingsErrors(err)) != len(flattenErrors(err)) {
				t.Fatalf("non-settings error %v", err)
			}
			return
		}
		s, src, err := Resolve(NamedLayer{"env", l})
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		checkResolvedFixedPoint(t, s, src)
	})
}

func FuzzResolve(f *testing.F) {
	seeds := []string{
		`{}`,
		`null`,
		`{"providerBreaker":{"apikey":{"failureThreshold":5,"degradationThreshold":9}}}`,
		`{"providerBreaker":{"apikey":{"failureTreshold":5}}}`,
		`{"requestQueue":{"maxWaitMs":"30s","executionMaxWaitMs":"10m","maxQueueDepth":"7"}}`,
		`{"modelLockout":{"enabled":true,"errorCodes":[1,429,99999],"baseCooldownMs":-1,"maxCooldownMs":1e30}}`,
		`{"providerErrorRules":{"glm":[{"status":429,"match":"Quota","scope":"connection","reason":"rate_limit_exceeded","cooldownMs":"1h"}]}}`,
		`{"statusRestatements":{"agentrouter":[{"id":"q","fromStatuses":[403,400],"toStatus":429,"textMarkers":["额度不足"],"excludeMarkers":["无权访问"],"defaultRetryAfterMs":60000}]}}`,
		`{"bannedSignals":[" Account Suspended ",""],"emergencyFallback":{"enabled":true,"target":"openai/gpt-5"}}`,
		`{"providerBreaker":{"oauth":{"cooldownByKind":{"timeout":"5s","bogus":1}}}}`,
		`{"waitForCooldown":{"maxRetryWaitSec":300,"budgetMs":0},"comboCooldownWait":{"maxWaitMs":"5m"}}`,
		`{"sessionAffinityTtlMs":"720h","upstreamTimeouts":{"attemptMs":0}}`,
		`[1,2]`,
		`{"a":{"b":{"c":{}}}}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLayerJSON(data)
		if err != nil {
			var se *model.SettingsError
			if !errors.As(err, &se) {
				t.Fatalf("ParseLayerJSON: %v is not a SettingsError", err)
			}
			return
		}
		s, src, err := Resolve(NamedLayer{"fuzz", l})
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		checkResolvedFixedPoint(t, s, src)
	})
}

func FuzzSetPath(f *testing.F) {
	seeds := [][2]string{
		{"providerBreaker.apikey.failureThreshold", "5"},
		{"providerBreaker.apikey.failureTreshold", "5"},
		{"requestQueue.maxWaitMs", "30s"},
		{"requestQueue.maxWaitMs.x", "1"},
		{"modelLockout.errorCodes", "[429,503]"},
		{"providerErrorRules.a.b", `[{"status":429,"match":"x","scope":"model"}]`},
		{"providerBreaker.oauth.cooldownByKind.timeout", "1m"},
		{"emergencyFallback", `{"enabled":true}`},
		{"waitForCooldown.enabled", "off"},
		{"", ""},
		{".", "null"},
		{"bannedSignals", `"x"`},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, path, value string) {
		l, err := SetPath(Layer{}, path, value)
		if err != nil {
			if len(model.SettingsErrors(err)) == 0 {
				t.Fatalf("SetPath: %v is not a SettingsError", err)
			}
			return
		}
		s, src, err := Resolve(NamedLayer{"set", l})
		if err != nil {
			checkSettingsErrorsNamed(t, err)
			return
		}
		checkResolvedFixedPoint(t, s, src)
		if v, err := Get(s, path); err == nil && strings.HasPrefix(path, "providerErrorRules.") && v == nil {
			t.Fatalf("Get(%s) returned nil without error", path)
		}
	})
}

func FuzzEnvLayer(f *testing.F) {
	f.Add("BREAKWATER_RATE_LIMIT_MAX_WAIT_MS=30s\nBREAKWATER_MODEL_LOCKOUT_ENABLED=on")
	f.Add("BREAKWATER_SETTINGS__providerBreaker__apikey__failureThreshold=5")
	f.Add("BREAKWATER_PROVIDER_BREAKER_APIKEY_FAILURE_THRESHOLD=5")
	f.Add("BREAKWATER_SETTINGS__requestQueue={\"maxWaitMs\":1}\nBREAKWATER_RATE_LIMIT_MAX_WAIT_MS=2")
	f.Fuzz(func(t *testing.T, env string) {
		l, err := EnvLayer(strings.Split(env, "\n"))
		if err != nil {
			if len(model.SettingsErrors(err)) != len(flattenErrors(err)) {
				t.Fatalf("non-settings error %v", err)
			}
			return
		}
		if _, _, err := Resolve(NamedLayer{"env", l}); err != nil {
			checkSettingsErrorsNamed(t, err)
		}
	})
}

// TestSettingsRefuseNUL: a NUL in a settings string or key is bad input from
// every source (the memory store took it, Postgres's jsonb refused it).
func TestSettingsRefuseNUL(t *testing.T) {
	for _, doc := range []string{`{"bannedSignals":["ok\u0000"]}`, `{"emergencyFallback":{"target":"a\u0000b"}}`, `{"providerErrorRules":{"g\u0000":[]}}`} {
		l, err := ParseLayerJSON([]byte(doc))
		if err == nil {
			_, _, err = Resolve(NamedLayer{Name: "patch", Tree: l})
		}
		if err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("%s: %v, want an error naming the NUL", doc, err)
		}
	}
}

// docs/settings.md#layers (one validation for every source) and docs/settings.md#defaults: a negative number
// means nothing in any setting (the named env variables always refused it;
// the file and PATCH clamped -5 to 0, which turned a global concurrency cap
// off), and a timer or budget of 0 would clamp to 1 ms and cut every request
// (streamIdleMs: 0 killed every stream after its first chunk). Both are
// refused with the field named; 0 stays valid where it means "none".
func TestSettingsRefuseNegativesAndZeroTimers(t *testing.T) {
	for _, c := range []struct{ doc, field string }{
		{`{"requestQueue":{"globalMaxConcurrent":-5}}`, "requestQueue.globalMaxConcurrent"},
		{`{"requestQueue":{"maxQueueDepth":-1}}`, "requestQueue.maxQueueDepth"},
		{`{"connectionCooldown":{"apikey":{"baseCooldownMs":-5}}}`, "connectionCooldown.apikey.baseCooldownMs"},
		{`{"upstreamTimeouts":{"streamIdleMs":"-2s"}}`, "upstreamTimeouts.streamIdleMs"},
		{`{"upstreamTimeouts":{"streamIdleMs":0}}`, "upstreamTimeouts.streamIdleMs"},
		{`{"upstreamTimeouts":{"firstContentMs":"0s"}}`, "upstreamTimeouts.firstContentMs"},
		{`{"requestBudget":{"deadlineMs":0}}`, "requestBudget.deadlineMs"},
		{`{"requestQueue":{"maxWaitMs":0}}`, "requestQueue.maxWaitMs"},
	} {
		l, err := ParseLayerJSON([]byte(c.doc))
		if err == nil {
			_, _, err = Resolve(NamedLayer{Name: "patch", Tree: l})
		}
		ses := model.SettingsErrors(err)
		if len(ses) != 1 || ses[0].Field != c.field {
			t.Errorf("%s: %v, want one error naming %s", c.doc, err, c.field)
		}
	}
	for _, doc := range []string{
		`{"requestQueue":{"globalMaxConcurrent":0,"maxQueueDepth":0}}`, // 0 = unlimited
		`{"connectionCooldown":{"apikey":{"baseCooldownMs":0}}}`,       // 0 = no cooldown
		`{"sessionAffinityTtlMs":0,"upstreamTimeouts":{"streamIdleMs":1}}`,
	} {
		l, err := ParseLayerJSON([]byte(doc))
		if err == nil {
			_, _, err = Resolve(NamedLayer{Name: "patch", Tree: l})
		}
		if err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

// docs/config.md: a bad variable is an error naming the variable. A named
// timer variable set to 0 was refused by the later tree check, which named
// only the settings path.
func TestEnvZeroTimerNamesTheVariable(t *testing.T) {
	for _, env := range []string{"BREAKWATER_RATE_LIMIT_MAX_WAIT_MS=0", "BREAKWATER_RATE_LIMIT_EXECUTION_MAX_WAIT_MS=0s"} {
		_, err := EnvLayer([]string{env})
		name, _, _ := strings.Cut(env, "=")
		ses := model.SettingsErrors(err)
		if len(ses) != 1 || ses[0].Source != "env "+name || !strings.Contains(ses[0].Problem, "at least 1 ms") {
			t.Errorf("%s: %v, want one error from env %s", env, err, name)
		}
	}
}

// reasonNames lists the name of every model.Reason, in order.
func reasonNames() []string {
	var out []string
	for v := range 256 {
		name := model.Reason(v).String()
		if strings.HasPrefix(name, "Reason(") {
			break
		}
		out = append(out, name)
	}
	return out
}

// TestSettingsJSONIsFull pins docs/settings.md#validation: the JSON of
// model.Settings is exactly the full tree Full builds from the schema
// (sorted keys, {} and [] for empty maps and lists, never null), for the
// zero value, the defaults, and any decodable settings.
func TestSettingsJSONIsFull(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, s model.Settings) {
		got, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		want, err := json.Marshal(map[string]any(Full(s)))
		if err != nil {
			t.Fatalf("Marshal(Full): %v", err)
		}
		if string(got) != string(want) {
			t.Fatalf("JSON of Settings differs from Full:\n got %s\nwant %s", got, want)
		}
		if strings.Contains(string(got), "null") {
			t.Fatalf("JSON of Settings holds null: %s", got)
		}
	}
	check(t, model.Settings{})
	check(t, model.DefaultSettings())
	check(t, model.Settings{
		ProviderErrorRules: map[string][]model.ProviderErrorRule{"p": nil},
		StatusRestatements: map[string][]model.RestatementRule{"p": {{ID: "r"}}, "q": nil},
	})
	rapid.Check(t, func(t *rapid.T) {
		tree := drawSettingsTree(t, settingsSchema, false, "s", 0).(map[string]any)
		raw, err := decodeSettingsTree(tree)
		if err != nil {
			t.Fatalf("a well-kinded tree failed to decode: %v", err)
		}
		check(t, raw)
	})
}
