package jsonvalid

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// completionBody is a realistic non-streaming OpenAI chat.completion
// response (626 bytes), the body the gateway validates most often.
const completionBody = `{"id":"chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"message":{"role":"assistant","content":"Q3 2024 revenue grew 12.5% year over year, costs stayed flat;\nthe team expects \"steady\" growth next year.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12345,"completion_tokens":156,"total_tokens":12501,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0}},"service_tier":"default","system_fingerprint":"fp_0ba0d124f1"}`

// requestBody is a typical ~200-byte chat request.
const requestBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise this in one line, please."}],"temperature":0.7,"max_tokens":256,"stream":false}`

type validCase struct {
	name string // the rule the case pins
	in   string
	want bool
}

// nest wraps inner in depth levels of open/close.
func nest(open, inner, close string, depth int) string {
	return strings.Repeat(open, depth) + inner + strings.Repeat(close, depth)
}

// mixedNest alternates arrays and objects so the bit stack has to remember a
// different kind at every level, crossing the 64-bit word boundaries and the
// inline/heap switch at 512.
func mixedNest(depth int, closeWrong bool) string {
	var b strings.Builder
	for d := 0; d < depth; d++ {
		if d%3 == 0 {
			b.WriteString(`{"k":`)
		} else {
			b.WriteString(`[1,`)
		}
	}
	b.WriteString(`0`)
	for d := depth - 1; d >= 0; d-- {
		closer := "]"
		if d%3 == 0 {
			closer = "}"
		}
		if closeWrong && d == 300 {
			// Swap the closer deep inside: only a correct stack notices.
			if closer == "]" {
				closer = "}"
			} else {
				closer = "]"
			}
		}
		b.WriteString(closer)
	}
	return b.String()
}

