package mgmt

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"
)

// providerCore records the patches PutProvider receives and answers with
// err.
type providerCore struct {
	Core
	patches []*ProviderPatch
	err     error
}

func (f *providerCore) PutProvider(id string, p *ProviderPatch) (ProviderView, error) {
	f.patches = append(f.patches, p)
	return ProviderView{ID: id, Connections: []ConnectionView{}}, f.err
}

func servePut(t *testing.T, core Core, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := mux.NewRouter()
	newAPI(core).ProviderRoutes(func(p string, h http.HandlerFunc, methods ...string) { r.HandleFunc(p, h).Methods(methods...) })
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/api/providers/p", strings.NewReader(body)))
	return rec
}

// TestPutProviderNamesTheConnection: a bad field inside connections is a
// 400 naming the element's index and the field, before the core sees the
// patch (encoding/json's own path has no index).
func TestPutProviderNamesTheConnection(t *testing.T) {
	core := &providerCore{}
	rec := servePut(t, core, `{"connections":[{"id":"a"},{"id":"b","rateLimitOverrides":{"maxWaitMs":"1.5ms"}}]}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `connections[1]: field \"rateLimitOverrides.maxWaitMs\" must be a whole`) {
		t.Fatalf("got %d %s, want a 400 naming connections[1]", rec.Code, rec.Body.String())
	}
	if len(core.patches) != 0 {
		t.Fatalf("the core got %d patches for a refused body", len(core.patches))
	}
}

// TestPutProviderAnswersTheCoresRefusal: an unknown provider is a 404
// naming it, a refused patch a 400 with the core's text.
func TestPutProviderAnswersTheCoresRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		text string
	}{
		{ErrNoProvider, http.StatusNotFound, `provider \"p\" not found`},
		{errors.New("maxConcurrent must not be negative"), http.StatusBadRequest, "maxConcurrent must not be negative"},
		{nil, http.StatusOK, `"id":"p"`},
	} {
		rec := servePut(t, &providerCore{err: tc.err}, `{"maxConcurrent":2}`)
		if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.text) {
			t.Errorf("core error %v: got %d %s, want %d with %s", tc.err, rec.Code, rec.Body.String(), tc.code, tc.text)
		}
	}
}
