package proxy

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/breakwater-gw/breakwater/faults"
	"github.com/breakwater-gw/breakwater/internal/pgtest"
)

// With the Postgres store, a response stored on one replica is continued
// (previous_response_id) and read (GET /v1/responses/{id}) on another,
// and only by the key that stored it.
func TestResponsesAcrossReplicasPostgres(t *testing.T) {
	url := pgtest.NewDB(t)
	fs := faults.NewServer(nil, faults.Options{})
	ts := httptest.NewServer(fs)
	t.Cleanup(ts.Close)
	cfg := strings.ReplaceAll(`
clientKeys:
  - {id: team, key: team-key}
  - {id: other, key: other-key}
providers:
  - {id: oa, baseURL: {{F}}/oa/v1, models: [gpt], connections: [{id: o1, apiKey: o1}]}
`+testBase, "{{F}}", ts.URL)
	up := newFakeUp(t)
	a := newReplica(t, up, url, cfg)
	b := newReplica(t, up, url, cfg)
	ctx := context.Background()
	ca, cb := responsesClient(a, "team-key"), responsesClient(b, "team-key")
	r1, err := ca.Responses.New(ctx, respParams("oa/gpt", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	p := respParams("oa/gpt", "and then?")
	p.PreviousResponseID = openai.String(r1.ID)
	r2, err := cb.Responses.New(ctx, p)
	if err != nil || r2.PreviousResponseID != r1.ID {
		t.Fatalf("continued on the other replica: %v", err)
	}
	if r := b.do("GET", "/v1/responses/"+r1.ID, "", "Authorization", "Bearer team-key"); r.code != 200 || !strings.Contains(r.body, r1.ID) {
		t.Fatalf("GET on the other replica: %d %s", r.code, r.body)
	}
	if r := b.do("GET", "/v1/responses/"+r1.ID, "", "Authorization", "Bearer other-key"); r.code != 404 {
		t.Fatalf("another key: %d %s", r.code, r.body)
	}
}