var validCases = []validCase{
	// Top level and whitespace.
	{"empty input is invalid", "", false},
	{"whitespace-only is invalid", " \t\r\n", false},
	{"surrounding whitespace allowed", " \t\r\n{}\r\n\t ", true},
	{"bare scalar top level", `"x"`, true},
	{"two values", "1 2", false},
	{"two objects", "{}{}", false},
	{"trailing garbage after object", `{"a":1}x`, false},
	{"trailing comma after top level", `[1],`, false},
	{"trailing NUL", "{}\x00", false},
	{"leading NUL", "\x00{}", false},
	{"BOM not skipped", "\xef\xbb\xbf{}", false},
	{"vertical tab not whitespace", "\v{}", false},
	{"form feed not whitespace", "\f1", false},
	{"NBSP not whitespace", "\xc2\xa01", false},

	// Literals.
	{"true", "true", true},
	{"false", "false", true},
	{"null", "null", true},
	{"truncated literal", "tru", false},
	{"truncated literal in array", "[nul]", false},
	{"literal is case sensitive", "True", false},
	{"literal followed by letter", "truex", false},
	{"literal followed by digit", "null1", false},
	{"NaN not a literal", "NaN", false},
	{"Infinity not a literal", "Infinity", false},

	// Numbers.
	{"zero", "0", true},
	{"negative zero", "-0", true},
	{"leading zero", "01", false},
	{"negative leading zero", "-01", false},
	{"double zero", "00", false},
	{"lone minus", "-", false},
	{"minus space digit", "- 1", false},
	{"plus sign", "+1", false},
	{"trailing dot", "1.", false},
	{"leading dot", ".5", false},
	{"fraction", "3.14", true},
	{"zero fraction", "0.0", true},
	{"dot then exponent", "1.e5", false},
	{"bare exponent", "1e", false},
	{"exponent sign only", "1e+", false},
	{"exponent minus only", "1E-", false},
	{"upper exponent", "1E5", true},
	{"signed exponent", "-1.5e-007", true},
	{"zero exponent", "0e0", true},
	{"double exponent", "1e5e5", false},
	{"double dot", "1.2.3", false},
	{"hex number", "0x10", false},
	{"number then space", "12 ", true},
	{"number in array", "[1,-2,3.5e+2]", true},
	{"huge number still valid", "1" + strings.Repeat("0", 400), true},

	// Strings.
	{"empty string", `""`, true},
	{"unterminated string", `"abc`, false},
	{"raw newline in string", "\"a\nb\"", false},
	{"raw tab in string", "\"a\tb\"", false},
	{"raw NUL in string", "\"\x00\"", false},
	{"raw 0x1f in string", "\"\x1f\"", false},
	{"DEL allowed raw", "\"\x7f\"", true},
	{"all simple escapes", `"\"\\\/\b\f\n\r\t"`, true},
	{"bad escape x", `"\x41"`, false},
	{"bad escape a", `"\a"`, false},
	{"bad escape single quote", `"\'"`, false},
	{"escape at end of input", `"\`, false},
	{"escaped quote unterminated", `"\"`, false},
	{"unicode escape", `"\u00e9"`, true},
	{"unicode escape upper hex", `"\u00E9\uABCD"`, true},
	{"short unicode escape", `"\u12"`, false},
	{"short unicode escape at eof", `"\u123`, false},
	{"non-hex unicode escape", `"\u12G4"`, false},
	{"upper U escape", `"\U0041"`, false},
	{"lone high surrogate accepted", `"\ud800"`, true},
	{"lone low surrogate accepted", `"\udc00x"`, true},
	{"reversed surrogate pair accepted", `"\udc00\ud800"`, true},
	{"invalid UTF-8 accepted", "\"\xff\xfe\"", true},
	{"truncated UTF-8 accepted", "\"\xe2\x82\"", true},
	{"overlong UTF-8 accepted", "\"\xc0\xaf\"", true},
	{"UTF-8 surrogate accepted", "\"\xed\xa0\x80\"", true},
	{"valid UTF-8", "\"héllo 世界 🙂\"", true},
	{"invalid UTF-8 outside string", "\xff", false},
	{"quote found in 8-byte block", `"abcdefghij"klm"`, false},
	{"control byte after long run", "\"abcdefghijklmnop\x01\"", false},
	{"backslash after long run", `"abcdefghijklmnop\q"`, false},
	{"single-quoted string", `'a'`, false},

	// Arrays.
	{"empty array", "[]", true},
	{"empty array with space", "[ \n ]", true},
	{"unclosed array", "[", false},
	{"unclosed array after value", "[1", false},
	{"unclosed array after comma", "[1,", false},
	{"trailing comma in array", "[1,]", false},
	{"leading comma in array", "[,1]", false},
	{"missing comma in array", "[1 2]", false},
	{"stray closer", "]", false},
	{"mismatched closer", "[}", false},
	{"mismatched nested closer", `[{"a":1]]`, false},

	// Objects.
	{"empty object", "{}", true},
	{"empty object with space", "{ \t }", true},
	{"simple object", `{"a":1,"b":[true,null]}`, true},
	{"spaced object", "{ \"a\" : 1 , \"b\" : { } }", true},
	{"unclosed object", "{", false},
	{"unclosed object after key", `{"a"`, false},
	{"unclosed object after colon", `{"a":`, false},
	{"unclosed object after value", `{"a":1`, false},
	{"missing colon", `{"a" 1}`, false},
	{"missing value", `{"a":}`, false},
	{"key without value", `{"a"}`, false},
	{"trailing comma in object", `{"a":1,}`, false},
	{"leading comma in object", `{,"a":1}`, false},
	{"non-string key", `{1:2}`, false},
	{"bare key", `{a:1}`, false},
	{"array closer for object", `{"a":1]`, false},
	{"duplicate keys accepted", `{"a":1,"a":2}`, true},
	{"key with escapes", `{"\u0041\n":1}`, true},

	// Nesting depth: encoding/json rejects the 10001st open container.
	{"array depth 10000 ok", nest("[", "", "]", 10000), true},
	{"array depth 10001 rejected", nest("[", "", "]", 10001), false},
	{"object depth 10000 ok", nest(`{"a":`, "1", "}", 10000), true},
	{"object depth 10001 rejected", nest(`{"a":`, "1", "}", 10001), false},
	{"unclosed depth 10001 rejected", strings.Repeat("[", 10001), false},
	{"depth 600 crosses inline stack", nest("[", "1", "]", 600), true},
	{"depth 600 unbalanced", nest("[", "1", "]", 600) + "]", false},
	{"mixed nesting 2000", mixedNest(2000, false), true},
	{"mixed nesting 2000 wrong deep closer", mixedNest(2000, true), false},
	{"mixed nesting 10000", mixedNest(10000, false), true},
	{"mixed nesting 10001", mixedNest(10001, false), false},

	// Realistic bodies.
	{"chat completion", completionBody, true},
	{"chat request", requestBody, true},
	{"pretty chat completion", prettyCompletion(), true},
	{"truncated chat completion", completionBody[:len(completionBody)-1], false},
}

// prettyCompletion is completionBody indented the way the OpenAI API sends it.
func prettyCompletion() string {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(completionBody), "", "  "); err != nil {
		panic(err)
	}
	return b.String()
}

