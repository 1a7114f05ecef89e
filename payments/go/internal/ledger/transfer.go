package ledger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
)

// Business-rule rejections of a transfer. The HTTP layer maps each to its
// status and code; none of them writes anything.
var (
	ErrUserNotFound        = errors.New("user not found")
	ErrCurrencyMismatch    = errors.New("no account in that currency")
	ErrInsufficientFunds   = errors.New("insufficient funds")
	ErrAmountOverflow      = errors.New("receiver balance would overflow")
	ErrIdempotencyConflict = errors.New("idempotency key used with a different request")
)

// TransferRequest is a validated transfer: well-formed distinct user ids and
// 1 <= Amount <= 2^53-1. Its JSON encoding is the canonical request whose
// hash is stored with the idempotency key.
type TransferRequest struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
}

// TransferResponse is the 201 body (canonical JSON, SPEC key order).
type TransferResponse struct {
	TransferID string `json:"transfer_id"`
	From       string `json:"from"`
	To         string `json:"to"`
	Currency   string `json:"currency"`
	Amount     int64  `json:"amount"`
	Seq        int64  `json:"seq"`
}

// Outcome is a committed (or replayed) transfer: the exact status and body
// to send.
type Outcome struct {
	Status   int
	Body     []byte
	Replayed bool
}

func requestHash(req TransferRequest) (string, error) {
	canonical, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}

func newTransferID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "t" + hex.EncodeToString(b[:])
}

