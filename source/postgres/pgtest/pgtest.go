// Package pgtest starts a throwaway PostgreSQL server for the tests and examples of
// source/postgres: Debian's postgresql package (installed with apt-get when absent and the
// process is root), a cluster in a temporary directory with wal_level=logical, listening
// on a free loopback port, stopped by Stop or, should the process die first, by a
// watchdog that notices; and, for tests of a failover, a streaming standby of such a
// server (StartStandby), promoted onto a new timeline by Promote; and, for tests of a
// point-in-time restore, a base backup of a server (Backup) from which the server starts
// again on the same port (Restore), onto a new timeline. The work is done by server.sh
// beside this file (embedded, and run from a copy in the temporary directory); see its
// header.
package pgtest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

//go:embed server.sh
var serverScript []byte

// script returns the path of a copy of server.sh, written once per content under the
// temporary directory: the source file's own path is not known to a binary built with
// -trimpath or from the module cache, and the watchdog runs the script again after this
// process is gone.
var script = sync.OnceValues(func() (string, error) {
	sum := sha256.Sum256(serverScript)
	dir := filepath.Join(os.TempDir(), "informer-pgtest-"+hex.EncodeToString(sum[:8]))
	path := filepath.Join(dir, "server.sh")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("pgtest: writing server.sh: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "server.sh.*")
	if err != nil {
		return "", fmt.Errorf("pgtest: writing server.sh: %w", err)
	}
	_, err = tmp.Write(serverScript)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o755)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path) // whole or not at all, for processes racing here
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("pgtest: writing server.sh: %w", err)
	}
	return path, nil
})

// Server is a running PostgreSQL server started by Start.
type Server struct {
	// Dir is the cluster's directory: its data and its log.
	Dir string
	// Port is the server's port on 127.0.0.1.
	Port int
	// URL is a connection string for the superuser postgres and the database postgres.
	URL string
}

// Options configures Start. The zero value starts a server with wal_level=logical.
type Options struct {
	// WalLevel is the server's wal_level; empty means logical.
	WalLevel string
}

// Start installs PostgreSQL if needed, starts a server and returns it once it accepts
// connections. The server stops when the calling process exits even if Stop is never
// called. Starting takes a few seconds (a new cluster); installing, on a fresh machine,
// about ten more.
func Start(opts Options) (*Server, error) {
	var env []string
	if opts.WalLevel != "" {
		env = append(env, "PGTEST_WAL_LEVEL="+opts.WalLevel)
	}
	return launch(env, "start")
}

// StartStandby starts a streaming standby of s: a base backup of s (pg_basebackup) in a
// new temporary directory, started on another free port, replaying what s writes. It
// has s's system identifier, settings and data; Promote makes it a primary on a new
// timeline. Stop it like any server (it is stopped too should the process die).
func (s *Server) StartStandby() (*Server, error) {
	return launch([]string{"PGTEST_DIR=" + s.Dir}, "standby")
}

// Promote ends the recovery of a standby started by StartStandby: it accepts writes from
// then on, on a new timeline (another history than its former primary's), as after a
// failover. It returns once the server is promoted.
func (s *Server) Promote() error { return s.run("promote") }

// Backup is a backup of a server, taken by Server.Backup or Server.Copy.
type Backup struct {
	// Dir is the backup's directory, inside the server's: Stop removes it.
	Dir string
}

// Backup takes a base backup of the running server (pg_basebackup with the WAL written
// meanwhile), for Restore. The server goes on as before.
func (s *Server) Backup() (Backup, error) { return s.backup("backup") }

// Copy takes a cold backup of the server, as a disk snapshot does: it stops the server
// (pg_ctl -m fast), copies its data directory (its replication slots too), and starts it
// again. Restored, the copy is the server as it was, on the same timeline.
func (s *Server) Copy() (Backup, error) { return s.backup("copy") }

