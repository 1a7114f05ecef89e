// Package ledger opens the SQLite ledger and performs the one write the
// service does: a transfer between two users (SPEC "POST /v1/transfers").
//
// It keeps two connection pools on the same file: a reader for the read
// model's tailing, and a single writer connection whose transactions start
// with BEGIN IMMEDIATE and commit with synchronous=FULL. One writer
// connection serializes transfers inside the process; BEGIN IMMEDIATE still
// serializes them against any other process writing the same file.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" database/sql driver
)

// ErrNoLedger reports a DB path that does not exist or is not a ledger.
var ErrNoLedger = errors.New("not a payments ledger")

// Ledger is an open ledger file.
type Ledger struct {
	reader *sql.DB
	writer *sql.DB
}

func dsn(path string, params string) string {
	// The driver hands "file:" names to SQLite as URIs; escape the path so
	// that '?' or '#' in a file name cannot be read as URI syntax.
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath()}
	return u.String() + "?" + params
}

// Open opens an existing ledger. It never creates a file: a missing path is
// an error wrapping ErrNoLedger.
func Open(ctx context.Context, path string) (*Ledger, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no file %s (make one with `payments generate`)", ErrNoLedger, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoLedger, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrNoLedger, path)
	}
	reader, err := sql.Open("sqlite3", dsn(path, "mode=rw&_busy_timeout=5000&_fk=1&_query_only=1"))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	reader.SetMaxOpenConns(4)
	writer, err := sql.Open("sqlite3", dsn(path,
		"mode=rw&_journal_mode=WAL&_sync=FULL&_busy_timeout=5000&_fk=1&_txlock=immediate"))
	if err != nil {
		reader.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	l := &Ledger{reader: reader, writer: writer}
	if err := l.check(ctx, path); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Ledger) check(ctx context.Context, path string) error {
	var n int
	err := l.writer.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master
		WHERE type = 'table' AND name IN ('users', 'accounts', 'transactions', 'transfers')`).Scan(&n)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoLedger, path, err)
	}
	if n != 4 {
		return fmt.Errorf("%w: %s lacks the ledger tables", ErrNoLedger, path)
	}
	return nil
}

// Reader is the read-only pool, for the read model.
func (l *Ledger) Reader() *sql.DB { return l.reader }

// Close closes both pools.
func (l *Ledger) Close() error {
	return errors.Join(l.reader.Close(), l.writer.Close())
}
