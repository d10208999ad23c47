// Command pgmirror mirrors a PostgreSQL table of settings into typed Go structs, kept fresh
// by an informer over source/postgres (logical replication) and indexed by team; it
// prints each change as it arrives, serves the mirror to other processes over HTTP
// (fanout: the Kubernetes list+watch shape, so that many clients cost the database one
// replication stream), and answers health probes (/healthz, /readyz) from a manager.
//
// With no --url it starts a throwaway PostgreSQL server (source/postgres/pgtest: Debian's
// package, installed if absent and run as root), creates the table and its publication,
// mirrors it, changes it while the mirror runs, and exits by itself:
//
//	go run ./examples/pgmirror
//
// With --url it mirrors a real database until interrupted (or --duration has passed). The
// table needs a publication (CREATE PUBLICATION informer_settings FOR TABLE settings) and
// the server wal_level = logical; the error says so otherwise:
//
//	go run ./examples/pgmirror --url postgres://informer@db/app --table settings --addr :8080
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/informer-go/informer"
	"github.com/informer-go/informer/fanout"
	"github.com/informer-go/informer/manager"
	"github.com/informer-go/informer/source/postgres"
	"github.com/informer-go/informer/source/postgres/pgtest"
)

// Setting is one row of the settings table.
type Setting struct {
	Name  string  `db:"name" json:"name"`   // the primary key
	Value string  `db:"value" json:"value"` // the setting's value
	Team  *string `db:"team" json:"team"`   // the owning team, NULL for none (indexed)
}

// String formats s on one line, as the example prints it.
func (s *Setting) String() string {
	team := "-"
	if s.Team != nil {
		team = *s.Team
	}
	return fmt.Sprintf("%s=%q team=%s", s.Name, s.Value, team)
}

// options are the command-line flags.
type options struct {
	url      string // empty: start a throwaway server with sample data
	table    string
	addr     string // the HTTP address of the mirror and the probes
	team     string // the team the index query asks for
	duration time.Duration
}

func main() {
	var opts options
	flag.StringVar(&opts.url, "url", "", "PostgreSQL connection string (a role with REPLICATION); empty starts a throwaway server with sample data")
	flag.StringVar(&opts.table, "table", "settings", "the table to mirror")
	flag.StringVar(&opts.addr, "addr", "127.0.0.1:0", "where to serve the mirror (GET /, ?watch=true) and /healthz, /readyz")
	flag.StringVar(&opts.team, "team", "billing", "the team whose settings the index query lists")
	flag.DurationVar(&opts.duration, "duration", 0, "with --url: stop after this long (0: until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "pgmirror:", err)
		os.Exit(1)
	}
}

