package api

import (
	"strings"
	"testing"
)

// TestMetricsShowThePoolsOfEachStore: /metrics names the store and both
// pools, with the writer's size as configured (one connection on SQLite, the
// default pool on PostgreSQL), and the read model's seq; any other method is
// the SPEC's JSON 405.
func TestMetricsShowThePoolsOfEachStore(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		e := start(t, transferLedger(t, kind))
		got := e.get("/metrics")
		if got.status != 200 || got.ctype != "text/plain; version=0.0.4" {
			t.Fatalf("GET /metrics: %d %s", got.status, got.ctype)
		}
		writer := map[string]string{"sqlite": "1", "postgres": "8"}[kind]
		for _, want := range []string{
			`payments_db_pool_max{store="` + kind + `",pool="reader"} 2`,
			`payments_db_pool_max{store="` + kind + `",pool="writer"} ` + writer,
			`payments_db_pool_open{store="` + kind + `",pool="reader"} `,
			`payments_db_pool_in_use{store="` + kind + `",pool="writer"} 0`,
			`payments_db_pool_waits_total{store="` + kind + `",pool="writer"} `,
			`payments_ledger_seq{store="` + kind + `"} 3`,
		} {
			if !strings.Contains(got.body, want) {
				t.Errorf("/metrics lacks %q:\n%s", want, got.body)
			}
		}
		expect(t, "POST /metrics", e.do("POST", "/metrics", nil, ""), 405,
			`{"error":{"code":"method_not_allowed","message":"method not allowed"}}`)
	})
}
