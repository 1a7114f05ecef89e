// Command payments-go is the legacy payments service of the Scalpel example:
// balance, stats, transactions, transfers, healthz and metrics over one
// ledger in SQLite or PostgreSQL, as specified in ../SPEC.md.
//
//	payments-go --db sqlite:FILE|FILE|postgres://URL --port P [--host H] [--db-pool N] [--engine go|rust] [--pprof ADDR]
//
// --engine rust answers GET balance and stats with the Rust read model linked
// into this binary (package rustcore, cgo): tier 3 of the payments ladder.
// Everything else — transfers, transaction pages, idempotency, the HTTP layer
// and the ledger writes — stays Go with either engine.
//
// --pprof serves net/http/pprof on a second, loopback-only listener (off by
// default), so a CPU profile can be taken over exactly the window of a load
// run: curl 'http://ADDR/debug/pprof/profile?seconds=20' > cpu.pprof.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"scalpel.example/payments-go/internal/api"
	"scalpel.example/payments-go/internal/headcheck"
	"scalpel.example/payments-go/internal/ledger"
	"scalpel.example/payments-go/internal/readmodel"
	"scalpel.example/payments-go/internal/rustcore"
)

const (
	// shutdownGrace bounds how long in-flight requests may take after a signal.
	shutdownGrace = 10 * time.Second
	// headTimeout bounds how long a request head may take to arrive.
	headTimeout = 5 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	db     string
	host   string
	port   int
	pprof  string // host:port of the profiling listener; "" = off
	pool   int    // PostgreSQL writer pool size
	engine string // "go" or "rust": who answers GET balance and stats
}

// usageError is bad command-line input: one line on stderr, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func parseFlags(args []string, stdout io.Writer) (config, error) {
	fs := flag.NewFlagSet("payments-go", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config
	fs.StringVar(&c.db, "db", "", "the `ledger`: sqlite:FILE or FILE (must exist), or a postgres:// URL")
	fs.IntVar(&c.pool, "db-pool", ledger.DefaultWriterPool, "PostgreSQL writer pool `size` (SQLite: always one writer)")
	fs.StringVar(&c.host, "host", "127.0.0.1", "the `address` to bind")
	fs.IntVar(&c.port, "port", -1, "the TCP `port` to listen on (0: any free port)")
	fs.StringVar(&c.pprof, "pprof", "", "serve net/http/pprof on this loopback `host:port` (off by default)")
	fs.StringVar(&c.engine, "engine", "go", "who answers GET balance and stats: `go` (this code) or rust (the Rust core, in-process)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: payments-go --db sqlite:FILE|FILE|postgres://URL --port P [--host H] [--db-pool N] [--engine go|rust] [--pprof ADDR]")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return c, err
		}
		return c, usageError{err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return c, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	case c.db == "":
		return c, usageError{"--db FILE is required"}
	case c.pool < 1 || c.pool > 1000:
		return c, usageError{"--db-pool N: want 1 to 1000"}
	case c.engine != "go" && c.engine != "rust":
		return c, usageError{fmt.Sprintf("--engine %q: want go or rust", c.engine)}
	case c.port < 0 || c.port > 65535:
		return c, usageError{"--port P is required (0 to 65535)"}
	case c.pprof != "" && !isLoopback(c.pprof):
		return c, usageError{fmt.Sprintf("--pprof %q: want a loopback host:port such as 127.0.0.1:6060", c.pprof)}
	}
	return c, nil
}

