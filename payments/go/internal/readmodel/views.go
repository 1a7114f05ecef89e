package readmodel

import "sort"

// The answer types below are the canonical JSON of SPEC.md: the field order
// is the key order, and slices are always non-nil so that an empty list is
// written as [] and never as null.

// Balance is the body of GET /v1/users/{id}/balance.
type Balance struct {
	UserID   string         `json:"user_id"`
	Seq      int64          `json:"seq"`
	Balances []BalanceEntry `json:"balances"`
}

// BalanceEntry is one account of a Balance.
type BalanceEntry struct {
	Currency  string `json:"currency"`
	Settled   int64  `json:"settled"`
	Pending   int64  `json:"pending"`
	Available int64  `json:"available"`
}

// Balance returns the user's balances, or false for an unknown user.
func (m *Model) Balance(id string) (Balance, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	u, ok := m.users[id]
	if !ok {
		return Balance{}, false
	}
	b := Balance{UserID: id, Seq: m.seq, Balances: make([]BalanceEntry, 0, len(u.accounts))}
	for _, a := range u.accounts {
		b.Balances = append(b.Balances, BalanceEntry{
			Currency:  a.currency,
			Settled:   a.settled,
			Pending:   a.pending,
			Available: a.settled + a.pendingOut,
		})
	}
	return b, true
}

// TxnPage is the body of GET /v1/users/{id}/transactions.
type TxnPage struct {
	UserID     string    `json:"user_id"`
	Seq        int64     `json:"seq"`
	Items      []TxnItem `json:"items"`
	NextCursor *int64    `json:"next_cursor"`
}

// TxnItem is one transaction of a TxnPage.
type TxnItem struct {
	Seq          int64  `json:"seq"`
	TS           int64  `json:"ts"`
	Currency     string `json:"currency"`
	Amount       int64  `json:"amount"`
	Status       string `json:"status"`
	Category     string `json:"category"`
	Counterparty string `json:"counterparty"`
}

// Transactions returns up to limit of the user's transactions, newest first,
// with seq < cursor (cursor 0 means from the newest). False for an unknown user.
func (m *Model) Transactions(id string, limit int, cursor int64) (TxnPage, bool) {
	s, ok := m.snapshot(id)
	if !ok {
		return TxnPage{}, false
	}
	end := len(s.txns)
	if cursor > 0 {
		end = sort.Search(len(s.txns), func(i int) bool { return s.txns[i].Seq >= cursor })
	}
	start := max(end-limit, 0)
	p := TxnPage{UserID: id, Seq: s.seq, Items: make([]TxnItem, 0, end-start)}
	for i := end - 1; i >= start; i-- {
		t := s.txns[i]
		p.Items = append(p.Items, TxnItem{
			Seq: t.Seq, TS: t.TS, Currency: t.Currency, Amount: t.Amount,
			Status: t.Status, Category: t.Category, Counterparty: t.Counterparty,
		})
	}
	if start > 0 {
		next := s.txns[start].Seq
		p.NextCursor = &next
	}
	return p, true
}

// Stats returns the user's statistics over the last days days of the ledger
// clock, or false for an unknown user. days must be 1..=365.
func (m *Model) Stats(id string, days int) (Stats, bool) {
	s, ok := m.snapshot(id)
	if !ok {
		return Stats{}, false
	}
	return ComputeStats(id, s.seq, s.clock, days, s.currencies, s.txns), true
}
