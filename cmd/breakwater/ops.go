package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/breakwater-gw/breakwater/proxy"
)

// startOps starts what serve runs beside the gateway for its operator: the
// unauthenticated metrics listener (server.metricsListen) and the
// start-up provider tests (server.testProvidersAtStart, in the background:
// the gateway serves while they run). The returned func stops them.
func startOps(ctx context.Context, g *proxy.Gateway, cfg *proxy.Config, log *slog.Logger) (func(), error) {
	stop := func() {}
	if addr := cfg.Server.MetricsListen; addr != "" {
		ml, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		hs := &http.Server{Handler: g.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ml)
		log.Info("metrics listening (no authentication)", "addr", ml.Addr().String(), "path", "/metrics")
		stop = func() { _ = hs.Close() }
	}
	if cfg.Server.TestProvidersAtStart {
		go g.TestProvidersAtStart(ctx)
	}
	return stop, nil
}
