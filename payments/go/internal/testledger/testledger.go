// Package testledger builds small real ledger files for tests: the schema is
// read from payments/schema.sql at test time, and every helper keeps the
// SPEC invariant (accounts = sums over transactions).
package testledger

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver
)

// SchemaPath is payments/schema.sql, found from this source file.
func SchemaPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "schema.sql")
}

// Builder writes a fresh ledger file.
type Builder struct {
	Path string
	DB   *sql.DB
	t    testing.TB
}

// New creates an empty ledger in a temporary directory of t.
func New(t testing.TB) *Builder {
	t.Helper()
	schema, err := os.ReadFile(SchemaPath())
	if err != nil {
		t.Fatalf("read schema: %v", err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite3", "file:"+path+"?_fk=1&_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(string(schema)); err != nil {
		t.Fatalf("apply schema: %v", err)
	}
	return &Builder{Path: path, DB: db, t: t}
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
// the same SQLite transaction. It returns the row's seq.
func (b *Builder) Txn(ts int64, user, currency string, amount int64, status, category, counterparty string) int64 {
	b.t.Helper()
	tx, err := b.DB.Begin()
	if err != nil {
		b.t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	res, err := tx.Exec(`INSERT INTO transactions (ts, user_id, currency, amount, status, category, counterparty)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, ts, user, currency, amount, status, category, counterparty)
	if err != nil {
		b.t.Fatalf("insert transaction: %v", err)
	}
	column := "settled"
	if status == "pending" {
		column = "pending"
	}
	upd, err := tx.Exec(`UPDATE accounts SET `+column+` = `+column+` + ? WHERE user_id = ? AND currency = ?`, amount, user, currency)
	if err != nil {
		b.t.Fatalf("update account: %v", err)
	}
	if n, _ := upd.RowsAffected(); n != 1 {
		b.t.Fatalf("no account %s/%s", user, currency)
	}
	if err := tx.Commit(); err != nil {
		b.t.Fatal(err)
	}
	seq, _ := res.LastInsertId()
	return seq
}

func (b *Builder) exec(query string, args ...any) {
	b.t.Helper()
	if _, err := b.DB.Exec(query, args...); err != nil {
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
