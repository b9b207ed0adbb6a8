package jsonvalid

import (
	"bytes"
	"encoding/json"
	"testing"
)

// checkMembers pins Members' contract on data: the same answer as
// encoding/json.Valid, and for a valid top-level object, visits that
// rebuild the object exactly — every top-level member once, in order,
// duplicates included, each range a whole key string and a whole value
// with no surrounding space.
func checkMembers(t *testing.T, data []byte) {
	t.Helper()
	var rebuilt bytes.Buffer
	rebuilt.WriteByte('{')
	visits := 0
	got := Members(data, func(ks, ke, vs, ve int) {
		if visits > 0 {
			rebuilt.WriteByte(',')
		}
		visits++
		rebuilt.Write(data[ks:ke])
		rebuilt.WriteByte(':')
		rebuilt.Write(data[vs:ve])
		if ks >= ke || data[ks] != '"' || data[ke-1] != '"' || vs >= ve || isSpace[data[vs]] || isSpace[data[ve-1]] {
			t.Fatalf("Members(%.200q): bad ranges key [%d,%d) value [%d,%d)", data, ks, ke, vs, ve)
		}
	})
	rebuilt.WriteByte('}')
	if want := json.Valid(data); got != want {
		t.Fatalf("Members(%.200q) = %v, encoding/json.Valid = %v", data, got, want)
	}
	if !got {
		return
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if trimmed[0] != '{' {
		if visits != 0 {
			t.Fatalf("Members(%.200q): %d visits for a top level that is not an object", data, visits)
		}
		return
	}
	var a, b bytes.Buffer
	if err := json.Compact(&a, data); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&b, rebuilt.Bytes()); err != nil {
		t.Fatalf("Members(%.200q): the visits rebuild %.200q, not JSON: %v", data, rebuilt.Bytes(), err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("Members(%.200q): the visits rebuild %.200s, want %.200s", data, b.Bytes(), a.Bytes())
	}
}

// Rule: Members validates like Valid and reports the top-level members of
// an object exactly, whatever is nested inside them.
func TestMembers(t *testing.T) {
	for _, tc := range validCases {
		checkMembers(t, []byte(tc.in))
	}
	for _, s := range []string{
		requestBody, completionBody, prettyCompletion(),
		` { "a" : { "b" : {"c":1} , "d":[{"e":"f"}] } , "a" : 2 } `,
		`{"model":"m","messages":[{"role":"user","content":"{\"model\":\"x\"}"}],"stream":true}`,
		`{"k\"ey":"v","\u006dodel":"m","":null}`,
		`{}`, `{"a":[]}`, `[{"a":1}]`, `"x"`,
	} {
		checkMembers(t, []byte(s))
	}
}

// Rule: an invalid body gets false even when visits were made before the
// error was found.
func TestMembersRejectsLateErrors(t *testing.T) {
	n := 0
	if Members([]byte(`{"model":"m","messages":[}`), func(int, int, int, int) { n++ }) {
		t.Fatal("Members accepted invalid JSON")
	}
	if n != 1 {
		t.Fatalf("%d visits before the error, want 1 (model)", n)
	}
}

func FuzzMembers(f *testing.F) {
	for _, tc := range validCases {
		f.Add([]byte(tc.in))
	}
	f.Add([]byte(requestBody))
	f.Fuzz(func(t *testing.T, data []byte) { checkMembers(t, data) })
}

// BenchmarkMembers is the request path: one pass that validates a chat
// request and reports its top-level members.
func BenchmarkMembers(b *testing.B) {
	body := []byte(requestBody)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	visits := 0
	visit := func(int, int, int, int) { visits++ }
	for b.Loop() {
		if !Members(body, visit) {
			b.Fatal("invalid")
		}
	}
	if visits == 0 {
		b.Fatal("no visits")
	}
}
