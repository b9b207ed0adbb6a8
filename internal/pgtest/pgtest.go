// Package pgtest gives tests a PostgreSQL database. It owns finding a
// server and handing each test a fresh, migrated database; it never touches
// a database it did not create.
//
// Resolution order (docs/testing.md#postgres-in-tests):
//
//  1. TEST_DATABASE_URL, when set (.ci/run sets it to the local server);
//  2. a postgres container from testcontainers-go, when a Docker engine
//     answers a short probe of the hosts testcontainers-go would use
//     (container.go) — no engine means no wait and no panic, just the next
//     step;
//  3. a throwaway local cluster from initdb/pg_ctl, when they are on PATH
//     (run as the postgres user when the tests run as root: servers refuse
//     root);
//  4. otherwise the test is skipped — but fails when CI=true, so CI never
//     passes by skipping the database tests.
//
// The embedded migrations are applied once per test binary into a template
// database; every NewDB clones it with CREATE DATABASE ... TEMPLATE, so tests
// are isolated and cheap. Packages that use pgtest call pgtest.Main from
// TestMain so the template and any container or local cluster are removed at
// the end.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/lib/pq" // the postgres driver
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/breakwater-gw/breakwater/migrations"
)

var (
	once     sync.Once
	server   string // admin URL of the server, "" when none
	template string // name of the migrated template database
	setupErr error
	skipMsg  string
	cluster  *localCluster
	ctr      *tcpostgres.PostgresContainer // the testcontainers step's server

	createMu sync.Mutex // CREATE DATABASE ... TEMPLATE needs the template idle
	seq      int
)

// Main runs the tests and then drops the template and terminates the
// container or stops the local cluster. Call it from TestMain:
// func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	cleanup()
	os.Exit(code)
}

func cleanup() {
	if template != "" && server != "" {
		if db, err := sql.Open("postgres", server); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _ = db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+quoteIdent(template)+` WITH (FORCE)`)
			cancel()
			db.Close()
		}
	}
	if ctr != nil {
		stopContainer(ctr)
	}
	if cluster != nil {
		cluster.stop()
	}
}

// ServerURL returns the admin URL of the test server (the "postgres"
// database), skipping or failing the test when there is none.
func ServerURL(t testing.TB) string {
	t.Helper()
	setup()
	if setupErr != nil {
		t.Fatalf("pgtest: %v", setupErr)
	}
	if server == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: no PostgreSQL for the store tests and CI=true: %s", skipMsg)
		}
		t.Skipf("pgtest: no PostgreSQL (%s); set TEST_DATABASE_URL to run this test", skipMsg)
	}
	return server
}

// NewDB creates a fresh database with every migration applied and returns
// its URL; the database is dropped when the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	admin := ServerURL(t)
	createMu.Lock()
	seq++
	name := fmt.Sprintf("bw_t_%d_%d_%s", os.Getpid(), seq, randHex(3))
	db, err := sql.Open("postgres", admin)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = db.ExecContext(ctx, `CREATE DATABASE `+quoteIdent(name)+` TEMPLATE `+quoteIdent(template))
		cancel()
	}
	createMu.Unlock()
	if err != nil {
		if db != nil {
			db.Close()
		}
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+quoteIdent(name)+` WITH (FORCE)`); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
		db.Close()
	})
	return WithDatabase(admin, name)
}

// NewEmptyDB creates a database without migrations (for migration tests).
func NewEmptyDB(t testing.TB) string {
	t.Helper()
	admin := ServerURL(t)
	name := fmt.Sprintf("bw_e_%d_%s", os.Getpid(), randHex(4))
	db, err := sql.Open("postgres", admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+quoteIdent(name)); err != nil {
		db.Close()
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+quoteIdent(name)+` WITH (FORCE)`)
		db.Close()
	})
	return WithDatabase(admin, name)
}

// WithDatabase returns the URL u pointing at database name.
func WithDatabase(u, name string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Path = "/" + name
	return p.String()
}

func setup() {
	once.Do(func() {
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			if err := ping(u); err != nil {
				setupErr = fmt.Errorf("TEST_DATABASE_URL is set but the server does not answer: %v", redact(err, u))
				return
			}
			server = u
		} else if u, cerr := startContainer(); cerr == nil {
			server = u
		} else if u, lerr := startLocalCluster(); lerr == nil {
			if !errors.Is(cerr, errNoDocker) {
				// An engine answered but no container came up: say so,
				// or a broken Docker setup hides behind the fallback.
				fmt.Fprintf(os.Stderr, "pgtest: %v; using initdb/pg_ctl instead\n", cerr)
			}
			server = u
		} else {
			skipMsg = cerr.Error() + "; " + lerr.Error()
			return
		}
		template, setupErr = makeTemplate(server)
	})
}

