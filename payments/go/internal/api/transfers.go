package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"

	"scalpel.example/payments-go/internal/ledger"
)

// maxAmount is 2^53-1: the largest integer every JSON reader holds exactly.
const maxAmount = 1<<53 - 1

var (
	idempotencyKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)
	integerPattern        = regexp.MustCompile(`^-?[0-9]+$`)
)

// transferBody is the request as sent. Amount stays raw so that a
// non-integer number (1.5, 1e3) is told apart from a wrong type.
type transferBody struct {
	From     string          `json:"from"`
	To       string          `json:"to"`
	Currency string          `json:"currency"`
	Amount   json.RawMessage `json:"amount"`
}

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

func parseTransfer(raw []byte) (ledger.TransferRequest, *apiError) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var body transferBody
	if err := dec.Decode(&body); err != nil {
		return ledger.TransferRequest{}, &errInvalidJSON
	}
	if _, err := dec.Token(); err != io.EOF { // one JSON value, nothing after it
		return ledger.TransferRequest{}, &errInvalidJSON
	}
	amountRaw := bytes.TrimSpace(body.Amount)
	if len(amountRaw) > 0 && !bytes.Equal(amountRaw, []byte("null")) && !isJSONNumber(amountRaw) {
		return ledger.TransferRequest{}, &errInvalidJSON // a string, bool, array or object
	}

	if !userIDPattern.MatchString(body.From) || !userIDPattern.MatchString(body.To) {
		return ledger.TransferRequest{}, &errInvalidUserID
	}
	if body.From == body.To {
		return ledger.TransferRequest{}, &errSameUser
	}
	if !integerPattern.Match(amountRaw) {
		return ledger.TransferRequest{}, &errInvalidAmount // absent, null, 1.5, 1e3
	}
	amount, err := strconv.ParseInt(string(amountRaw), 10, 64)
	if err != nil || amount < 1 || amount > maxAmount {
		return ledger.TransferRequest{}, &errInvalidAmount
	}
	return ledger.TransferRequest{From: body.From, To: body.To, Currency: body.Currency, Amount: amount}, nil
}

func isJSONNumber(b []byte) bool {
	return b[0] == '-' || (b[0] >= '0' && b[0] <= '9')
}
