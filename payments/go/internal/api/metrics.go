package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
)

// metrics answers GET /metrics in the Prometheus text format: the ledger
// store's connection pools (SPEC "GET /metrics") and the read model's seq.
// The names are the Rust service's where both have the figure.
func (s *Server) metrics(w http.ResponseWriter, _ *http.Request) {
	var b bytes.Buffer
	store := s.ledger.Kind()
	pools := s.ledger.Pools()
	gauge := func(name, help string, value func(i int) string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for i, p := range pools {
			fmt.Fprintf(&b, "%s{store=%q,pool=%q} %s\n", name, store, p.Name, value(i))
		}
	}
	counter := func(name, help string, value func(i int) string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
		for i, p := range pools {
			fmt.Fprintf(&b, "%s{store=%q,pool=%q} %s\n", name, store, p.Name, value(i))
		}
	}
	itoa := strconv.Itoa
	gauge("payments_db_pool_max", "Most connections the pool opens.", func(i int) string { return itoa(pools[i].MaxOpen) })
	gauge("payments_db_pool_open", "Connections open now.", func(i int) string { return itoa(pools[i].Open) })
	gauge("payments_db_pool_in_use", "Connections in use now.", func(i int) string { return itoa(pools[i].InUse) })
	gauge("payments_db_pool_idle", "Connections open and idle now.", func(i int) string { return itoa(pools[i].Idle) })
	counter("payments_db_pool_waits_total", "Times a caller waited for a connection.",
		func(i int) string { return strconv.FormatInt(pools[i].WaitCount, 10) })
	counter("payments_db_pool_wait_seconds_total", "Time spent waiting for a connection.",
		func(i int) string { return strconv.FormatFloat(pools[i].WaitDuration.Seconds(), 'f', 6, 64) })
	fmt.Fprintf(&b, "# HELP payments_ledger_seq The last ledger seq applied to the read model.\n"+
		"# TYPE payments_ledger_seq gauge\npayments_ledger_seq{store=%q} %d\n", store, s.model.Seq())
	h := w.Header()
	h.Set("Content-Type", "text/plain; version=0.0.4")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}