// isLoopback reports whether addr is host:port with a loopback host: the
// profiler exposes the process's memory and command line, so it is never
// offered beyond the machine.
func isLoopback(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pprofServer serves the profiling endpoints on their own mux, never on the
// API's listener. Its write time-out leaves room for long CPU profiles
// (pprof.Profile refuses a ?seconds= longer than WriteTimeout).
func pprofServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      10 * time.Minute,
		IdleTimeout:       90 * time.Second,
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "payments-go: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var engine *rustcore.Engine
	if cfg.engine == "rust" {
		if engine, err = rustcore.New(); err != nil {
			fmt.Fprintf(stderr, "payments-go: %v\n", err)
			return 1
		}
	}
	l, model, code := load(ctx, cfg, log, stderr, engine)
	if l == nil {
		return code // an abandoned load may still feed the engine: not freed
	}
	defer l.Close()
	handler := api.New(model, l, log)
	if engine != nil {
		defer engine.Close() // runs after the tail stopped feeding it (below)
		handler.UseEngine(engine)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port)))
	if err != nil {
		fmt.Fprintf(stderr, "payments-go: %v\n", err)
		return 1
	}
	var pln net.Listener
	if cfg.pprof != "" {
		if pln, err = net.Listen("tcp", cfg.pprof); err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "payments-go: --pprof: %v\n", err)
			return 1
		}
	}
	srv := &http.Server{
		Handler:           handler.Handler(),
		ReadHeaderTimeout: headTimeout,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		// headcheck refuses heads past 64 KiB first, with the SPEC's JSON.
		MaxHeaderBytes: 64 << 10,
		ConnState:      headcheck.ConnState,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	tailCtx, stopTail := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { model.Run(tailCtx) })

	serveErr := make(chan error, 1)
	// Every request head is checked before net/http parses it (SPEC "Request
	// heads"), so malformed ones get the same JSON answers as from the Rust service.
	go func() { serveErr <- srv.Serve(headcheck.Listener(ln, headTimeout)) }()
	engineNote := ""
	if engine != nil {
		engineNote = ", engine rust"
	}
	fmt.Fprintf(stdout, "payments-go listening on http://%s (seq %d%s)\n", ln.Addr(), model.Seq(), engineNote)
	if pln != nil {
		psrv := pprofServer()
		go func() { _ = psrv.Serve(pln) }()
		defer psrv.Close()
		fmt.Fprintf(stdout, "pprof on http://%s/debug/pprof/\n", pln.Addr())
	}

	code = 0
	select {
	case err := <-serveErr:
		log.Error("server stopped", "err", err)
		code = 1
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		if err := srv.Shutdown(shutdownCtx); err != nil {
			log.Warn("graceful shutdown incomplete", "err", err)
		}
		cancel()
	}
	stopTail()
	wg.Wait()
	return code
}

// load opens the ledger and loads the read model. Loading a big ledger takes
// seconds, and a locked file waits out SQLite's busy timeout: a SIGTERM or
// SIGINT meanwhile is a requested stop, so it exits 0 at once (a nil ledger
// and code 0) instead of waiting for the query or reporting the interrupted
// one as bad input (exit 2). The abandoned load only ever read. With
// an engine (--engine rust), it is loaded beside the model, from the same rows.
func load(ctx context.Context, cfg config, log *slog.Logger, stderr io.Writer, engine *rustcore.Engine) (ledger.Store, *readmodel.Model, int) {
	db := cfg.db
	type result struct {
		l     ledger.Store
		model *readmodel.Model
		err   error
	}
	var mirror readmodel.Mirror // nil, not a nil *Engine
	if engine != nil {
		mirror = engine
	}
	done := make(chan result, 1)
	go func() {
		l, err := ledger.Open(ctx, db, ledger.Options{WriterPool: cfg.pool})
		if err != nil {
			done <- result{err: err}
			return
		}
		model, err := readmodel.Load(ctx, l, log, mirror)
		if err != nil {
			l.Close()
			done <- result{err: fmt.Errorf("loading %s: %w", ledger.Redact(db), err)}
			return
		}
		done <- result{l: l, model: model}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return r.l, r.model, 0
		}
		if ctx.Err() == nil {
			fmt.Fprintf(stderr, "payments-go: %v\n", r.err)
			return nil, nil, 2
		}
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "payments-go: stopped by a signal while loading the ledger")
	return nil, nil, 0
}
