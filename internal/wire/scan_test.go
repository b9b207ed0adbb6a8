package wire

import (
	"encoding/json"
	"testing"
)

// The reader's string handling agrees with encoding/json: unquote decodes
// a string token to the same text (escapes, surrogate pairs, invalid
// UTF-8 and lone surrogates as U+FFFD), appendTok writes a token that
// decodes to it, and appendJSONBytes encodes any text to a token that
// decodes to its valid-UTF-8 form.
func FuzzStringCodec(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\ud83d\ude00"`, `"\ud800x"`, "\"\xff\xfe\"", `"\u0000<>&"`, `"é"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want string
		if json.Unmarshal(b, &want) == nil && firstByte(b) == '"' && b[0] == '"' && b[len(b)-1] == '"' {
			if got := string(unquote(nil, b)); got != want {
				t.Fatalf("unquote(%q) = %q, encoding/json %q", b, got, want)
			}
			if got := str(b); got != want {
				t.Fatalf("str(%q) = %q, want %q", b, got, want)
			}
			var back string
			if tok := appendTok(nil, b); json.Unmarshal(tok, &back) != nil || back != want {
				t.Fatalf("appendTok(%q) = %s", b, tok)
			}
		}
		var back string
		enc := appendJSONBytes(nil, b)
		ref, _ := json.Marshal(string(b))
		var wantBack string
		_ = json.Unmarshal(ref, &wantBack)
		if json.Unmarshal(enc, &back) != nil || back != wantBack {
			t.Fatalf("appendJSONBytes(%q) = %s, decodes to %q, want %q", b, enc, back, wantBack)
		}
	})
}

// The walk finds members and elements as encoding/json reads them.
func TestIter(t *testing.T) {
	body := []byte(` { "a" : [1, {"x":"}"} ,"s\"]"] , "b":{"c":null} ,"d":-1.5e3 } `)
	it := newIter(body[skipWS(body, 0):])
	var got []string
	for {
		k, v, ok := it.next()
		if !ok {
			break
		}
		got = append(got, string(k)+"="+string(v))
	}
	want := []string{`a=[1, {"x":"}"} ,"s\"]"]`, `b={"c":null}`, `d=-1.5e3`}
	if len(got) != len(want) {
		t.Fatalf("members %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("member %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// Bodies with whitespace around the top-level object read as without.
func TestLeadingWhitespace(t *testing.T) {
	if tr, err := MessagesToChat([]byte("\n  {\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]} \n")); err != nil || tr.Model != "m" {
		t.Fatalf("messages: %v", err)
	}
	if tr, err := ResponsesToChat([]byte(" \t{\"model\":\"m\",\"input\":\"x\"}\r\n")); err != nil || tr.Req.Model != "m" {
		t.Fatalf("responses: %v", err)
	}
	if o, err := ChatToRespOutput([]byte("\n{\"id\":\"c\",\"choices\":[{\"message\":{\"content\":\"hi\"}}]}")); err != nil || o.Text != "hi" {
		t.Fatalf("answer: %v", err)
	}
	if out, err := GeminiToEmbeddings([]byte(" {\"embeddings\":[{\"values\":[1]}]}"), "e", false); err != nil || !json.Valid(out) {
		t.Fatalf("embeddings: %v", err)
	}
}
