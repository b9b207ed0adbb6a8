package pgtest

// The Docker probe and the testcontainers step without Docker: fake engines
// on unix sockets and TCP ports, hanging sockets, and no socket at all. None
// of these tests needs a Docker engine or a PostgreSQL server.

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// fast is what "fails fast" means here: well under 2 s: the engine probe
// has a short timeout (docs/testing.md#postgres-in-tests).
const fast = 1500 * time.Millisecond

// sockDir is a short directory for unix sockets (their paths are limited to
// about 100 bytes, which t.TempDir can exceed).
func sockDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "pgt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeEngine serves h on a unix socket and returns the socket's path.
func fakeEngine(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	p := filepath.Join(sockDir(t), "docker.sock")
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return p
}

func pingOK(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/_ping" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Api-Version", "1.47")
	_, _ = w.Write([]byte("OK"))
}

// hangingSocket is a unix socket that takes connections and never answers:
// accept=false leaves them in the backlog, accept=true holds them open.
func hangingSocket(t *testing.T, accept bool) string {
	t.Helper()
	p := filepath.Join(sockDir(t), "docker.sock")
	ln, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	if accept {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { <-done; c.Close() }()
			}
		}()
	}
	return p
}

// timed runs f and fails the test if it took longer than fast.
func timed(t *testing.T, what string, f func() error) error {
	t.Helper()
	start := time.Now()
	err := f()
	if d := time.Since(start); d > fast {
		t.Errorf("%s took %v, want under %v", what, d, fast)
	}
	return err
}

func TestProbeDocker(t *testing.T) {
	ok := fakeEngine(t, pingOK)
	notDocker := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hello")) })
	failing := fakeEngine(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", http.StatusInternalServerError) })
	backlog := hangingSocket(t, false)
	held := hangingSocket(t, true)
	notSock := filepath.Join(sockDir(t), "plain-file")
	if err := os.WriteFile(notSock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tcpOK := httptest.NewServer(http.HandlerFunc(pingOK))
	defer tcpOK.Close()
	refused := freeTCPAddr(t)

	for _, c := range []struct {
		name, host string
		ok         bool
	}{
		{"unix socket answering OK", "unix://" + ok, true},
		{"bare socket path (rootless form)", ok, true},
		{"tcp host answering OK", "tcp://" + tcpOK.Listener.Addr().String(), true},
		{"HTTP server that is not an engine", "unix://" + notDocker, false},
		{"engine answering 500", "unix://" + failing, false},
		{"socket never accepted", "unix://" + backlog, false},
		{"socket accepted and held", "unix://" + held, false},
		{"no socket", "unix://" + filepath.Join(sockDir(t), "missing.sock"), false},
		{"a file that is not a socket", "unix://" + notSock, false},
		{"tcp connection refused", "tcp://" + refused, false},
		{"unprobed scheme", "ssh://user@host", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := timed(t, "probe", func() error { return probeDocker(c.host, probeTimeout) })
			if c.ok && err != nil {
				t.Fatalf("probeDocker(%s) = %v, want nil", c.host, err)
			}
			if !c.ok && err == nil {
				t.Fatalf("probeDocker(%s) = nil, want an error", c.host)
			}
		})
	}
}

func TestProbeDockerTLS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(pingOK))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the plain-HTTP probe's handshake error
	srv.StartTLS()
	defer srv.Close()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	host := "tcp://" + srv.Listener.Addr().String()
	t.Setenv("DOCKER_CERT_PATH", dir)
	t.Setenv("DOCKER_TLS_VERIFY", "1")
	if err := probeDocker(host, probeTimeout); err != nil {
		t.Fatalf("verified TLS: %v", err)
	}
	// Plain HTTP against the TLS engine is not an answer.
	t.Setenv("DOCKER_CERT_PATH", "")
	t.Setenv("DOCKER_TLS_VERIFY", "")
	if err := probeDocker(host, probeTimeout); err == nil {
		t.Fatal("plain HTTP to a TLS engine: want an error")
	}
}

func freeTCPAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// isolate points every place dockerHosts looks at into empty temporary
// directories, so that the machine's own Docker setup does not leak in.
func isolate(t *testing.T) (home string) {
	t.Helper()
	home = t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("DOCKER_HOST", "")
	t.Setenv("DOCKER_CERT_PATH", "")
	t.Setenv("DOCKER_TLS_VERIFY", "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	oldSock, oldRun := dockerSocketPath, runUserDir
	dockerSocketPath = filepath.Join(home, "var-run-docker.sock")
	runUserDir = filepath.Join(home, "run-user")
	t.Cleanup(func() { dockerSocketPath, runUserDir = oldSock, oldRun })
	return home
}

func TestDockerHostsOrder(t *testing.T) {
	home := isolate(t)
	if hs := dockerHosts(); len(hs) != 0 {
		t.Fatalf("nothing configured: hosts = %v", hs)
	}

	touch := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	xdg := filepath.Join(home, "xdg")
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	touch(filepath.Join(xdg, "docker.sock"))
	touch(filepath.Join(home, ".docker", "run", "docker.sock")) // a second rootless socket: not tried
	touch(dockerSocketPath)
	t.Setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
	props := "# comment\ntc.host=tcp://tc.example:2375\ndocker.host : unix:///props/docker.sock\n"
	if err := os.WriteFile(filepath.Join(home, ".testcontainers.properties"), []byte(props), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"tcp://tc.example:2375",
		"tcp://10.0.0.1:2375",
		"unix://" + dockerSocketPath,
		"unix:///props/docker.sock",
		"unix://" + filepath.Join(xdg, "docker.sock"),
	}
	if got := dockerHosts(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("hosts =\n  %v\nwant\n  %v", got, want)
	}
}

// With no engine anywhere, or only sockets that hang or refuse, the step
// gives up fast with errNoDocker and starts nothing.
func TestStartContainerWithoutEngine(t *testing.T) {
	called := false
	old := runPostgres
	runPostgres = func(context.Context) (*tcpostgres.PostgresContainer, error) {
		called = true
		return nil, errors.New("must not be called")
	}
	t.Cleanup(func() { runPostgres = old })

	for _, c := range []struct {
		name  string
		setup func(t *testing.T)
	}{
		{"nothing configured", func(*testing.T) {}},
		{"DOCKER_HOST socket that hangs", func(t *testing.T) {
			t.Setenv("DOCKER_HOST", "unix://"+hangingSocket(t, true))
		}},
		{"default socket without engine", func(t *testing.T) {
			p := hangingSocket(t, false)
			dockerSocketPath = p
		}},
		{"DOCKER_HOST tcp refused", func(t *testing.T) {
			t.Setenv("DOCKER_HOST", "tcp://"+freeTCPAddr(t))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolate(t)
			c.setup(t)
			var u string
			err := timed(t, "startContainer", func() (err error) {
				u, err = startContainer()
				return err
			})
			if !errors.Is(err, errNoDocker) {
				t.Fatalf("startContainer() = %q, %v; want errNoDocker", u, err)
			}
			if called || ctr != nil {
				t.Fatal("a container was started without an engine")
			}
		})
	}
}

// When an engine answers but testcontainers-go fails or panics, the step
// returns an error that is not errNoDocker (setup reports it and falls
// through) and does not panic.
func TestStartContainerFailureAndPanic(t *testing.T) {
	old := runPostgres
	t.Cleanup(func() { runPostgres = old })
	for _, c := range []struct {
		name string
		run  func(context.Context) (*tcpostgres.PostgresContainer, error)
		want string
	}{
		{"error", func(context.Context) (*tcpostgres.PostgresContainer, error) {
			return nil, errors.New("pull access denied")
		}, "pull access denied"},
		{"panic", func(context.Context) (*tcpostgres.PostgresContainer, error) {
			panic("rootless Docker not found")
		}, "panicked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			isolate(t)
			t.Setenv("DOCKER_HOST", "unix://"+fakeEngine(t, pingOK))
			runPostgres = c.run
			u, err := startContainer()
			if err == nil || errors.Is(err, errNoDocker) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("startContainer() = %q, %v; want an error with %q that is not errNoDocker", u, err, c.want)
			}
			if ctr != nil {
				t.Fatal("ctr set after a failed start")
			}
		})
	}
}

func TestParseDockerHost(t *testing.T) {
	t.Setenv("DOCKER_CERT_PATH", "")
	for _, c := range []struct {
		host, network, addr string
		tls                 bool
	}{
		{"unix:///var/run/docker.sock", "unix", "/var/run/docker.sock", false},
		{"/run/user/1000/docker.sock", "unix", "/run/user/1000/docker.sock", false},
		{"tcp://127.0.0.1:2375", "tcp", "127.0.0.1:2375", false},
		{"tcp://docker", "tcp", "docker:2375", false},
		{"https://docker", "tcp", "docker:2376", true},
	} {
		n, a, tl, err := parseDockerHost(c.host)
		if err != nil || n != c.network || a != c.addr || tl != c.tls {
			t.Errorf("parseDockerHost(%q) = %s %s %v %v; want %s %s %v", c.host, n, a, tl, err, c.network, c.addr, c.tls)
		}
	}
	if _, _, _, err := parseDockerHost("npipe:////./pipe/docker_engine"); err == nil {
		t.Error("npipe: want an error")
	}
}
