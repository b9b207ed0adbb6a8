package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
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
	// SIGHUP reloads the config file (systemctl reload, docker kill -s HUP);
	// a refused reload is logged and counted, and the old config serves on.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go reloadOnSignal(ctx, g, hup, done, log)
	stopMetrics := stop
	return func() {
		signal.Stop(hup)
		close(done)
		stopMetrics()
		tctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		g.CloseTracing(tctx) // the traces still buffered
	}, nil
}

// reloadOnSignal reloads the config on every signal from sig until done
// closes. The gateway logs and counts each result itself.
func reloadOnSignal(ctx context.Context, g interface {
	Reload(context.Context) (proxy.ReloadResult, error)
}, sig <-chan os.Signal, done <-chan struct{}, log *slog.Logger) {
	for {
		select {
		case <-sig:
			log.Info("SIGHUP: reloading the config file")
			_, _ = g.Reload(ctx)
		case <-done:
			return
		}
	}
}

func init() {
	register("healthcheck", "probe a running gateway's /readyz (for container health checks)", runHealthcheck)
}

// runHealthcheck asks a gateway for its readiness and exits 0 when it is
// ready: the container image has no shell or curl, so its HEALTHCHECK runs
// the binary itself.
func runHealthcheck(args []string) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "the probe URL")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: breakwater healthcheck [-url URL] [-timeout 3s]\n\nExits 0 when the gateway at -url answers 200 (ready), 1 otherwise.")
		fs.PrintDefaults()
	}
	if code, ok := parseFlagsOnly(fs, args, "the URL is given with -url"); !ok {
		return code
	}
	c := &http.Client{Timeout: *timeout}
	resp, err := c.Get(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "breakwater healthcheck:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		fmt.Fprintf(os.Stderr, "breakwater healthcheck: %s answered %d %s\n", *url, resp.StatusCode, strings.TrimSpace(string(b)))
		return 1
	}
	return 0
}
