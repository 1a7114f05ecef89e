// Package pgtest gives a test binary one real PostgreSQL cluster (Debian's
// package, started by scripts/lib/pg.sh: initdb as the postgres user, a unix
// socket only) and a fresh database per test on it.
//
// The cluster starts with the first test that asks for a database and is
// stopped by Stop (call it from TestMain after m.Run); pg.sh's watcher stops
// it too if the test binary dies first (a panic, a time-out, SIGKILL), so no
// server outlives the tests. One cluster per package keeps the suite lean:
// initdb and start take about a second, a new database a few milliseconds.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

var (
	once    sync.Once
	dir     string
	baseURL string
	started error
	dbs     atomic.Int64
)

// script is scripts/lib/pg.sh, found from this source file.
func script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "scripts", "lib", "pg.sh")
}

func start() {
	out, err := exec.Command("bash", script(), "start", "--watch", fmt.Sprint(os.Getpid())).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		started = fmt.Errorf("starting PostgreSQL (scripts/lib/pg.sh; ./run setup installs it): %v %s", err, stderr)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		started = fmt.Errorf("pg.sh start printed %q, want a directory and a URL", out)
		return
	}
	dir, baseURL = lines[0], lines[1]
}

// URL returns the URL of a new, empty database on the package's cluster,
// starting the cluster on first use. A cluster that cannot start fails the
// test: no PostgreSQL is never a pass.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(start)
	if started != nil {
		t.Fatal(started)
	}
	name := fmt.Sprintf("t%d", dbs.Add(1))
	admin, err := sql.Open("pgx", baseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return strings.Replace(baseURL, "/postgres?", "/"+name+"?", 1)
}

// Admin opens the cluster's postgres database (for pg_terminate_backend and
// the like). The caller closes it.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	once.Do(start)
	if started != nil {
		t.Fatal(started)
	}
	db, err := sql.Open("pgx", baseURL)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Stop stops the cluster if one was started. Call it from TestMain.
func Stop() {
	if dir == "" {
		return
	}
	_ = exec.Command("bash", script(), "stop", dir).Run()
	dir = ""
}
