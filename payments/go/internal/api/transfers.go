package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"scalpel.example/payments-go/internal/ledger"
)

// maxAmount is 2^53-1: the largest integer every JSON reader holds exactly.
const maxAmount = 1<<53 - 1

var (
	idempotencyKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	integerPattern        = regexp.MustCompile(`^-?[0-9]+$`)
)

// transferFields are the only keys a transfer body may have. They are
// matched exactly (after JSON unescaping): encoding/json would fold "Amount"
// or "AMOUNT" onto amount and keep the last of two duplicates, so a body the
// SPEC rejects could move money.
var transferFields = [...]string{"from", "to", "currency", "amount"}

// transfer validates in the SPEC order (key, body, ids, same user, amount),
// then lets the ledger check existence, accounts, funds and idempotency
// inside one BEGIN IMMEDIATE transaction.
func (s *Server) transfer(w http.ResponseWriter, r *http.Request) {
	keys := r.Header.Values("Idempotency-Key")
	if len(keys) == 0 {
		writeError(w, errMissingKey)
		return
	}
	key := keys[0]
	if !idempotencyKeyPattern.MatchString(key) {
		writeError(w, errInvalidKey)
		return
	}

	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxTransferBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, errBodyTooLarge)
			return
		}
		writeError(w, errInvalidJSON) // body cut short by the client
		return
	}
	req, apiErr := parseTransfer(raw)
	if apiErr != nil {
		writeError(w, *apiErr)
		return
	}

	ctx, cancel := context.WithTimeout(r.Context(), TransferTimeout)
	defer cancel()
	out, err := s.ledger.Transfer(ctx, key, req)
	switch {
	case err == nil:
		s.catchUp(r.Context())
		writeBody(w, out.Status, out.Body)
	case errors.Is(err, ledger.ErrUserNotFound):
		writeError(w, errUserNotFound)
	case errors.Is(err, ledger.ErrCurrencyMismatch):
		writeError(w, errCurrency)
	case errors.Is(err, ledger.ErrInsufficientFunds):
		writeError(w, errFunds)
	case errors.Is(err, ledger.ErrAmountOverflow):
		writeError(w, errOverflow)
	case errors.Is(err, ledger.ErrIdempotencyConflict):
		writeError(w, errConflict)
	default:
		s.log.Error("transfer failed", "idempotency_key", key, "err", err)
		writeError(w, errInternal)
	}
}

// catchUp applies the committed transfer (and anything before it) to the read
// model, and through it to the Rust engine, before the 201 goes out: the next
// read shows it, instead of up to a tail interval later. A failure is logged
// only; the tail retries.
func (s *Server) catchUp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	if err := s.model.CatchUp(ctx); err != nil {
		s.log.Warn("catching up after a transfer failed; the tail will", "err", err)
	}
}

func parseTransfer(raw []byte) (ledger.TransferRequest, *apiError) {
	members, ok := decodeMembers(raw)
	if !ok {
		return ledger.TransferRequest{}, &errInvalidJSON
	}
	// from and to: a string; absent or null reads as "" and fails the id check.
	var from, to, currency string
	for _, f := range []struct {
		key string
		dst *string
	}{{"from", &from}, {"to", &to}, {"currency", &currency}} {
		if v, ok := members[f.key]; ok && json.Unmarshal(v, f.dst) != nil {
			return ledger.TransferRequest{}, &errInvalidJSON // a number, bool, array or object
		}
	}
	// currency has no rule of its own to fall back on: absent or null is a
	// malformed body, not a currency nobody holds.
	if v, ok := members["currency"]; !ok || bytes.Equal(v, []byte("null")) {
		return ledger.TransferRequest{}, &errInvalidJSON
	}
	amountRaw := members["amount"]
	if len(amountRaw) > 0 && !bytes.Equal(amountRaw, []byte("null")) && !isJSONNumber(amountRaw) {
		return ledger.TransferRequest{}, &errInvalidJSON // a string, bool, array or object
	}

	if !userIDPattern.MatchString(from) || !userIDPattern.MatchString(to) {
		return ledger.TransferRequest{}, &errInvalidUserID
	}
	if from == to {
		return ledger.TransferRequest{}, &errSameUser
	}
	if !integerPattern.Match(amountRaw) {
		return ledger.TransferRequest{}, &errInvalidAmount // absent, null, 1.5, 1e3
	}
	amount, err := strconv.ParseInt(string(amountRaw), 10, 64)
	if err != nil || amount < 1 || amount > maxAmount {
		return ledger.TransferRequest{}, &errInvalidAmount
	}
	return ledger.TransferRequest{From: from, To: to, Currency: currency, Amount: amount}, nil
}

// decodeMembers returns the members of the one JSON object raw holds, each
// value as raw JSON. It fails (invalid_json) on anything else: not an object
// (null included), a second value after it, a key outside transferFields
// (compared byte for byte, so no case folding) or a key given twice.
func decodeMembers(raw []byte) (map[string]json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	members := make(map[string]json.RawMessage, len(transferFields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string) // in key position the decoder only yields strings
		if !slices.Contains(transferFields[:], key) {
			return nil, false
		}
		if _, dup := members[key]; dup {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		members[key] = bytes.TrimSpace(v)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF { // one JSON value, nothing after it
		return nil, false
	}
	return members, true
}

func isJSONNumber(b []byte) bool {
	return b[0] == '-' || (b[0] >= '0' && b[0] <= '9')
}
