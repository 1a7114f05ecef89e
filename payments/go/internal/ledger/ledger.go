// Package ledger is the service's storage seam: the Store interface, and its
// SQLite and PostgreSQL implementations (SPEC "The ledger").
//
// A Store gives the read model one consistent read of the whole ledger at
// start (Snapshot) and the tail after it (Reader), performs the one write the
// service does — a transfer between two users (SPEC "POST /v1/transfers") —
// and reports its connection pools for /metrics. Another engine (say a cgo
// library) is another implementation of Store; nothing above this package
// knows SQL.
//
// Both implementations share one transfer transaction (transfer.go); what
// differs between the stores is a small dialect:
//
//   - SQLite: a reader pool and a single writer connection whose transactions
//     start with BEGIN IMMEDIATE and commit with synchronous=FULL. One writer
//     serializes transfers inside the process; BEGIN IMMEDIATE still serializes
//     them against any other process writing the file.
//   - PostgreSQL (pgx's database/sql adapter): a reader pool and a writer pool
//     of --db-pool connections, READ COMMITTED, with three locks taken in one
//     global order (so they never deadlock): a transaction-level advisory lock
//     on the idempotency key (a retry waits for the first attempt, then sees
//     its stored answer), both accounts FOR UPDATE in user-id order (the funds
//     check and the update see the same settled balance: no overdraw), and,
//     just before appending, the transactions table in SHARE ROW EXCLUSIVE
//     mode, so seq values are taken and committed in order: a tailer reading
//     "seq > last" never skips a row committed late with a smaller seq.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNoLedger reports a --db that does not exist or is not a ledger.
var ErrNoLedger = errors.New("not a payments ledger")

// Row is one row of the transactions table as the read model needs it.
type Row struct {
	Seq          int64
	TS           int64
	UserID       string
	Currency     string
	Amount       int64
	Status       string // "settled" or "pending"
	Category     string
	Counterparty string
}

// Reader reads the ledger.
type Reader interface {
	// Users calls fn with every user id.
	Users(ctx context.Context, fn func(id string)) error
	// Accounts calls fn with every (user, currency) account.
	Accounts(ctx context.Context, fn func(userID, currency string)) error
	// Transactions returns up to limit rows with seq > after, in seq order.
	Transactions(ctx context.Context, after int64, limit int) ([]Row, error)
}

// PoolStats is one connection pool's state, for /metrics.
type PoolStats struct {
	Name         string // "reader" or "writer"
	MaxOpen      int
	Open         int
	InUse        int
	Idle         int
	WaitCount    int64
	WaitDuration time.Duration
}

// Store is an open ledger.
type Store interface {
	// Kind names the store: "sqlite" or "postgres".
	Kind() string
	// Snapshot calls fn with a Reader over one consistent, read-only view.
	Snapshot(ctx context.Context, fn func(Reader) error) error
	// Reader reads the latest committed rows (the tail).
	Reader() Reader
	// Transfer applies req once per idempotency key (transfer.go).
	Transfer(ctx context.Context, key string, req TransferRequest) (Outcome, error)
	// Pools reports the connection pools.
	Pools() []PoolStats
	Close() error
}

// Options are the knobs of Open.
type Options struct {
	// WriterPool is the PostgreSQL writer pool's size (SQLite always has one
	// writer connection). 0 means DefaultWriterPool.
	WriterPool int
}

// DefaultWriterPool is the PostgreSQL writer pool's default size: transfers
// wait on row locks, so a few more connections than cores keep it busy.
const DefaultWriterPool = 8

// readerPool is the reader pool's size: the load at start and the tailer.
const readerPool = 2

// Open opens an existing ledger: "sqlite:PATH" or a bare PATH (a file that
// must exist), or a "postgres://" / "postgresql://" URL of a database holding
// the ledger tables. It never creates anything.
func Open(ctx context.Context, db string, opt Options) (Store, error) {
	if opt.WriterPool <= 0 {
		opt.WriterPool = DefaultWriterPool
	}
	if IsPostgresURL(db) {
		return openPostgres(ctx, db, opt)
	}
	return openSQLite(ctx, strings.TrimPrefix(db, "sqlite:"))
}

