package pgtest

// The testcontainers step of the resolution order (docs/testing.md#postgres-in-tests). testcontainers-go panics or waits when no engine answers — a
// docker CLI on PATH with no daemon behind it is enough — so it is called only
// after probeDocker has had GET /_ping answered "OK", within probeTimeout, by
// one of the hosts testcontainers-go itself would use; and any panic on the
// way is recovered and becomes an error, so setup falls through to
// initdb/pg_ctl.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

const (
	// containerImage is the server version of the project's machines and CI.
	containerImage = "postgres:15-alpine"
	// probeTimeout bounds the probe of one Docker host: dial, request and
	// answer. A machine without an engine usually fails at once (no socket,
	// connection refused); this only bounds a socket that accepts and hangs.
	probeTimeout = time.Second
	// containerStartTimeout bounds the whole start, pulling the image
	// included; containerReadyTimeout bounds the wait strategies.
	containerStartTimeout = 5 * time.Minute
	containerReadyTimeout = 2 * time.Minute
)

// errNoDocker says that no engine answered the probe: the normal case on the
// project's machines, where setup falls through silently.
var errNoDocker = errors.New("no Docker engine answers")

// Where testcontainers-go v0.45.0 looks for an engine besides the
// environment and ~/.testcontainers.properties (its internal/core); variables
// so that the tests can move them.
var (
	dockerSocketPath = "/var/run/docker.sock"
	runUserDir       = "/run/user"
)

// runPostgres starts the postgres container with explicit wait strategies;
// a variable so that the tests can stand in for testcontainers-go.
var runPostgres = func(ctx context.Context) (*tcpostgres.PostgresContainer, error) {
	return tcpostgres.Run(ctx, containerImage,
		// The module's defaults plus what the local cluster gets too.
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "max_connections=200"),
		// The official image starts a temporary server for its init scripts
		// and then the real one: ready twice, then the mapped port serves.
		testcontainers.WithWaitStrategyAndDeadline(containerReadyTimeout,
			wait.ForLog("database system is ready to accept connections").
				WithOccurrence(2).WithStartupTimeout(containerReadyTimeout),
			wait.ForListeningPort("5432/tcp").WithStartupTimeout(containerReadyTimeout),
		),
	)
}

// startContainer returns the admin URL of a postgres container started for
// this test process, which cleanup terminates. The error wraps errNoDocker
// when no engine answered.
func startContainer() (u string, err error) {
	var (
		host string
		c    *tcpostgres.PostgresContainer
	)
	defer func() {
		if r := recover(); r != nil {
			if host == "" {
				err = fmt.Errorf("%w: the Docker probe panicked: %v", errNoDocker, r)
			} else {
				err = fmt.Errorf("testcontainers panicked with the engine at %s: %v", host, r)
			}
		}
		if err != nil && c != nil {
			stopContainer(c)
		}
	}()
	if host, err = findDocker(); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	if c, err = runPostgres(ctx); err != nil {
		return "", fmt.Errorf("the Docker engine at %s answers but the postgres container did not start: %w", host, err)
	}
	if u, err = c.ConnectionString(ctx, "sslmode=disable"); err != nil {
		return "", fmt.Errorf("postgres container: %w", err)
	}
	if err = ping(u); err != nil {
		return "", fmt.Errorf("postgres container does not answer: %v", redact(err, u))
	}
	ctr = c
	return u, nil
}

// stopContainer terminates c; it never panics nor waits for long.
func stopContainer(c *tcpostgres.PostgresContainer) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "pgtest: terminate container: panic: %v\n", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Terminate(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: terminate container: %v\n", err)
	}
}

