// Package api is the HTTP face of the legacy payments service: routing, input
// validation and the exact error bodies of SPEC.md. Reads are answered from
// the read model; the one write (a transfer) goes through package ledger.
package api

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"scalpel.example/payments-go/internal/ledger"
	"scalpel.example/payments-go/internal/readmodel"
)

// TransferTimeout bounds one transfer, including the wait for the writer.
const TransferTimeout = 10 * time.Second

// maxTransferBody is the largest accepted POST /v1/transfers body (16 KiB).
const maxTransferBody = 16 << 10

var userIDPattern = regexp.MustCompile(`^u[0-9a-f]{12}$`)

// catchUpTimeout bounds the catch-up a transfer makes before its answer: past
// it the 201 goes out anyway (the transfer is committed) and the tail shows it
// at its next tick.
const catchUpTimeout = 2 * time.Second

// Server holds what the handlers need.
type Server struct {
	model  *readmodel.Model
	ledger ledger.Store
	log    *slog.Logger
	engine ReadEngine // nil: the Go read model answers balance and stats
}

// ReadEngine answers GET balance and stats in place of the Go read model: the
// Rust core in this process (package rustcore, --engine rust). write gets the
// status and the canonical body, valid until it returns; an error means no
// answer (a caught panic, a broken engine): the request gets a 500.
type ReadEngine interface {
	Respond(method, path, query string, write func(status int, body []byte)) error
}

// New returns a Server answering from model and writing through store.
func New(model *readmodel.Model, store ledger.Store, log *slog.Logger) *Server {
	return &Server{model: model, ledger: store, log: log}
}

// UseEngine makes s answer GET balance and stats from e, fed by the model
// (readmodel.Mirror); everything else stays with the Go code. It returns s.
func (s *Server) UseEngine(e ReadEngine) *Server {
	s.engine = e
	return s
}

// Handler returns the routes. Every answer, including unknown paths (404) and
// wrong methods (405, HEAD included), has a JSON body.
func (s *Server) Handler() http.Handler {
	rt := &router{}
	rt.handle(http.MethodGet, "/v1/users/{id}/balance", s.balance)
	rt.handle(http.MethodGet, "/v1/users/{id}/stats", s.stats)
	rt.handle(http.MethodGet, "/v1/users/{id}/transactions", s.transactions)
	rt.handle(http.MethodPost, "/v1/transfers", s.transfer)
	rt.handle(http.MethodGet, "/healthz", s.healthz)
	rt.handle(http.MethodGet, "/metrics", s.metrics)
	return s.recoverPanics(rt)
}

// recoverPanics turns a handler panic into a JSON 500 instead of a dropped
// connection, and logs it.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, errInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// apiError is one row of the SPEC error tables.
type apiError struct {
	status  int
	code    string
	message string
}

var (
	errNotFound         = apiError{404, "not_found", "no such endpoint"}
	errMethodNotAllowed = apiError{405, "method_not_allowed", "method not allowed"}
	errInvalidUserID    = apiError{400, "invalid_user_id", "user id must be 'u' followed by 12 lowercase hex digits"}
	errInvalidDays      = apiError{400, "invalid_days", "days must be an integer from 1 to 365"}
	errUserNotFound     = apiError{404, "user_not_found", "user not found"}
	errInvalidLimit     = apiError{400, "invalid_limit", "limit must be an integer from 1 to 200"}
	errInvalidCursor    = apiError{400, "invalid_cursor", "cursor must be a positive integer"}
	errInternal         = apiError{500, "internal_error", "internal error"}

	errMissingKey    = apiError{400, "missing_idempotency_key", "the Idempotency-Key header is required"}
	errInvalidKey    = apiError{400, "invalid_idempotency_key", "Idempotency-Key must be 1 to 128 characters of A-Z a-z 0-9 _ -"}
	errInvalidJSON   = apiError{400, "invalid_json", "body must be a JSON object with from, to, currency and amount"}
	errBodyTooLarge  = apiError{413, "body_too_large", "body must be at most 16384 bytes"}
	errSameUser      = apiError{400, "same_user", "from and to must be different users"}
	errInvalidAmount = apiError{400, "invalid_amount", "amount must be an integer from 1 to 9007199254740991"}
	errCurrency      = apiError{422, "currency_mismatch", "both users need an account in that currency"}
	errFunds         = apiError{422, "insufficient_funds", "insufficient funds"}
	errOverflow      = apiError{422, "amount_overflow", "the receiver's balance would overflow"}
	errConflict      = apiError{409, "idempotency_conflict", "idempotency key was used with a different request"}
)

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, e apiError) {
	writeJSON(w, e.status, errorBody{errorDetail{Code: e.code, Message: e.message}})
}

// writeJSON writes v as canonical JSON: compact, keys in struct order, no
// trailing newline. json.Marshal escapes <, > and &; SPEC guarantees that no
// answer string contains them, so the bytes match the Rust service.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = errInternal.status
		body = []byte(`{"error":{"code":"internal_error","message":"internal error"}}`)
	}
	writeBody(w, status, body)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client gone away is not our error
}
