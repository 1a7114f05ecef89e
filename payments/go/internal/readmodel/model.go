// Package readmodel keeps the whole ledger in memory and answers the read
// endpoints (balance, stats, transactions, healthz) from it.
//
// The model is loaded once at start and then tails the transactions table by
// seq (SPEC "The read model"). It never writes to the ledger: transfers are
// written by package ledger and reach the model through the same tailing path
// as every other row, so there is exactly one way data gets in.
package readmodel

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"scalpel.example/payments-go/internal/ledger"
)

// TailInterval is how often Run polls the ledger for new transactions.
const TailInterval = 100 * time.Millisecond

// tailBatch is the LIMIT of one tail query (SPEC).
const tailBatch = 10000

// Txn is one row of the transactions table as the model keeps it.
type Txn struct {
	Seq          int64
	TS           int64
	Currency     string
	Amount       int64
	Status       string // "settled" or "pending"
	Category     string
	Counterparty string
}

type account struct {
	currency string
	settled  int64
	pending  int64
	// pendingOut is the sum of the negative pending amounts: money already
	// promised away and therefore not available.
	pendingOut int64
}

type user struct {
	accounts []*account // sorted by currency
	txns     []Txn      // seq ascending; append-only
}

func (u *user) account(currency string) *account {
	i, found := slices.BinarySearchFunc(u.accounts, currency, func(a *account, c string) int {
		switch {
		case a.currency < c:
			return -1
		case a.currency > c:
			return 1
		}
		return 0
	})
	if found {
		return u.accounts[i]
	}
	a := &account{currency: currency}
	u.accounts = slices.Insert(u.accounts, i, a)
	return a
}

// Mirror is a second read model fed by this one (the Rust engine, package
// rustcore): it gets the users and accounts read at start, every transaction
// row this model applies, in the same order, and a Publish at the end of the
// load and of every catch-up that applied rows, so both stand at the same seq.
type Mirror interface {
	AddUser(id string)
	AddAccount(userID, currency string)
	Apply(seq, ts int64, userID, currency string, amount int64, status, category, counterparty string)
	// Publish makes what was added visible to the mirror's readers. Its error
	// is logged; the mirror answers no request after one (it fails closed).
	Publish() error
}

// Model is the in-memory read model. It is safe for concurrent use: readers
// take a read lock, the single tailer takes the write lock per batch.
type Model struct {
	src    ledger.Reader
	log    *slog.Logger
	mirror Mirror // nil: none

	// tailMu serializes catch-ups: the tail's ticks and the ones a transfer
	// asks for (CatchUp).
	tailMu sync.Mutex

	mu    sync.RWMutex
	users map[string]*user
	seq   int64 // last applied transaction seq
	clock int64 // ts of the newest applied transaction (the ledger clock)

	// strs interns the few distinct strings (currencies, categories,
	// statuses, counterparties) so a million rows do not hold a million
	// copies. Only touched by the tailer.
	strs map[string]string
}

// Load reads users, accounts and every transaction from store, in one
// read-only snapshot so that they agree, and returns a model ready to serve.
// Call Run to keep it up to date. mirror, if not nil, is fed the same data
// (see Mirror).
func Load(ctx context.Context, store ledger.Store, log *slog.Logger, mirror Mirror) (*Model, error) {
	m := &Model{src: store.Reader(), log: log, mirror: mirror, users: make(map[string]*user), strs: make(map[string]string)}
	err := store.Snapshot(ctx, func(r ledger.Reader) error {
		if err := m.loadUsers(ctx, r); err != nil {
			return err
		}
		return m.catchUp(ctx, r)
	})
	if err != nil {
		return nil, err
	}
	if mirror != nil {
		if err := mirror.Publish(); err != nil {
			return nil, fmt.Errorf("the mirror refused the ledger: %w", err)
		}
	}
	return m, nil
}

func (m *Model) intern(s string) string {
	if v, ok := m.strs[s]; ok {
		return v
	}
	m.strs[s] = s
	return s
}