func (s *Server) backup(how string) (Backup, error) {
	out, err := s.output(how)
	if err != nil {
		return Backup{}, err
	}
	dir, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "export PGTEST_BACKUP=")
	if !ok || dir == "" {
		return Backup{}, fmt.Errorf("pgtest: server.sh %s printed no PGTEST_BACKUP: %q", how, out)
	}
	return Backup{Dir: dir}, nil
}

// Restore does what an operator does to restore the server from a backup: it stops the
// server if it runs (pg_ctl -m immediate), replaces its data with the backup b, and
// starts it on the same port. Whatever was written after the backup is lost; the server
// keeps its system identifier. A base backup (Backup) recovers up to the backup's
// consistent point (recovery_target 'immediate') and promotes: a point-in-time restore,
// onto a new timeline. A copy (Copy) starts as it was, on the same timeline. It returns
// once the server accepts writes.
func (s *Server) Restore(b Backup) error {
	_, err := s.output("restore", b.Dir)
	return err
}

// RestorePaused restores a base backup as Restore does, but stops recovery at the
// backup's consistent point without promoting: the server accepts read-only connections,
// in recovery on the old timeline, behind the writes it lost, until Resume. It returns
// once recovery is paused there.
func (s *Server) RestorePaused(b Backup) error {
	_, err := s.output("restore", b.Dir, "pause")
	return err
}

// Resume ends the recovery RestorePaused paused: the server promotes onto a new timeline.
// It returns once the server accepts writes.
func (s *Server) Resume() error { return s.run("resume") }

// launch runs server.sh with args (start or standby), which starts a server and prints
// where it is.
func launch(env []string, args ...string) (*Server, error) {
	sh, err := script()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(sh, args...)
	cmd.Env = append(append(os.Environ(), "PGTEST_PARENT_PID="+strconv.Itoa(os.Getpid())), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s %s: %v\n%s", sh, strings.Join(args, " "), err, stderr.Bytes())
	}
	s := &Server{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, kv := range strings.Fields(strings.TrimPrefix(sc.Text(), "export ")) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "PGTEST_DIR":
				s.Dir = v
			case "PGTEST_PORT":
				s.Port, _ = strconv.Atoi(v)
			case "PGTEST_URL":
				s.URL = v
			}
		}
	}
	if s.Dir == "" || s.URL == "" {
		return nil, fmt.Errorf("pgtest: %s %s printed no PGTEST_DIR and PGTEST_URL: %q", sh, strings.Join(args, " "), out)
	}
	return s, nil
}

// Restart stops the server with pg_ctl's shutdown mode ("immediate": a crash, replayed
// from the WAL on start; "fast": a clean shutdown) and starts it again on the same port
// and data.
func (s *Server) Restart(mode string) error { return s.run("restart", mode) }

// Stop stops the server and removes its directory. Stopping a server already stopped
// does nothing.
func (s *Server) Stop() error { return s.run("stop") }

func (s *Server) run(args ...string) error {
	_, err := s.output(args...)
	return err
}

// output runs server.sh with args on the server and returns what it printed.
func (s *Server) output(args ...string) ([]byte, error) {
	sh, err := script()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(sh, args...)
	cmd.Env = append(os.Environ(), "PGTEST_DIR="+s.Dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s %s: %v\n%s%s", sh, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out, nil
}

// Main runs a test binary's tests against a server started for it, and stops the server
// afterwards; call it from TestMain and pass its result to os.Exit. set receives the
// server before the tests run. When the server cannot be started, Main fails the run if
// the environment variable CI is "true" and otherwise runs the tests with set given nil,
// after saying why on stderr, so that tests which need the server can skip.
func Main(run func() int, set func(*Server)) int {
	s, err := Start(Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: no PostgreSQL server for the tests: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "pgtest: no PostgreSQL server, tests that need one skip: %v\n", err)
		set(nil)
		return run()
	}
	set(s)
	code := run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
