package enginebench

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver, to pick the users

	"scalpel.example/payments-go/internal/ledger"
	"scalpel.example/payments-go/internal/readmodel"
	"scalpel.example/payments-go/internal/rustcore"
)

// fixture is the ledger loaded once into both engines, and two users: the one
// with the median number of transactions and the one with the most.
type fixture struct {
	model        *readmodel.Model
	rust         *rustcore.Engine
	typical, top string
}

var (
	once  sync.Once
	fx    fixture
	fxErr error
)

func load(b *testing.B) fixture {
	b.Helper()
	once.Do(func() {
		db := os.Getenv("PAYMENTS_BENCH_DB")
		if db == "" {
			fxErr = errNoLedger
			return
		}
		fx.rust, fxErr = rustcore.New()
		if fxErr != nil {
			return
		}
		ctx := context.Background()
		var store ledger.Store
		if store, fxErr = ledger.Open(ctx, db, ledger.Options{}); fxErr != nil {
			return
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		if fx.model, fxErr = readmodel.Load(ctx, store, log, fx.rust); fxErr != nil {
			return
		}
		fx.typical, fx.top, fxErr = pickUsers(db)
	})
	if fxErr != nil {
		b.Fatal(fxErr)
	}
	return fx
}

type benchError string

func (e benchError) Error() string { return string(e) }

const errNoLedger = benchError("set PAYMENTS_BENCH_DB to an SQLite ledger, e.g. target/bench/payments/ledger-16000-1.db " +
	"(payments generate --users 16000 --seed 1; scripts/bench-payments.sh keeps one there)")

func pickUsers(path string) (typical, top string, err error) {
	db, err := sql.Open("sqlite3", "file:"+path+"?mode=ro")
	if err != nil {
		return "", "", err
	}
	defer db.Close()
	const byCount = `SELECT user_id FROM transactions GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT 1 OFFSET ?`
	var users int
	if err := db.QueryRow(`SELECT count(DISTINCT user_id) FROM transactions`).Scan(&users); err != nil {
		return "", "", err
	}
	if err := db.QueryRow(byCount, 0).Scan(&top); err != nil {
		return "", "", err
	}
	err = db.QueryRow(byCount, users/2).Scan(&typical)
	return typical, top, err
}

var sink int

// BenchmarkCgoCall is one C call that does nothing (payments_abi_version):
// the price of crossing the boundary, paid twice per request (answer, free).
func BenchmarkCgoCall(b *testing.B) {
	for b.Loop() {
		sink += int(rustcore.ABIVersion())
	}
}

type request struct {
	name, user, path, query string
	days                    int
}

func requests(f fixture) []request {
	return []request{
		{"balance/typical", f.typical, "/v1/users/" + f.typical + "/balance", "", 0},
		{"balance/top", f.top, "/v1/users/" + f.top + "/balance", "", 0},
		{"stats30/typical", f.typical, "/v1/users/" + f.typical + "/stats", "days=30", 30},
		{"stats30/top", f.top, "/v1/users/" + f.top + "/stats", "days=30", 30},
		{"stats365/top", f.top, "/v1/users/" + f.top + "/stats", "days=365", 365},
	}
}

// BenchmarkAnswer is one answer's body, in-process, no HTTP: the Go engine
// (the model's compute plus encoding/json, as the handler does) and the Rust
// engine (one respond call, the body written in Rust, then the free call).
func BenchmarkAnswer(b *testing.B) {
	f := load(b)
	for _, r := range requests(f) {
		b.Run("go/"+r.name, func(b *testing.B) {
			for b.Loop() {
				var v any
				var ok bool
				if r.days == 0 {
					v, ok = f.model.Balance(r.user)
				} else {
					v, ok = f.model.Stats(r.user, r.days)
				}
				body, err := json.Marshal(v)
				if !ok || err != nil {
					b.Fatal(r.user, err)
				}
				sink += len(body)
			}
		})
		b.Run("rust/"+r.name, func(b *testing.B) {
			for b.Loop() {
				err := f.rust.Respond("GET", r.path, r.query, func(status int, body []byte) {
					sink += status + len(body)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRowsPerCall is the other way to feed the Rust side: no read model
// of its own, the user's rows (Go already holds them) handed over with every
// request — packed, crossed, applied into a one-user model, then answered.
func BenchmarkRowsPerCall(b *testing.B) {
	f := load(b)
	for _, r := range requests(f)[2:4] {
		bal, _ := f.model.Balance(r.user)
		var rows []readmodel.TxnItem
		for cursor := int64(0); ; {
			page, _ := f.model.Transactions(r.user, 200, cursor)
			rows = append(rows, page.Items...)
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		b.Run("rust/"+r.name, func(b *testing.B) {
			for b.Loop() {
				e, err := rustcore.New()
				if err != nil {
					b.Fatal(err)
				}
				e.AddUser(r.user)
				for _, a := range bal.Balances {
					e.AddAccount(r.user, a.Currency)
				}
				for i := len(rows) - 1; i >= 0; i-- { // pages are newest first
					t := rows[i]
					e.Apply(t.Seq, t.TS, r.user, t.Currency, t.Amount, t.Status, t.Category, t.Counterparty)
				}
				if err := e.Publish(); err != nil {
					b.Fatal(err)
				}
				if err := e.Respond("GET", r.path, r.query, func(status int, body []byte) { sink += len(body) }); err != nil {
					b.Fatal(err)
				}
				e.Close()
			}
			b.ReportMetric(float64(len(rows)), "rows/op")
		})
	}
}
