package jsonstr

import (
	"encoding/json"
	"testing"
)

// sameAsEncodingJSON checks the package's rule for s: Append writes valid
// JSON that decodes to what encoding/json's encoding of s decodes to
// (invalid UTF-8 as U+FFFD).
func sameAsEncodingJSON(t *testing.T, s string) {
	t.Helper()
	ref, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var want, got string
	if err := json.Unmarshal(ref, &want); err != nil {
		t.Fatal(err)
	}
	enc := Append(nil, s)
	if err := json.Unmarshal(enc, &got); err != nil || got != want {
		t.Fatalf("Append(%q) = %s: decodes to %q (%v), want %q", s, enc, got, err, want)
	}
	if encB := Append(nil, []byte(s)); string(encB) != string(enc) {
		t.Fatalf("Append([]byte(%q)) = %s, want %s", s, encB, enc)
	}
}

// TestAppendDecodesAsEncodingJSON pins the rule on the cases that need an
// escape or a replacement.
func TestAppendDecodesAsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "tab\tnl\ncr\r", "\x00\x01\b\f\x1f", "<a&b>",
		"héllo ✓ 𝄞", "bad \xff\xfe utf8", "cut \xe2\x82", "\u2028\u2029"} {
		sameAsEncodingJSON(t, s)
	}
	if got := string(Append([]byte("x"), "a\"\n\x01\xff")); got != `x"a\"\n\u0001\ufffd"` {
		t.Errorf("escapes: %s", got)
	}
}

// FuzzAppend: any input follows the rule.
func FuzzAppend(f *testing.F) {
	f.Add("a\"b\\c\x00\xff\b")
	f.Fuzz(sameAsEncodingJSON)
}