// loadUsers reads the known users, once: users rows are only written by the
// generator (SPEC "The read model").
func (m *Model) loadUsers(ctx context.Context, r ledger.Reader) error {
	if err := r.Users(ctx, func(id string) {
		m.users[id] = &user{}
		if m.mirror != nil {
			m.mirror.AddUser(id)
		}
	}); err != nil {
		return err
	}
	// Accounts without any transaction still appear in the answers, so the
	// set of accounts comes from the accounts table; their amounts come from
	// the transactions (applied next), which the SPEC keeps equal.
	return r.Accounts(ctx, func(id, currency string) {
		if u, ok := m.users[id]; ok {
			u.account(m.intern(currency))
			if m.mirror != nil {
				m.mirror.AddAccount(id, currency)
			}
		}
	})
}

// Run tails the ledger every TailInterval until ctx is done. Errors are
// logged and retried on the next tick: a busy or briefly locked database
// must not stop the service.
func (m *Model) Run(ctx context.Context) {
	ticker := time.NewTicker(TailInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := m.CatchUp(tctx); err != nil && ctx.Err() == nil {
				m.log.Warn("tailing the ledger failed", "err", err)
			}
			cancel()
		}
	}
}

// CatchUp applies every transaction newer than the model's seq, in batches,
// and publishes them to the mirror. Calls are serialized: Run calls it every
// TailInterval, and a transfer calls it before answering, so that the
// transfer is visible to the next read at once.
func (m *Model) CatchUp(ctx context.Context) error {
	m.tailMu.Lock()
	defer m.tailMu.Unlock()
	applied, err := m.catchUpRows(ctx, m.src)
	if applied > 0 && m.mirror != nil {
		if perr := m.mirror.Publish(); perr != nil {
			m.log.Error("the Rust engine refused rows: it answers 500 from now on", "err", perr)
		}
	}
	return err
}

// catchUp is the load's catch-up: the mirror is published once, by Load.
func (m *Model) catchUp(ctx context.Context, r ledger.Reader) error {
	_, err := m.catchUpRows(ctx, r)
	return err
}

func (m *Model) catchUpRows(ctx context.Context, r ledger.Reader) (applied int, err error) {
	for {
		batch, err := r.Transactions(ctx, m.seq, tailBatch) // m.seq is only written under tailMu (or by Load)
		if err != nil {
			return applied, err
		}
		if len(batch) == 0 {
			return applied, nil
		}
		applied += len(batch)
		if skipped := m.apply(batch); skipped > 0 {
			m.log.Warn("skipped transactions of unknown users", "rows", skipped, "up_to_seq", m.seq)
		}
		if len(batch) < tailBatch {
			return applied, nil
		}
	}
}

// apply adds a batch to the model under the write lock. A row of a user who
// is not known is skipped but still advances seq and the clock (SPEC).
func (m *Model) apply(batch []ledger.Row) (skipped int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range batch {
		if m.mirror != nil {
			m.mirror.Apply(r.Seq, r.TS, r.UserID, r.Currency, r.Amount, r.Status, r.Category, r.Counterparty)
		}
		m.seq = r.Seq
		m.clock = max(m.clock, r.TS)
		u, ok := m.users[r.UserID]
		if !ok {
			skipped++
			continue
		}
		t := Txn{Seq: r.Seq, TS: r.TS, Currency: r.Currency, Amount: r.Amount, Status: r.Status,
			Category: r.Category, Counterparty: r.Counterparty}
		t.Currency = m.intern(t.Currency)
		t.Status = m.intern(t.Status)
		t.Category = m.intern(t.Category)
		t.Counterparty = m.intern(t.Counterparty)
		a := u.account(t.Currency)
		if t.Status == "pending" {
			a.pending += t.Amount
			if t.Amount < 0 {
				a.pendingOut += t.Amount
			}
		} else {
			a.settled += t.Amount
		}
		u.txns = append(u.txns, t)
	}
	return skipped
}

// Seq returns the last transaction seq applied to the model.
func (m *Model) Seq() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.seq
}

// snapshot is what a request needs from the model, taken under the read lock.
// txns may be read after unlocking: the tailer only appends beyond its length.
type snapshot struct {
	seq        int64
	clock      int64
	currencies []string
	txns       []Txn
}

func (m *Model) snapshot(id string) (snapshot, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	u, ok := m.users[id]
	if !ok {
		return snapshot{}, false
	}
	s := snapshot{seq: m.seq, clock: m.clock, txns: u.txns, currencies: make([]string, len(u.accounts))}
	for i, a := range u.accounts {
		s.currencies[i] = a.currency
	}
	return s, true
}
