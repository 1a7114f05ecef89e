package api

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"scalpel.example/payments-go/internal/ledger"
	"scalpel.example/payments-go/internal/pgtest"
	"scalpel.example/payments-go/internal/readmodel"
	"scalpel.example/payments-go/internal/rustcore"
	"scalpel.example/payments-go/internal/testledger"
)

// env is a real service over a real ledger (an SQLite file or a PostgreSQL
// database), served by httptest.
type env struct {
	t      *testing.T
	b      *testledger.Builder
	model  *readmodel.Model
	ledger ledger.Store
	srv    *httptest.Server
	rust   *rustcore.Engine // nil on the Go engine
}

// engines are the --engine values: who answers GET balance and stats.
var engines = []string{"go", "rust"}

// TestMain stops the package's PostgreSQL cluster, if a test started one.
func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	os.Exit(code)
}

// onEachStore runs test once per store, as subtests named after the store.
func onEachStore(t *testing.T, test func(t *testing.T, kind string)) {
	for _, kind := range testledger.Stores {
		t.Run(kind, func(t *testing.T) { test(t, kind) })
	}
}

// onEachEngine runs test once per engine, as subtests named after it.
func onEachEngine(t *testing.T, test func(t *testing.T, engine string)) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) { test(t, engine) })
	}
}

// start serves the ledger built by b with the Go engine.
func start(t *testing.T, b *testledger.Builder) *env {
	t.Helper()
	return startEngine(t, b, "go", nil)
}

// startEngine opens the ledger built by b, loads the read model (and, for
// engine "rust", the Rust engine beside it, as main does), starts the tailer
// and serves the API on a loopback port. wrap, if not nil, chooses what
// answers balance and stats given the Rust engine.
func startEngine(t *testing.T, b *testledger.Builder, engine string, wrap func(*rustcore.Engine) ReadEngine) *env {
	t.Helper()
	ctx := context.Background()
	var rust *rustcore.Engine
	var mirror readmodel.Mirror
	if engine == "rust" {
		var err error
		if rust, err = rustcore.New(); err != nil {
			t.Fatal(err)
		}
		mirror = rust
	}
	l, err := ledger.Open(ctx, b.DSN, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m, err := readmodel.Load(ctx, l, log, mirror)
	if err != nil {
		t.Fatal(err)
	}
	tailCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.Run(tailCtx); close(done) }()
	api := New(m, l, log)
	switch {
	case wrap != nil:
		api.UseEngine(wrap(rust))
	case rust != nil:
		api.UseEngine(rust)
	}
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(func() {
		srv.Close()
		stop()
		<-done
		if rust != nil {
			rust.Close()
		}
		l.Close()
	})
	return &env{t: t, b: b, model: m, ledger: l, srv: srv, rust: rust}
}

type response struct {
	status int
	ctype  string
	body   string
}

var client = &http.Client{Timeout: 30 * time.Second}

func (e *env) do(method, path string, header map[string]string, body string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

func (e *env) get(path string) response {
	e.t.Helper()
	return e.do(http.MethodGet, path, nil, "")
}

// expect checks status, JSON content type and the exact body bytes.
func expect(t *testing.T, what string, got response, status int, body string) {
	t.Helper()
	if got.status != status || got.body != body || got.ctype != "application/json" {
		t.Errorf("%s\n got: %d %s %s\nwant: %d application/json %s", what, got.status, got.ctype, got.body, status, body)
	}
}

// waitSeq polls until the read model (and the Rust engine, published after
// it) has applied seq (deadline, not a sleep).
func (e *env) waitSeq(seq int64) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.model.Seq() < seq || (e.rust != nil && e.rust.Seq() < seq) {
		if time.Now().After(deadline) {
			e.t.Fatalf("read model stuck at seq %d, want %d", e.model.Seq(), seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
