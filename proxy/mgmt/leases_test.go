package mgmt

import (
	"net/http"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
)

func FuzzLeaseRequestDecode(f *testing.F) {
	// Decoding a lease body (and the owner/generation headers) never
	// panics, and what it accepts is valid: a known action, a canonical
	// generation, a well-formed owner, a clamped TTL.
	o := "bwl_" + strings.Repeat("A", 43)
	for _, s := range []string{`{"action":"acquire","model":"p/m"}`, `{"action":"renew","owner":"` + o + `","generation":1,"ttlMs":"5s"}`,
		`{"action":"release","generation":"9007199254740991"}`, `{"action":"status","generation":1e3}`, `[]`, `{`, `{"ttlMs":99999999999999999999}`} {
		f.Add([]byte(s), o, "1")
	}
	f.Fuzz(func(t *testing.T, body []byte, owner, gen string) {
		h := http.Header{}
		if owner != "" {
			h.Set(HeaderLeaseOwner, owner)
		}
		if gen != "" {
			h.Set(HeaderLeaseGeneration, gen)
		}
		c, err := DecodeLeaseRequest(body, h)
		if err != nil {
			if _, ok := err.(*model.LeaseError); !ok {
				t.Fatalf("untyped error %T %v", err, err)
			}
			return
		}
		if c.TTLMs < model.MinLeaseTTLMs || c.TTLMs > model.MaxLeaseTTLMs {
			t.Fatalf("ttl %d outside the clamp", c.TTLMs)
		}
		switch c.Action {
		case "acquire":
			if strings.TrimSpace(c.Model) == "" {
				t.Fatal("acquire without a model")
			}
		case "renew", "release", "status":
			if model.ParseLeaseOwner(c.Owner) != nil || c.Generation < 1 || c.Generation > model.MaxLeaseGeneration {
				t.Fatalf("accepted %+v", c)
			}
		default:
			t.Fatalf("action %q", c.Action)
		}
	})
}
