package jsonvalid

import (
	"encoding/json"
	"strings"
	"testing"
)

// stringPieces are the bytes that end or complicate a run of plain string
// content: every escape form, malformed escapes, raw control bytes,
// multibyte and invalid UTF-8, and bytes next to the stop bytes in value.
var stringPieces = []string{
	`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00e9`, `\uD83D\uDE42`, `\udc00`,
	`\x`, `\'`, `\U0041`, `\u12`, `\u12G4`, `\`, `\u`,
	"\x00", "\x01", "\x1f", "\t", "\n", "\x7f", " ", "!", "#", "[", "]", "\x5b", "\x5d",
	"é", "世", "🙂", "\xff", "\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\x80\x80\x80\x80\x80\x80\x80\x80",
	"\xa2", "\xdc", "\xa0", `"`, `""`, `"x"`, `\"\\`,
}

// Rule: Valid and Members answer like encoding/json.Valid (and Members
// visits like the byte-at-a-time reference) whichever of the eight byte
// positions of a word a stop byte, an escape or a multibyte sequence falls
// on, in keys, in values and at top level, including strings and whole
// bodies shorter than one word.
func TestStringPiecesAtEveryOffset(t *testing.T) {
	const plain = "abcdefghijklmnopq"
	for _, piece := range stringPieces {
		for pre := 0; pre <= 16; pre++ {
			for post := 0; post <= 9; post++ {
				s := `"` + plain[:pre] + piece + plain[:post] + `"`
				for _, in := range []string{
					s,
					s[:len(s)-1], // unterminated
					`{` + s + `:1}`,
					`{"k":` + s + `}`,
					`[` + s + `,` + s + `]`,
					`{"a":[` + s + `],` + s + `:{` + s + `:` + s + `}}`,
				} {
					checkAgainstReferences(t, []byte(in))
				}
			}
		}
	}
}

// Rule: bodies shorter than a word take the byte-at-a-time tail only, and
// still answer like encoding/json.
func TestShortBodies(t *testing.T) {
	for _, in := range []string{
		``, ` `, `0`, `-`, `""`, `"a"`, `"\n"`, `"\u00e9"`, `"é"`, "\"\x01\"", `[]`, `{}`, `[1]`,
		`{"a":1}`, `{"a":""}`, `{"":[]}`, `{"a"}`, `[true]`, `[nul]`, `"abcdef"`, `"abcdef`, `"ab\"`,
		`1.5e3`, `-0.0`, `01`, `{"\/":0}`,
	} {
		checkAgainstReferences(t, []byte(in))
		for cut := 0; cut < len(in); cut++ {
			checkAgainstReferences(t, []byte(in[:cut]))
		}
	}
}

// Rule: the word scan finds the first stop byte whatever lies above it in
// the word, including bytes whose subtraction would borrow (0x00, 0x01,
// '"'+1, '\\'+1) and bytes >= 0x80.
func TestPlainEndAgainstByteLoop(t *testing.T) {
	alphabet := []byte{'a', 0x00, 0x01, 0x1f, 0x20, 0x21, '"', '#', '\\', ']', 0x7f, 0x80, 0xa0, 0xa2, 0xdc, 0xff}
	buf := make([]byte, 10)
	for seed := 0; seed < 200000; seed++ {
		x := seed
		for j := range buf {
			buf[j] = alphabet[x%len(alphabet)]
			x = x/len(alphabet) + seed*7919 + j
		}
		for start := 0; start <= len(buf); start++ {
			want := start
			for want < len(buf) && !strStop[buf[want]] {
				want++
			}
			if got := plainEnd(buf, start); got != want {
				t.Fatalf("plainEnd(%q, %d) = %d, want %d", buf, start, got, want)
			}
		}
	}
}

// checkAgainstReferences pins Valid to encoding/json.Valid, and Members to
// the same answer and to the exact visits of the reference implementation.
func checkAgainstReferences(t *testing.T, data []byte) {
	t.Helper()
	want := json.Valid(data)
	if got := Valid(data); got != want {
		t.Fatalf("Valid(%q) = %v, encoding/json.Valid = %v", data, got, want)
	}
	type visit struct{ ks, ke, vs, ve int }
	var got, ref []visit
	gotOK := Members(data, func(ks, ke, vs, ve int) { got = append(got, visit{ks, ke, vs, ve}) })
	refOK := refValid(data, func(ks, ke, vs, ve int) { ref = append(ref, visit{ks, ke, vs, ve}) })
	if gotOK != want || refOK != want {
		t.Fatalf("Members(%q) = %v, reference = %v, encoding/json.Valid = %v", data, gotOK, refOK, want)
	}
	if len(got) != len(ref) {
		t.Fatalf("Members(%q) visits %v, reference visits %v", data, got, ref)
	}
	for k := range got {
		if got[k] != ref[k] {
			t.Fatalf("Members(%q) visits %v, reference visits %v", data, got, ref)
		}
	}
}

// FuzzReference pins Valid and Members, visits included, against
// encoding/json.Valid and the reference implementation.
func FuzzReference(f *testing.F) {
	for _, tc := range validCases {
		f.Add([]byte(tc.in))
	}
	f.Add([]byte(requestBody))
	f.Add([]byte(`{"a":"x\"yz\u00e9\n","b":[1,2.5e-3,"` + strings.Repeat("é", 9) + `"],"c":{"d":null}}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkAgainstReferences(t, data) })
}
