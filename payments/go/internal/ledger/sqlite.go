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

var sqliteDialect = dialect{
	kind: "sqlite",
	// BEGIN IMMEDIATE (_txlock=immediate) on the one writer connection already
	// serializes whole transfers: no further locks.
	tables: `SELECT count(*) FROM sqlite_master
		WHERE type = 'table' AND name IN ('users', 'accounts', 'transactions', 'transfers')`,
}

func sqliteDSN(path string, params string) string {
	// The driver hands "file:" names to SQLite as URIs; escape the path so
	// that '?' or '#' in a file name cannot be read as URI syntax.
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath()}
	return u.String() + "?" + params
}

// openSQLite opens an existing ledger file. A missing path is an error
// wrapping ErrNoLedger, never a new file.
func openSQLite(ctx context.Context, path string) (Store, error) {
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
	reader, err := sql.Open("sqlite3", sqliteDSN(path, "mode=rw&_busy_timeout=5000&_fk=1&_query_only=1"))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	reader.SetMaxOpenConns(readerPool)
	writer, err := sql.Open("sqlite3", sqliteDSN(path,
		"mode=rw&_journal_mode=WAL&_sync=FULL&_busy_timeout=5000&_fk=1&_txlock=immediate"))
	if err != nil {
		reader.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	s := &sqlStore{d: sqliteDialect, reader: reader, writer: writer}
	if err := s.check(ctx, path); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}
