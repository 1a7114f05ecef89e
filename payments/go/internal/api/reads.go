package api

import (
	"net/http"
	"regexp"
	"strconv"
)

const (
	defaultDays  = 30
	maxDays      = 365
	defaultLimit = 50
	maxLimit     = 200
)

var (
	smallIntPattern = regexp.MustCompile(`^[0-9]{1,3}$`)
	cursorPattern   = regexp.MustCompile(`^[0-9]{1,19}$`)
)

// firstQuery returns the first value of a query parameter and whether it was
// present at all (an empty value is present).
func firstQuery(r *http.Request, name string) (string, bool) {
	vs, ok := r.URL.Query()[name]
	if !ok || len(vs) == 0 {
		return "", false
	}
	return vs[0], true
}

// boundedInt parses an optional 1..3 digit parameter (so "007" is 7) within
// [1, hi]; def when absent.
func boundedInt(r *http.Request, name string, def, hi int) (int, bool) {
	raw, present := firstQuery(r, name)
	if !present {
		return def, true
	}
	if !smallIntPattern.MatchString(raw) {
		return 0, false
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > hi {
		return 0, false
	}
	return n, true
}

func (s *Server) balance(w http.ResponseWriter, r *http.Request) {
	if s.engine != nil {
		s.fromEngine(w, r)
		return
	}
	id := r.PathValue("id")
	if !userIDPattern.MatchString(id) {
		writeError(w, errInvalidUserID)
		return
	}
	b, ok := s.model.Balance(id)
	if !ok {
		writeError(w, errUserNotFound)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if s.engine != nil {
		s.fromEngine(w, r)
		return
	}
	id := r.PathValue("id")
	if !userIDPattern.MatchString(id) {
		writeError(w, errInvalidUserID)
		return
	}
	days, ok := boundedInt(r, "days", defaultDays, maxDays)
	if !ok {
		writeError(w, errInvalidDays)
		return
	}
	st, ok := s.model.Stats(id, days)
	if !ok {
		writeError(w, errUserNotFound)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// fromEngine answers a routed GET balance or stats request from the engine:
// the raw path and raw query go in (the engine checks the id, days and user
// in the SPEC's order), status and body come out.
func (s *Server) fromEngine(w http.ResponseWriter, r *http.Request) {
	err := s.engine.Respond(r.Method, rawPath(r), r.URL.RawQuery, func(status int, body []byte) {
		writeBody(w, status, body)
	})
	if err != nil {
		s.log.Error("the read engine gave no answer", "path", r.URL.Path, "err", err)
		writeError(w, errInternal)
	}
}

func (s *Server) transactions(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !userIDPattern.MatchString(id) {
		writeError(w, errInvalidUserID)
		return
	}
	limit, ok := boundedInt(r, "limit", defaultLimit, maxLimit)
	if !ok {
		writeError(w, errInvalidLimit)
		return
	}
	var cursor int64
	if raw, present := firstQuery(r, "cursor"); present {
		c, err := strconv.ParseInt(raw, 10, 64)
		if !cursorPattern.MatchString(raw) || err != nil || c < 1 {
			writeError(w, errInvalidCursor)
			return
		}
		cursor = c
	}
	p, ok := s.model.Transactions(id, limit, cursor)
	if !ok {
		writeError(w, errUserNotFound)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

type health struct {
	Status string `json:"status"`
	Seq    int64  `json:"seq"`
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, health{Status: "ok", Seq: s.model.Seq()})
}
