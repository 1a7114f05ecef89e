package ledger

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// ApplicationName is the application_name the service's connections carry
// (unless the URL sets one), so an operator — or the kill test — can find its
// backends in pg_stat_activity.
const ApplicationName = "payments-go"

var postgresDialect = dialect{
	kind:   "postgres",
	dollar: true,
	// A retry of a key waits here for the first attempt to commit or roll
	// back; it then reads the stored answer (READ COMMITTED: each statement
	// sees the latest commits). A hash collision only serializes two keys.
	lockKey:   `SELECT pg_advisory_xact_lock(hashtextextended(?, 0))`,
	forUpdate: ` FOR UPDATE`,
	// Self-exclusive, and blocks every plain INSERT too: seq is taken and
	// committed in order, so "seq > last" tailing never skips a row.
	lockAppend: `LOCK TABLE transactions IN SHARE ROW EXCLUSIVE MODE`,
	snapshot:   &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true},
	tables: `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_name IN ('users', 'accounts', 'transactions', 'transfers')`,
}

// openPostgres connects to a database that holds the ledger tables.
func openPostgres(ctx context.Context, url string, opt Options) (Store, error) {
	open := func(conns int) (*sql.DB, error) {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			return nil, fmt.Errorf("%w: --db: %v", ErrNoLedger, err)
		}
		if _, ok := cfg.RuntimeParams["application_name"]; !ok {
			cfg.RuntimeParams["application_name"] = ApplicationName
		}
		if cfg.ConnectTimeout == 0 {
			cfg.ConnectTimeout = 5 * time.Second
		}
		db := stdlib.OpenDB(*cfg)
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		return db, nil
	}
	reader, err := open(readerPool)
	if err != nil {
		return nil, err
	}
	writer, err := open(opt.WriterPool)
	if err != nil {
		reader.Close()
		return nil, err
	}
	s := &sqlStore{d: postgresDialect, reader: reader, writer: writer}
	if err := s.check(ctx, Redact(url)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Redact drops a password from a PostgreSQL URL before it is printed.
func Redact(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Password == "" {
		return url
	}
	return fmt.Sprintf("postgres://%s@%s/%s", cfg.User, cfg.Host, cfg.Database)
}