// IsPostgresURL reports whether db names a PostgreSQL database.
func IsPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// Schema returns payments/schema.sql's text for one store ("sqlite" or
// "postgres"): lines ending in "-- <other store> only" are dropped (the
// file's header says why there are any).
func Schema(text, kind string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasSuffix(trimmed, " only") && strings.Contains(trimmed, "-- ") {
			marker := trimmed[strings.LastIndex(trimmed, "-- ")+3:]
			if marker != kind+" only" && (marker == "sqlite only" || marker == "postgres only") {
				continue
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// dialect is what differs between the stores' SQL (see the package doc).
type dialect struct {
	kind string
	// dollar: placeholders are $1, $2 … (PostgreSQL), not ? (SQLite).
	dollar bool
	// lockKey runs first in a transfer with the idempotency key ("": none).
	lockKey string
	// forUpdate ends the account reads of a transfer.
	forUpdate string
	// lockAppend runs before the ledger clock is read and the legs appended.
	lockAppend string
	// snapshot begins the read-only transaction of Snapshot.
	snapshot *sql.TxOptions
	// tables counts the ledger tables present.
	tables string
}

// bind rewrites ? placeholders for the dialect.
func (d dialect) bind(query string) string {
	if !d.dollar {
		return query
	}
	return Dollar(query)
}

// Dollar rewrites a query's ? placeholders as PostgreSQL's $1, $2 … (no query
// here has a ? inside a string literal).
func Dollar(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqlStore is a Store over database/sql: a reader pool and a writer pool.
type sqlStore struct {
	d      dialect
	reader *sql.DB
	writer *sql.DB
}

func (s *sqlStore) Kind() string { return s.d.kind }

func (s *sqlStore) Reader() Reader { return sqlReader{q: s.reader, d: s.d} }

func (s *sqlStore) Snapshot(ctx context.Context, fn func(Reader) error) error {
	tx, err := s.reader.BeginTx(ctx, s.d.snapshot)
	if err != nil {
		return fmt.Errorf("begin read: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	return fn(sqlReader{q: tx, d: s.d})
}

func (s *sqlStore) Pools() []PoolStats {
	stats := func(name string, db *sql.DB) PoolStats {
		st := db.Stats()
		return PoolStats{Name: name, MaxOpen: st.MaxOpenConnections, Open: st.OpenConnections,
			InUse: st.InUse, Idle: st.Idle, WaitCount: st.WaitCount, WaitDuration: st.WaitDuration}
	}
	return []PoolStats{stats("reader", s.reader), stats("writer", s.writer)}
}

func (s *sqlStore) Close() error {
	return errors.Join(s.reader.Close(), s.writer.Close())
}

// check verifies the four ledger tables exist.
func (s *sqlStore) check(ctx context.Context, name string) error {
	var n int
	if err := s.writer.QueryRowContext(ctx, s.d.tables).Scan(&n); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoLedger, name, err)
	}
	if n != 4 {
		return fmt.Errorf("%w: %s lacks the ledger tables", ErrNoLedger, name)
	}
	return nil
}

// querier is what reading needs from a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type sqlReader struct {
	q querier
	d dialect
}

func (r sqlReader) strings(ctx context.Context, query string, fn func(a, b string), two bool) error {
	rows, err := r.q.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var a, b string
		dest := []any{&a}
		if two {
			dest = append(dest, &b)
		}
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		fn(a, b)
	}
	return rows.Err()
}

func (r sqlReader) Users(ctx context.Context, fn func(id string)) error {
	err := r.strings(ctx, `SELECT id FROM users`, func(id, _ string) { fn(id) }, false)
	if err != nil {
		return fmt.Errorf("load users: %w", err)
	}
	return nil
}

func (r sqlReader) Accounts(ctx context.Context, fn func(userID, currency string)) error {
	if err := r.strings(ctx, `SELECT user_id, currency FROM accounts`, fn, true); err != nil {
		return fmt.Errorf("load accounts: %w", err)
	}
	return nil
}

func (r sqlReader) Transactions(ctx context.Context, after int64, limit int) ([]Row, error) {
	rows, err := r.q.QueryContext(ctx, r.d.bind(`SELECT seq, ts, user_id, currency, amount, status, category, counterparty
		FROM transactions WHERE seq > ? ORDER BY seq LIMIT ?`), after, limit)
	if err != nil {
		return nil, fmt.Errorf("tail transactions: %w", err)
	}
	defer rows.Close()
	var batch []Row
	for rows.Next() {
		var x Row
		if err := rows.Scan(&x.Seq, &x.TS, &x.UserID, &x.Currency, &x.Amount, &x.Status, &x.Category, &x.Counterparty); err != nil {
			return nil, fmt.Errorf("tail transactions: %w", err)
		}
		batch = append(batch, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tail transactions: %w", err)
	}
	return batch, nil
}
