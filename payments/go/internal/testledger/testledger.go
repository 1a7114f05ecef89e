// Package testledger builds small real ledgers for tests — an SQLite file,
// or a fresh database on the package's PostgreSQL cluster (pgtest): the
// schema is read from payments/schema.sql at test time, and every helper
// keeps the SPEC invariant (accounts = sums over transactions).
package testledger

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver

	"scalpel.example/payments-go/internal/ledger"
	"scalpel.example/payments-go/internal/pgtest"
)

// Stores are the kinds New takes, for tests that run on both.
var Stores = []string{"sqlite", "postgres"}

// SchemaPath is payments/schema.sql, found from this source file.
func SchemaPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "schema.sql")
}

// Builder writes a fresh ledger.
type Builder struct {
	// Kind is "sqlite" or "postgres".
	Kind string
	// Path is the SQLite file ("" on PostgreSQL).
	Path string
	// DSN is what ledger.Open and the service's --db take.
	DSN string
	DB  *sql.DB
	t   testing.TB
}

// New creates an empty SQLite ledger in a temporary directory of t.
func New(t testing.TB) *Builder {
	return NewStore(t, "sqlite")
}

// NewStore creates an empty ledger of kind "sqlite" (a file in a temporary
// directory of t) or "postgres" (a new database on the package's cluster).
func NewStore(t testing.TB, kind string) *Builder {
	t.Helper()
	text, err := os.ReadFile(SchemaPath())
	if err != nil {
		t.Fatalf("read schema: %v", err)
	}
	b := &Builder{Kind: kind, t: t}
	switch kind {
	case "sqlite":
		b.Path = filepath.Join(t.TempDir(), "ledger.db")
		b.DSN = b.Path
		b.DB, err = sql.Open("sqlite3", "file:"+b.Path+"?_fk=1&_busy_timeout=5000")
		if err == nil {
			b.DB.SetMaxOpenConns(1)
		}
	case "postgres":
		b.DSN = pgtest.URL(t)
		b.DB, err = sql.Open("pgx", b.DSN)
	default:
		t.Fatalf("unknown store %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.DB.Close() })
	if _, err := b.DB.Exec(ledger.Schema(string(text), kind)); err != nil {
		t.Fatalf("apply schema: %v", err)
	}
	return b
}

// Q rewrites a query's ? placeholders for the builder's store.
func (b *Builder) Q(query string) string {
	if b.Kind != "postgres" {
		return query
	}
	return ledger.Dollar(query)
}

// QueryRow runs a one-row query written with ? placeholders.
func (b *Builder) QueryRow(query string, args ...any) *sql.Row {
	return b.DB.QueryRow(b.Q(query), args...)
}

// User adds a user with accounts in the given currencies (zero balances).
func (b *Builder) User(id string, currencies ...string) {
	b.t.Helper()
	b.exec(`INSERT INTO users (id, created_at) VALUES (?, 1700000000)`, id)
	for _, c := range currencies {
		b.exec(`INSERT INTO accounts (user_id, currency, settled, pending) VALUES (?, ?, 0, 0)`, id, c)
	}
}

// Txn appends a transaction and updates the account (which must exist) in
// the same database transaction. It returns the row's seq.
func (b *Builder) Txn(ts int64, user, currency string, amount int64, status, category, counterparty string) int64 {
	b.t.Helper()
	return b.Rows([]Row{{ts, user, currency, amount, status, category, counterparty}})
}

// Row is one transaction for Rows.
type Row struct {
	TS           int64
	User         string
	Currency     string
	Amount       int64
	Status       string
	Category     string
	Counterparty string
}

// Rows appends transactions in order, updating their accounts (which must
// exist), all in one database transaction: thousands of rows in a moment. It
// returns the last row's seq.
func (b *Builder) Rows(rows []Row) (seq int64) {
	b.t.Helper()
	tx, err := b.DB.Begin()
	if err != nil {
		b.t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	for _, r := range rows {
		err = tx.QueryRow(b.Q(`INSERT INTO transactions (ts, user_id, currency, amount, status, category, counterparty)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING seq`), r.TS, r.User, r.Currency, r.Amount, r.Status, r.Category, r.Counterparty).Scan(&seq)
		if err != nil {
			b.t.Fatalf("insert transaction: %v", err)
		}
		column := "settled"
		if r.Status == "pending" {
			column = "pending"
		}
		upd, err := tx.Exec(b.Q(`UPDATE accounts SET `+column+` = `+column+` + ? WHERE user_id = ? AND currency = ?`), r.Amount, r.User, r.Currency)
		if err != nil {
			b.t.Fatalf("update account: %v", err)
		}
		if n, _ := upd.RowsAffected(); n != 1 {
			b.t.Fatalf("no account %s/%s", r.User, r.Currency)
		}
	}
	if err := tx.Commit(); err != nil {
		b.t.Fatal(err)
	}
	return seq
}

func (b *Builder) exec(query string, args ...any) {
	b.t.Helper()
	if _, err := b.DB.Exec(b.Q(query), args...); err != nil {
		b.t.Fatalf("%s: %v", query, err)
	}
}

// CheckInvariant returns an error describing every account whose settled or
// pending differs from the sums over the transactions table, or whose
// transactions have no account.
func CheckInvariant(db *sql.DB) error {
	rows, err := db.Query(`
		WITH sums AS (
			SELECT user_id, currency,
				COALESCE(SUM(CASE WHEN status = 'settled' THEN amount END), 0) AS s,
				COALESCE(SUM(CASE WHEN status = 'pending' THEN amount END), 0) AS p
			FROM transactions GROUP BY user_id, currency)
		SELECT a.user_id, a.currency, a.settled, a.pending, COALESCE(s.s, 0), COALESCE(s.p, 0)
		FROM accounts a LEFT JOIN sums s USING (user_id, currency)
		WHERE a.settled != COALESCE(s.s, 0) OR a.pending != COALESCE(s.p, 0)
		UNION ALL
		SELECT s.user_id, s.currency, NULL, NULL, s.s, s.p
		FROM sums s LEFT JOIN accounts a USING (user_id, currency) WHERE a.user_id IS NULL`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var user, currency string
		var settled, pending sql.NullInt64
		var sumS, sumP int64
		if err := rows.Scan(&user, &currency, &settled, &pending, &sumS, &sumP); err != nil {
			return err
		}
		bad = append(bad, fmt.Sprintf("%s/%s: accounts (%v, %v) vs sums (%d, %d)", user, currency, settled, pending, sumS, sumP))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("accounts invariant broken: %v", bad)
	}
	return nil
}