func TestValid(t *testing.T) {
	for _, tc := range validCases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			std := json.Valid(in)
			got := Valid(in)
			if std != tc.want {
				t.Errorf("encoding/json.Valid = %v, table says %v (table is wrong)", std, tc.want)
			}
			if got != tc.want {
				t.Errorf("Valid = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExhaustiveShort compares every input of up to 4 bytes over an
// alphabet of grammar-significant bytes. It is deterministic coverage of the
// state-transition corners that random fuzzing reaches only by luck.
func TestExhaustiveShort(t *testing.T) {
	alphabet := []byte("{}[]:,\"\\ \t0129-+.eEtrufalsnx/\x00\x1f\x80")
	buf := make([]byte, 0, 4)
	var rec func(int)
	rec = func(left int) {
		in := buf
		if json.Valid(in) != Valid(in) {
			t.Fatalf("mismatch on %q: encoding/json=%v ours=%v", in, json.Valid(in), Valid(in))
		}
		if left == 0 {
			return
		}
		for _, c := range alphabet {
			buf = append(buf, c)
			rec(left - 1)
			buf = buf[:len(buf)-1]
		}
	}
	rec(4)
}

// TestMutatedBodies replaces, deletes and inserts grammar-significant bytes
// at every offset of the realistic bodies. Single-byte damage to a long
// string lands at every position within the 8-byte SWAR word, which is
// where an off-by-one in the word scan would hide.
func TestMutatedBodies(t *testing.T) {
	alphabet := []byte("{}[]:,\"\\ \n0-.eEtn/u\x00\x1f\x7f\x80\xff")
	for _, body := range []string{completionBody, requestBody, prettyCompletion()} {
		for i := 0; i <= len(body); i++ {
			for _, c := range alphabet {
				check := func(in []byte) {
					if json.Valid(in) != Valid(in) {
						t.Fatalf("mismatch on %q: encoding/json=%v ours=%v", in, json.Valid(in), Valid(in))
					}
				}
				check([]byte(body[:i] + string(c) + body[i:]))
				if i < len(body) {
					check([]byte(body[:i] + string(c) + body[i+1:]))
				}
			}
			if i < len(body) {
				in := []byte(body[:i] + body[i+1:])
				if json.Valid(in) != Valid(in) {
					t.Fatalf("mismatch on %q", in)
				}
			}
			// Truncation at every length exercises every unterminated state.
			if json.Valid([]byte(body[:i])) != Valid([]byte(body[:i])) {
				t.Fatalf("mismatch on truncation %q", body[:i])
			}
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, tc := range validCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want := json.Valid(data)
		if got := Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json.Valid = %v", data, got, want)
		}
	})
}

func TestValidZeroAllocs(t *testing.T) {
	body := []byte(completionBody)
	allocs := testing.AllocsPerRun(1000, func() {
		if !Valid(body) {
			t.Fatal("body unexpectedly invalid")
		}
	})
	if allocs != 0 {
		t.Fatalf("Valid allocated %v times per call, want 0", allocs)
	}
}

func BenchmarkValid(b *testing.B) {
	bodies := []struct {
		name string
		data []byte
	}{
		{"completion", []byte(completionBody)},
		{"completion_pretty", []byte(prettyCompletion())},
		{"request", []byte(requestBody)},
	}
	impls := []struct {
		name string
		fn   func([]byte) bool
	}{
		{"jsonvalid", Valid},
		{"encoding_json", json.Valid},
	}
	for _, body := range bodies {
		for _, impl := range impls {
			b.Run(body.name+"/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(body.data)))
				b.ReportAllocs()
				for b.Loop() {
					if !impl.fn(body.data) {
						b.Fatal("invalid")
					}
				}
			})
		}
	}
}
