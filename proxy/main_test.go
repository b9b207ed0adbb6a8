package proxy

import (
	"testing"

	"github.com/breakwater-gw/breakwater/internal/pgtest"
)

// The lease and replica tests take a server from pgtest; without this its
// throwaway initdb cluster (used when TEST_DATABASE_URL is unset) outlived
// every `go test ./proxy/` run.
func TestMain(m *testing.M) { pgtest.Main(m) }