func ping(u string) error {
	db, err := sql.Open("postgres", u)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// makeTemplate creates and migrates this process's template database,
// dropping leftovers of test processes that no longer run.
func makeTemplate(admin string) (string, error) {
	db, err := sql.Open("postgres", admin)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dropStale(ctx, db)
	name := fmt.Sprintf("bw_tmpl_%d_%s", os.Getpid(), randHex(3))
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+quoteIdent(name)); err != nil {
		return "", fmt.Errorf("create template: %v", err)
	}
	tdb, err := sql.Open("postgres", WithDatabase(admin, name))
	if err != nil {
		return "", err
	}
	defer tdb.Close()
	if err := MigrateUp(ctx, tdb); err != nil {
		return "", fmt.Errorf("migrate template: %v", err)
	}
	return name, nil
}

// MigrateUp applies the embedded migrations (the same files the store uses)
// over a dedicated connection.
func MigrateUp(ctx context.Context, db *sql.DB) error {
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	drv, err := postgres.WithConnection(ctx, conn, &postgres.Config{})
	if err != nil {
		conn.Close()
		return err
	}
	m, err := migrate.NewWithInstance("iofs", src, "postgres", drv)
	if err != nil {
		conn.Close()
		return err
	}
	defer m.Close()
	if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return nil
}

var staleName = regexp.MustCompile(`^bw_(?:t|e|tmpl)_(\d+)_`)

func dropStale(ctx context.Context, db *sql.DB) {
	rows, err := db.QueryContext(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'bw\_%'`)
	if err != nil {
		return
	}
	var stale []string
	for rows.Next() {
		var n string
		if rows.Scan(&n) != nil {
			continue
		}
		m := staleName.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid != os.Getpid() && !alive(pid) {
			stale = append(stale, n)
		}
	}
	rows.Close()
	for _, n := range stale {
		_, _ = db.ExecContext(ctx, `DROP DATABASE IF EXISTS `+quoteIdent(n)+` WITH (FORCE)`)
	}
}

func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil || errors.Is(p.Signal(syscall.Signal(0)), syscall.EPERM)
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func redact(err error, u string) string {
	if p, perr := url.Parse(u); perr == nil && p.User != nil {
		if _, has := p.User.Password(); has {
			return strings.ReplaceAll(err.Error(), u, p.Redacted())
		}
	}
	return err.Error()
}

// localCluster is a throwaway server from initdb/pg_ctl.
type localCluster struct {
	dir    string
	pgctl  string
	asUser string // run as this user ("" = as ourselves)
}

func startLocalCluster() (string, error) {
	initdb, err1 := exec.LookPath("initdb")
	pgctl, err2 := exec.LookPath("pg_ctl")
	if err1 != nil || err2 != nil {
		return "", errors.New("TEST_DATABASE_URL is unset and initdb/pg_ctl are not on PATH")
	}
	c := &localCluster{pgctl: pgctl}
	dir, err := os.MkdirTemp("", "bw-pgtest-")
	if err != nil {
		return "", err
	}
	c.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return "", errors.New("running as root and there is no postgres user to run initdb as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", err
		}
		c.asUser = "postgres"
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		c.cleanupDir()
		return "", fmt.Errorf("initdb: %v: %s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", port, dir)
	if out, err := c.run(pgctl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		c.cleanupDir()
		return "", fmt.Errorf("pg_ctl start: %v: %s", err, out)
	}
	cluster = c
	u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := ping(u); err != nil {
		c.stop()
		cluster = nil
		return "", fmt.Errorf("local cluster does not answer: %v", err)
	}
	return u, nil
}

func (c *localCluster) run(bin string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if c.asUser != "" {
		if ru, err := exec.LookPath("runuser"); err == nil {
			cmd = exec.Command(ru, append([]string{"-u", c.asUser, "--", bin}, args...)...)
		} else {
			quoted := make([]string, 0, len(args)+1)
			for _, a := range append([]string{bin}, args...) {
				quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
			}
			cmd = exec.Command("su", c.asUser, "-s", "/bin/sh", "-c", strings.Join(quoted, " "))
		}
	} else {
		cmd = exec.Command(bin, args...)
	}
	return cmd.CombinedOutput()
}

func (c *localCluster) stop() {
	_, _ = c.run(c.pgctl, "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	c.cleanupDir()
}

func (c *localCluster) cleanupDir() { os.RemoveAll(c.dir) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
