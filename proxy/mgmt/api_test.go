package mgmt

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/breakwater-gw/breakwater/model"
	"github.com/gorilla/mux"
)

// fakeCore answers the few Core methods a test uses; any other call hits
// the nil embedded interface and fails the test with a panic.
type fakeCore struct {
	Core
	cleared [][]model.ConnRef
	logged  []string
}

func (f *fakeCore) ClearCooldowns(refs []model.ConnRef, all bool, provider string) (model.ClearResult, error) {
	f.cleared = append(f.cleared, refs)
	return model.ClearResult{Cleared: len(refs)}, nil
}

func (f *fakeCore) LogOperator(action, provider, connection, modelID string, params any) {
	f.logged = append(f.logged, action)
}

func serve(t *testing.T, a *API, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := mux.NewRouter()
	a.CooldownRoutes(func(p string, h http.HandlerFunc, methods ...string) { r.HandleFunc(p, h).Methods(methods...) })
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	return rec
}

func newAPI(core Core) *API {
	return &API{Core: core, ReadBody: func(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
		b, err := io.ReadAll(r.Body)
		return b, err == nil
	}}
}

// TestRefusedActionNeverReachesTheCore: a body the handler refuses (both
// connectionIds and all, a malformed or repeated id, an unknown field) is
// a 400 and changes no state: the core is not called and no operator
// action is logged.
func TestRefusedActionNeverReachesTheCore(t *testing.T) {
	for _, body := range []string{
		`{"connectionIds":["p/c"],"all":true}`,
		`{"connectionIds":["nocomma"]}`,
		`{"connectionIds":["p/c","p/c"]}`,
		`{"provider":"p"}`,
		`{"connectionIds":["p/c"],"extra":1}`,
		`null`,
	} {
		core := &fakeCore{}
		rec := serve(t, newAPI(core), http.MethodPost, "/api/resilience/cooldowns", body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":"invalid_request"`) {
			t.Errorf("%s: got %d %s, want a 400 invalid_request", body, rec.Code, rec.Body.String())
		}
		if len(core.cleared) != 0 || len(core.logged) != 0 {
			t.Errorf("%s: the core was called (%v) or the action logged (%v)", body, core.cleared, core.logged)
		}
	}
}

// TestAcceptedActionIsLogged: an accepted clear reaches the core with the
// parsed connections and is recorded as an operator action.
func TestAcceptedActionIsLogged(t *testing.T) {
	core := &fakeCore{}
	rec := serve(t, newAPI(core), http.MethodPost, "/api/resilience/cooldowns", `{"connectionIds":["p/a","p/b"]}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("got %d %s", rec.Code, rec.Body.String())
	}
	want := []model.ConnRef{{Provider: "p", Connection: "a"}, {Provider: "p", Connection: "b"}}
	if len(core.cleared) != 1 || len(core.cleared[0]) != 2 || core.cleared[0][0] != want[0] || core.cleared[0][1] != want[1] {
		t.Fatalf("core got %v, want %v", core.cleared, want)
	}
	if len(core.logged) != 1 || core.logged[0] != "clear-cooldowns" {
		t.Fatalf("logged %v, want [clear-cooldowns]", core.logged)
	}
	if !strings.Contains(rec.Body.String(), `"cleared":2`) {
		t.Fatalf("answer %s lacks the core's result", rec.Body.String())
	}
}