// run mirrors the table: of a throwaway server with scripted changes when opts.url is
// empty, of a real database otherwise.
func run(ctx context.Context, out io.Writer, opts options) error {
	var mu sync.Mutex // one printer at a time
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	scripted := opts.url == ""
	if scripted {
		srv, err := pgtest.Start(pgtest.Options{})
		if err != nil {
			return err
		}
		defer srv.Stop()
		say("started a PostgreSQL server on 127.0.0.1:%d", srv.Port)
		opts.url = srv.URL
		if err := setUp(ctx, opts.url, opts.table); err != nil {
			return err
		}
	} else if opts.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.duration)
		defer cancel()
	}

	// The mirror: a source over the table, decoding rows by the struct's db tags; an
	// informer indexing by team; a handler that prints every change.
	src, err := postgres.New(postgres.Config[*Setting]{ConnString: opts.url, Table: opts.table})
	if err != nil {
		return err
	}
	defer src.Close()
	inf, err := informer.New(src, informer.Options[string, *Setting]{
		Name: "settings",
		Key:  func(s *Setting) (string, error) { return s.Name, nil },
		Indexers: informer.Indexers[*Setting]{
			"team": informer.IndexBy(func(s *Setting) (string, error) {
				if s.Team == nil {
					return "", nil
				}
				return *s.Team, nil
			}),
		},
		// A relist (after the slot was lost) then tells only changed rows.
		Revision:     func(s *Setting) string { return s.String() },
		ErrorHandler: func(err error) { say("! %v", err) },
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return err
	}
	changes := make(chan string, 64)
	if _, err := inf.AddHandler(informer.HandlerFuncs[*Setting]{
		AddFunc: func(s *Setting, initial bool) {
			if !initial {
				say("added   %v", s)
				changes <- s.Name
			}
		},
		UpdateFunc: func(_, s *Setting) { say("updated %v", s); changes <- s.Name },
		// A delete carries the key only: the table's primary key.
		DeleteFunc: func(s *Setting, _ bool) { say("deleted %s", s.Name); changes <- s.Name },
	}, informer.HandlerOptions{}); err != nil {
		return err
	}

	// The fan-out server and the probes, on one listener.
	fan, err := fanout.NewServer(inf, fanout.ServerOptions[*Setting]{})
	if err != nil {
		return err
	}
	m, err := manager.New(manager.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := m.AddInformer(inf); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", fan)
	mux.Handle("/healthz", m.Handler())
	mux.Handle("/readyz", m.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := m.Add("http", manager.RunnableFunc(func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = fan.Shutdown(sctx)
			_ = hs.Shutdown(sctx)
		}()
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})); err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	say("serving the mirror at %s/ and probes at %s/readyz", base, base)

	mctx, stopManager := context.WithCancel(ctx)
	defer stopManager()
	done := make(chan error, 1)
	go func() { done <- m.Start(mctx) }()
	select {
	case <-inf.Synced():
	case err := <-done:
		return err
	}
	say("synced %d settings at LSN %s", inf.Len(), inf.Snapshot().Revision())
	if !scripted {
		return <-done
	}
	if err := script(ctx, opts, inf, changes, say); err != nil {
		return err
	}
	if err := probe(ctx, base, say); err != nil {
		return err
	}
	stopManager()
	return <-done
}

// setUp creates the table, its publication and a few settings.
func setUp(ctx context.Context, url, table string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	t := pgx.Identifier{table}.Sanitize()
	_, err = c.Exec(ctx, `CREATE TABLE `+t+` (name text PRIMARY KEY, value text NOT NULL, team text);
CREATE PUBLICATION `+pgx.Identifier{"informer_" + table}.Sanitize()+` FOR TABLE `+t+`;
INSERT INTO `+t+` VALUES ('timeout', '30s', 'billing'), ('retries', '3', 'billing'), ('theme', 'dark', 'web'), ('region', 'eu', NULL)`)
	return err
}

// script changes the table in two transactions, waits until the mirror has them (read
// your writes: the LSN after the commit), and answers a query by index.
func script(ctx context.Context, opts options, inf *informer.Informer[string, *Setting], changes <-chan string, say func(string, ...any)) error {
	c, err := pgx.Connect(ctx, opts.url)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	t := pgx.Identifier{opts.table}.Sanitize()
	if _, err := c.Exec(ctx, "UPDATE "+t+" SET value = '60s' WHERE name = 'timeout'"); err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "BEGIN; INSERT INTO "+t+" VALUES ('currency', 'EUR', 'billing'); DELETE FROM "+t+" WHERE name = 'theme'; COMMIT"); err != nil {
		return err
	}
	var lsn string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := inf.WaitForRevision(wctx, lsn); err != nil {
		return fmt.Errorf("the mirror did not reach %s: %w", lsn, err)
	}
	for range 3 { // the handler's three changes, printed by now or soon
		select {
		case <-changes:
		case <-wctx.Done():
			return wctx.Err()
		}
	}
	byTeam, err := inf.ByIndex("team", opts.team)
	if err != nil {
		return err
	}
	var names []string
	for name := range byTeam {
		names = append(names, name)
	}
	slices.Sort(names)
	say("team %s: %v", opts.team, names)
	return nil
}

// probe asks the mirror's HTTP server for its readiness and its list.
func probe(ctx context.Context, base string, say func(string, ...any)) error {
	get := func(path string) ([]byte, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return b, resp.StatusCode, err
	}
	if _, code, err := get("/readyz"); err != nil {
		return err
	} else {
		say("GET /readyz: %d", code)
	}
	b, code, err := get("/")
	if err != nil {
		return err
	}
	var list struct {
		Items []Setting `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("GET /: %d %s: %w", code, b, err)
	}
	say("GET /: %d, %d settings", code, len(list.Items))
	return nil
}
