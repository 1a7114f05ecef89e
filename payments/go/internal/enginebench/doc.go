// Package enginebench measures, per call and in-process, what the cgo engine
// costs beside the Go code it replaces, over a real ledger: the bare cgo call,
// the balance and stats answers from the Go read model (compute plus
// encoding/json) and from the Rust engine (compute plus JSON, across the
// boundary), and the other way the Rust side could get its data — the user's
// rows handed over on every call. It has only benchmarks (enginebench_test.go):
//
//	PAYMENTS_BENCH_DB=target/bench/payments/ledger-16000-1.db \
//	    go test -run '^$' -bench . -benchtime 2s ./internal/enginebench/
//
// with CGO_LDFLAGS and the library as scripts/build-go.sh sets them
// (`source scripts/build-go.sh env`); docs/BENCHMARKS.md has the figures.
package enginebench
