// Command payments-go is the legacy payments service of the Scalpel example:
// balance, stats, transactions, transfers and healthz over one SQLite ledger,
// as specified in ../SPEC.md.
//
//	payments-go --db FILE --port P [--host H]
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
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"scalpel.example/payments-go/internal/api"
	"scalpel.example/payments-go/internal/ledger"
	"scalpel.example/payments-go/internal/readmodel"
)

// shutdownGrace bounds how long in-flight requests may take after a signal.
const shutdownGrace = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	db   string
	host string
	port int
}

// usageError is bad command-line input: one line on stderr, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func parseFlags(args []string, stdout io.Writer) (config, error) {
	fs := flag.NewFlagSet("payments-go", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c config
	fs.StringVar(&c.db, "db", "", "the ledger SQLite `file` (must exist)")
	fs.StringVar(&c.host, "host", "127.0.0.1", "the `address` to bind")
	fs.IntVar(&c.port, "port", -1, "the TCP `port` to listen on (0: any free port)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: payments-go --db FILE --port P [--host H]")
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
	case c.port < 0 || c.port > 65535:
		return c, usageError{"--port P is required (0 to 65535)"}
	}
	return c, nil
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

	l, err := ledger.Open(ctx, cfg.db)
	if err != nil {
		fmt.Fprintf(stderr, "payments-go: %v\n", err)
		return 2
	}
	defer l.Close()

	model, err := readmodel.Load(ctx, l.Reader(), log)
	if err != nil {
		fmt.Fprintf(stderr, "payments-go: loading %s: %v\n", cfg.db, err)
		return 2
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.host, strconv.Itoa(cfg.port)))
	if err != nil {
		fmt.Fprintf(stderr, "payments-go: %v\n", err)
		return 1
	}
	srv := &http.Server{
		Handler:           api.New(model, l, log).Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	tailCtx, stopTail := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { model.Run(tailCtx) })

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "payments-go listening on http://%s (seq %d)\n", ln.Addr(), model.Seq())

	code := 0
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
