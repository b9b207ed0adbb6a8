package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	_ "github.com/lib/pq" // the postgres driver

	"github.com/breakwater-gw/breakwater/proxy"
	"github.com/breakwater-gw/breakwater/store"
)

func init() {
	register("migrate", "database migrations (up|down|version|force)", runMigrate)
}

const migrateUsage = `usage: breakwater migrate <up|down [N|-all]|version|force VERSION> -database URL

  up              apply every pending migration (being up to date is success)
  down [N]        roll back N migrations (default 1); -all rolls back every one
  version         print the applied version and whether it is dirty
  force VERSION   record VERSION as applied and clear the dirty flag, running
                  nothing: only after repairing a failed migration by hand
                  (0 = no migration applied)

The URL may also come from BREAKWATER_DATABASE_URL (the variable serve reads
for store.url; the older BREAKWATER_STORE_URL is accepted with a warning).
`

// runMigrate is `breakwater migrate`. It never forces a dirty version by
// itself: a dirty schema stops every command but version and force, with a
// message naming the command that fixes it. The URL is never printed.
func runMigrate(args []string) int {
	a, code, ok := parseMigrateArgs(args)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	db, err := sql.Open("postgres", a.dbURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater migrate: %s\n", scrub(err, a.dbURL))
		return 1
	}
	defer db.Close()
	g, err := store.NewMigrator(ctx, db)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater migrate: cannot reach %s: %s\n", where(a.dbURL), scrub(err, a.dbURL))
		return 1
	}
	defer g.Close()

	action := a.pos[0]
	if action != "version" && action != "force" {
		if v, dirty, err := g.Version(); err == nil && dirty {
			fmt.Fprintf(os.Stderr, "breakwater migrate: %v\n", &store.DirtyError{Version: v})
			return 1
		}
	}
	if code, done, err := a.apply(g); done {
		return code
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater migrate %s: %s\n", action, scrub(err, a.dbURL))
		return 1
	}
	v, _, _ := g.Version()
	fmt.Printf("%s: ok, version %d\n", action, v)
	return 0
}

// migrateArgs is a parsed migrate command line.
type migrateArgs struct {
	dbURL   string
	all     bool
	timeout time.Duration
	pos     []string // the action and its arguments
}

// parseMigrateArgs reads the flags, which may come before or after the
// action, and checks the URL and the number of arguments.
func parseMigrateArgs(args []string) (a migrateArgs, code int, ok bool) {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, migrateUsage) }
	envURL, deprecated := proxy.StoreURLFromEnv(os.Getenv)
	dbURL := fs.String("database", envURL, "postgres:// URL of the database")
	all := fs.Bool("all", false, "down: roll back every migration")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return a, 0, false
			}
			return a, 2, false
		}
		if fs.NArg() == 0 {
			break
		}
		a.pos = append(a.pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(a.pos) == 0 {
		fs.Usage()
		return a, 2, false
	}
	if deprecated != "" && *dbURL == envURL {
		fmt.Fprintln(os.Stderr, "breakwater migrate: warning:", deprecated)
	}
	if *dbURL == "" {
		fmt.Fprintln(os.Stderr, "breakwater migrate: -database URL (or BREAKWATER_DATABASE_URL) is required")
		return a, 2, false
	}
	if !store.IsPostgresURL(*dbURL) {
		fmt.Fprintln(os.Stderr, "breakwater migrate: -database must be a postgres://user@host/db URL")
		return a, 2, false
	}
	switch action, extra := a.pos[0], len(a.pos)-1; {
	case (action == "up" || action == "version") && extra > 0,
		action == "down" && extra > 1:
		fmt.Fprintf(os.Stderr, "breakwater migrate: unexpected argument %q after %s\n", a.pos[len(a.pos)-1], action)
		return a, 2, false
	}
	a.dbURL, a.all, a.timeout = *dbURL, *all, *timeout
	return a, 0, true
}

// apply runs the action. done means the command ends here with code
// (bad arguments, or version, which prints its own answer); otherwise err
// is the migration's outcome.
func (a *migrateArgs) apply(g *store.Migrator) (code int, done bool, err error) {
	action, extra := a.pos[0], a.pos[1:]
	switch action {
	case "up":
		return 0, false, g.Up()
	case "down":
		n := 1
		if len(extra) > 0 {
			if n, err = strconv.Atoi(extra[0]); err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "breakwater migrate: down wants a positive number of steps, got %q\n", extra[0])
				return 2, true, nil
			}
		}
		if a.all {
			n = 0
		}
		return 0, false, g.Down(n)
	case "version":
		if err := printMigrateVersion(g); err != nil {
			return 0, false, err
		}
		return 0, true, nil
	case "force":
		if len(extra) != 1 {
			fmt.Fprintln(os.Stderr, "breakwater migrate: force wants exactly one VERSION")
			return 2, true, nil
		}
		v, perr := strconv.Atoi(extra[0])
		if perr != nil || v < -1 {
			fmt.Fprintf(os.Stderr, "breakwater migrate: force wants a version number, got %q\n", extra[0])
			return 2, true, nil
		}
		return 0, false, g.Force(v)
	default:
		fmt.Fprintf(os.Stderr, "breakwater migrate: unknown action %q\n\n", action)
		fmt.Fprint(os.Stderr, migrateUsage)
		return 2, true, nil
	}
}

// printMigrateVersion prints the applied version against the latest,
// and what to do when the schema is ahead or dirty.
func printMigrateVersion(g *store.Migrator) error {
	v, dirty, err := g.Version()
	if err != nil {
		return err
	}
	latest, _ := store.Latest()
	fmt.Printf("version %d (latest %d)", v, latest)
	if v > latest {
		fmt.Print(" AHEAD: a newer breakwater migrated this database")
	}
	if dirty {
		fmt.Printf(" DIRTY: repair the schema, then run `breakwater migrate force %d -database URL`", v)
	}
	fmt.Println()
	return nil
}

// where names the database without credentials: host and database only.
func where(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the database"
	}
	return u.Host + u.Path
}

// scrub keeps the URL (and so any password) out of an error message.
func scrub(err error, raw string) string {
	msg := err.Error()
	if raw == "" {
		return msg
	}
	var b strings.Builder
	for {
		i := strings.Index(strings.ToLower(msg), strings.ToLower(raw))
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i] + "[database URL]")
		msg = msg[i+len(raw):]
	}
}