// findDocker returns the first host, in testcontainers-go's order, whose
// engine answers the probe; otherwise an error wrapping errNoDocker.
func findDocker() (string, error) {
	hosts := dockerHosts()
	if len(hosts) == 0 {
		return "", fmt.Errorf("%w: DOCKER_HOST is unset and there is no Docker socket", errNoDocker)
	}
	var errs []string
	for _, h := range hosts {
		err := probeDocker(h, probeTimeout)
		if err == nil {
			return h, nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", h, err))
	}
	return "", fmt.Errorf("%w (%s)", errNoDocker, strings.Join(errs, "; "))
}

// dockerHosts lists the hosts testcontainers-go v0.45.0 tries, in its order:
// tc.host from ~/.testcontainers.properties, DOCKER_HOST, the default socket
// if it exists, docker.host from the properties, the first rootless socket
// that exists.
func dockerHosts() []string {
	props := readProperties()
	var hs []string
	add := func(h string) {
		if h != "" && !slices.Contains(hs, h) {
			hs = append(hs, h)
		}
	}
	add(props["tc.host"])
	add(os.Getenv("DOCKER_HOST"))
	if exists(dockerSocketPath) {
		add("unix://" + dockerSocketPath)
	}
	add(props["docker.host"])
	var rootless []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		rootless = append(rootless, filepath.Join(x, "docker.sock"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		rootless = append(rootless,
			filepath.Join(home, ".docker", "run", "docker.sock"),
			filepath.Join(home, ".docker", "desktop", "docker.sock"))
	}
	rootless = append(rootless, filepath.Join(runUserDir, strconv.Itoa(os.Getuid()), "docker.sock"))
	for _, p := range rootless {
		if exists(p) {
			add("unix://" + p)
			break
		}
	}
	return hs
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// readProperties reads the key=value (or key: value) lines of
// ~/.testcontainers.properties; a missing file is no properties.
func readProperties() map[string]string {
	props := map[string]string{}
	home, err := os.UserHomeDir()
	if err != nil {
		return props
	}
	f, err := os.Open(filepath.Join(home, ".testcontainers.properties"))
	if err != nil {
		return props
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		if i := strings.IndexAny(line, "=:"); i > 0 {
			props[strings.TrimSpace(line[:i])] = strings.TrimSpace(line[i+1:])
		}
	}
	return props
}

// probeDocker asks the engine at host (unix://path, a bare socket path, or
// tcp://host[:port]) for GET /_ping and wants 200 "OK" within timeout. TLS
// follows the Docker client's environment: DOCKER_CERT_PATH (ca.pem,
// cert.pem, key.pem) and DOCKER_TLS_VERIFY.
func probeDocker(host string, timeout time.Duration) error {
	network, addr, useTLS, err := parseDockerHost(host)
	if err != nil {
		return err
	}
	tr := &http.Transport{
		Proxy: nil, // never through HTTP_PROXY
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	scheme := "http"
	if useTLS {
		serverName, _, _ := net.SplitHostPort(addr)
		tr.TLSClientConfig = dockerTLS(serverName)
		scheme = "https"
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /_ping: %s", resp.Status)
	}
	if strings.TrimSpace(string(body)) != "OK" {
		return fmt.Errorf("GET /_ping answered %q, not OK", body)
	}
	return nil
}

// parseDockerHost returns where to dial host and whether to speak TLS.
func parseDockerHost(host string) (network, addr string, useTLS bool, err error) {
	if strings.HasPrefix(host, "/") { // testcontainers-go's rootless paths
		return "unix", host, false, nil
	}
	u, err := url.Parse(host)
	if err != nil {
		return "", "", false, fmt.Errorf("DOCKER_HOST %q: %v", host, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if p == "" {
			p = u.Host + u.Path
		}
		if p == "" {
			return "", "", false, fmt.Errorf("docker host %q has no socket path", host)
		}
		return "unix", p, false, nil
	case "tcp", "http", "https":
		useTLS = u.Scheme == "https" || os.Getenv("DOCKER_CERT_PATH") != ""
		addr = u.Host
		if u.Port() == "" {
			port := "2375"
			if useTLS {
				port = "2376"
			}
			addr = net.JoinHostPort(u.Hostname(), port)
		}
		return "tcp", addr, useTLS, nil
	default:
		return "", "", false, fmt.Errorf("docker host %q: scheme %q is not probed", host, u.Scheme)
	}
}

// dockerTLS mirrors the Docker client: certificates from DOCKER_CERT_PATH,
// verified only when DOCKER_TLS_VERIFY is set.
func dockerTLS(serverName string) *tls.Config {
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	dir := os.Getenv("DOCKER_CERT_PATH")
	if dir == "" {
		return cfg
	}
	// As the Docker client does; the probe only reads "OK" from /_ping.
	cfg.InsecureSkipVerify = os.Getenv("DOCKER_TLS_VERIFY") == "" //nolint:gosec
	if ca, err := os.ReadFile(filepath.Join(dir, "ca.pem")); err == nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		cfg.RootCAs = pool
	}
	if cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")); err == nil {
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}