// Transfer applies req once per idempotency key. Inside one transaction it
// replays a stored answer for a known key, or checks both users and
// accounts, appends the debit and credit legs, updates accounts and stores
// the answer; the answer is returned only after COMMIT. The locks it takes
// are the dialect's (see the package doc).
func (s *sqlStore) Transfer(ctx context.Context, key string, req TransferRequest) (Outcome, error) {
	hash, err := requestHash(req)
	if err != nil {
		return Outcome{}, err
	}
	q := s.d.bind
	tx, err := s.writer.BeginTx(ctx, nil) // SQLite: BEGIN IMMEDIATE (_txlock=immediate)
	if err != nil {
		return Outcome{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	if s.d.lockKey != "" {
		if _, err := tx.ExecContext(ctx, q(s.d.lockKey), key); err != nil {
			return Outcome{}, fmt.Errorf("lock idempotency key: %w", err)
		}
	}
	var storedHash, storedBody string
	var storedStatus int
	err = tx.QueryRowContext(ctx, q(`SELECT request_hash, status_code, response FROM transfers WHERE idempotency_key = ?`), key).
		Scan(&storedHash, &storedStatus, &storedBody)
	switch {
	case err == nil:
		if storedHash != hash {
			return Outcome{}, ErrIdempotencyConflict
		}
		return Outcome{Status: storedStatus, Body: []byte(storedBody), Replayed: true}, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Outcome{}, fmt.Errorf("read idempotency key: %w", err)
	}

	for _, id := range []string{req.From, req.To} {
		var one int
		err := tx.QueryRowContext(ctx, q(`SELECT 1 FROM users WHERE id = ?`), id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return Outcome{}, ErrUserNotFound
		}
		if err != nil {
			return Outcome{}, fmt.Errorf("read user: %w", err)
		}
	}

	fromSettled, toSettled, err := s.lockAccounts(ctx, tx, req)
	if err != nil {
		return Outcome{}, err
	}

	// available = settled + the negative pending amounts (SPEC balance rule).
	// accounts keeps only the pending sum, so the outgoing part is summed
	// from the sender's rows here, inside the same transaction.
	var pendingOut int64
	err = tx.QueryRowContext(ctx, q(`SELECT COALESCE(SUM(amount), 0) FROM transactions
		WHERE user_id = ? AND currency = ? AND status = 'pending' AND amount < 0`),
		req.From, req.Currency).Scan(&pendingOut)
	if err != nil {
		return Outcome{}, fmt.Errorf("read pending: %w", err)
	}
	if fromSettled+pendingOut < req.Amount {
		return Outcome{}, ErrInsufficientFunds
	}
	if toSettled > math.MaxInt64-req.Amount {
		return Outcome{}, ErrAmountOverflow
	}
	return s.appendLegs(ctx, tx, key, hash, req)
}

// lockAccounts reads both accounts' settled balances, in user-id order so
// that two transfers between the same users lock their rows in the same
// order (PostgreSQL's FOR UPDATE; SQLite's writer is already exclusive).
func (s *sqlStore) lockAccounts(ctx context.Context, tx *sql.Tx, req TransferRequest) (from, to int64, err error) {
	sides := []struct {
		id      string
		settled *int64
	}{{req.From, &from}, {req.To, &to}}
	if req.To < req.From {
		sides[0], sides[1] = sides[1], sides[0]
	}
	for _, side := range sides {
		err := tx.QueryRowContext(ctx, s.d.bind(`SELECT settled FROM accounts WHERE user_id = ? AND currency = ?`+s.d.forUpdate),
			side.id, req.Currency).Scan(side.settled)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, 0, ErrCurrencyMismatch
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read account: %w", err)
		}
	}
	return from, to, nil
}

// appendLegs writes the two legs, the accounts and the stored answer, and
// commits.
func (s *sqlStore) appendLegs(ctx context.Context, tx *sql.Tx, key, hash string, req TransferRequest) (Outcome, error) {
	q := s.d.bind
	if s.d.lockAppend != "" {
		if _, err := tx.ExecContext(ctx, s.d.lockAppend); err != nil {
			return Outcome{}, fmt.Errorf("lock the ledger for appending: %w", err)
		}
	}
	now := time.Now().Unix()
	var lastTS int64
	err := tx.QueryRowContext(ctx, `SELECT ts FROM transactions ORDER BY seq DESC LIMIT 1`).Scan(&lastTS)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Outcome{}, fmt.Errorf("read ledger clock: %w", err)
	}
	ts := max(now, lastTS) // keeps seq order = time order

	transferID := newTransferID()
	insert := q(`INSERT INTO transactions (ts, user_id, currency, amount, status, category, counterparty, transfer_id)
		VALUES (?, ?, ?, ?, 'settled', 'transfer', ?, ?) RETURNING seq`)
	var debitSeq, creditSeq int64
	if err := tx.QueryRowContext(ctx, insert, ts, req.From, req.Currency, -req.Amount, req.To, transferID).Scan(&debitSeq); err != nil {
		return Outcome{}, fmt.Errorf("insert debit: %w", err)
	}
	if err := tx.QueryRowContext(ctx, insert, ts, req.To, req.Currency, req.Amount, req.From, transferID).Scan(&creditSeq); err != nil {
		return Outcome{}, fmt.Errorf("insert credit: %w", err)
	}

	update := q(`UPDATE accounts SET settled = settled + ? WHERE user_id = ? AND currency = ?`)
	if _, err := tx.ExecContext(ctx, update, -req.Amount, req.From, req.Currency); err != nil {
		return Outcome{}, fmt.Errorf("update sender: %w", err)
	}
	if _, err := tx.ExecContext(ctx, update, req.Amount, req.To, req.Currency); err != nil {
		return Outcome{}, fmt.Errorf("update receiver: %w", err)
	}

	body, err := json.Marshal(TransferResponse{
		TransferID: transferID, From: req.From, To: req.To,
		Currency: req.Currency, Amount: req.Amount, Seq: creditSeq,
	})
	if err != nil {
		return Outcome{}, err
	}
	_, err = tx.ExecContext(ctx, q(`INSERT INTO transfers (idempotency_key, request_hash, transfer_id, status_code, response, created_at)
		VALUES (?, ?, ?, ?, ?, ?)`), key, hash, transferID, http.StatusCreated, string(body), now)
	if err != nil {
		return Outcome{}, fmt.Errorf("store idempotency key: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Outcome{}, fmt.Errorf("commit: %w", err)
	}
	return Outcome{Status: http.StatusCreated, Body: body}, nil
}
