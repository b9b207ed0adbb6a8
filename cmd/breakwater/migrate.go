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
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, migrateUsage) }
	envURL, deprecated := proxy.StoreURLFromEnv(os.Getenv)
	dbURL := fs.String("database", envURL, "postgres:// URL of the database")
	all := fs.Bool("all", false, "down: roll back every migration")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	// Flags may come before or after the action.
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(pos) == 0 {
		fs.Usage()
		return 2
	}
	if deprecated != "" && *dbURL == envURL {
		fmt.Fprintln(os.Stderr, "breakwater migrate: warning:", deprecated)
	}
	if *dbURL == "" {
		fmt.Fprintln(os.Stderr, "breakwater migrate: -database URL (or BREAKWATER_DATABASE_URL) is required")
		return 2
	}
	if !store.IsPostgresURL(*dbURL) {
		fmt.Fprintln(os.Stderr, "breakwater migrate: -database must be a postgres://user@host/db URL")
		return 2
	}
	switch action, extra := pos[0], len(pos)-1; {
	case (action == "up" || action == "version") && extra > 0,
		action == "down" && extra > 1:
		fmt.Fprintf(os.Stderr, "breakwater migrate: unexpected argument %q after %s\n", pos[len(pos)-1], action)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	db, err := sql.Open("postgres", *dbURL)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater migrate: %s\n", scrub(err, *dbURL))
		return 1
	}
	defer db.Close()
	g, err := store.NewMigrator(ctx, db)
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater migrate: cannot reach %s: %s\n", where(*dbURL), scrub(err, *dbURL))
		return 1
	}
	defer g.Close()

	action, extra := pos[0], pos[1:]
	if action != "version" && action != "force" {
		if v, dirty, err := g.Version(); err == nil && dirty {
			fmt.Fprintf(os.Stderr, "breakwater migrate: %v\n", &store.DirtyError{Version: v})
			return 1
		}
	}
	switch action {
	case "up":
		err = g.Up()
	case "down":
		n := 1
		if len(extra) > 0 {
			if n, err = strconv.Atoi(extra[0]); err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "breakwater migrate: down wants a positive number of steps, got %q\n", extra[0])
				return 2
			}
		}
		if *all {
			n = 0
		}
		err = g.Down(n)
	case "version":
		v, dirty, verr := g.Version()
		if verr != nil {
			err = verr
			break
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
		return 0
	case "force":
		if len(extra) != 1 {
			fmt.Fprintln(os.Stderr, "breakwater migrate: force wants exactly one VERSION")
			return 2
		}
		v, perr := strconv.Atoi(extra[0])
		if perr != nil || v < -1 {
			fmt.Fprintf(os.Stderr, "breakwater migrate: force wants a version number, got %q\n", extra[0])
			return 2
		}
		err = g.Force(v)
	default:
		fmt.Fprintf(os.Stderr, "breakwater migrate: unknown action %q\n\n", action)
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "breakwater migrate %s: %s\n", action, scrub(err, *dbURL))
		return 1
	}
	v, _, _ := g.Version()
	fmt.Printf("%s: ok, version %d\n", action, v)
	return 0
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
