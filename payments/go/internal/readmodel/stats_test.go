package readmodel

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func unix(year int, month time.Month, day, hour, minute, sec int) int64 {
	return time.Date(year, month, day, hour, minute, sec, 0, time.UTC).Unix()
}

func TestPercentileSmallCasesByHand(t *testing.T) {
	cases := []struct {
		a             []int64
		p50, p90, p99 int64
	}{
		{[]int64{7}, 7, 7, 7},
		{[]int64{10, 20}, 10, 20, 20},
		{[]int64{200, 500, 2000}, 500, 2000, 2000},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 5, 9, 10},
	}
	for _, c := range cases {
		got := [3]int64{Percentile(c.a, 50), Percentile(c.a, 90), Percentile(c.a, 99)}
		want := [3]int64{c.p50, c.p90, c.p99}
		if got != want {
			t.Errorf("percentiles of %v: got %v, want %v", c.a, got, want)
		}
	}
}

// The integer formula must agree with the nearest-rank definition
// a[max(ceil(P*n/100), 1) - 1] computed independently in floating point
// (exact at these sizes).
func TestPercentileMatchesNearestRankDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 300; n++ {
		a := make([]int64, n)
		for i := range a {
			a[i] = rng.Int64N(1_000_000)
		}
		slices.Sort(a)
		for _, p := range []int{50, 90, 99} {
			rank := max(int(math.Ceil(float64(p)*float64(n)/100)), 1)
			if got, want := Percentile(a, p), a[rank-1]; got != want {
				t.Fatalf("n=%d p%d: got %d, want a[%d]=%d", n, p, got, rank-1, want)
			}
		}
	}
}

// The whole answer for a small hand-built case, checked byte for byte
// against the canonical JSON worked out by hand from SPEC.md.
func TestStatsCanonicalJSONByHand(t *testing.T) {
	const u = "u0123456789ab"
	const peer = "u00000000000b"
	txns := []Txn{
		{1, unix(2026, 6, 27, 23, 0, 0), "EUR", 999, "settled", "gift", peer}, // the day before the window
		{2, unix(2026, 6, 28, 1, 0, 0), "EUR", 2000, "settled", "gift", peer},
		{3, unix(2026, 6, 28, 2, 0, 0), "EUR", -200, "pending", "fee", "ext:fee"},
		{4, unix(2026, 6, 30, 10, 0, 0), "EUR", -500, "settled", "gift", peer},
	}
	st := ComputeStats(u, 4, txns[3].TS, 3, []string{"EUR", "USD"}, txns)
	got, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"user_id":"u0123456789ab","seq":4,"days":3,"from":"2026-06-28","to":"2026-06-30","currencies":[` +
		`{"currency":"EUR","count":3,"total_in":2000,"total_out":700,` +
		`"by_category":[{"category":"fee","count":1,"in":0,"out":200},{"category":"gift","count":2,"in":2000,"out":500}],` +
		`"daily":[{"date":"2026-06-28","count":2,"in":2000,"out":200},{"date":"2026-06-29","count":0,"in":0,"out":0},{"date":"2026-06-30","count":1,"in":0,"out":500}],` +
		`"amounts":{"p50":500,"p90":2000,"p99":2000,"max":2000},` +
		`"top_counterparties":[{"counterparty":"u00000000000b","count":2,"volume":2500},{"counterparty":"ext:fee","count":1,"volume":200}]},` +
		`{"currency":"USD","count":0,"total_in":0,"total_out":0,"by_category":[],` +
		`"daily":[{"date":"2026-06-28","count":0,"in":0,"out":0},{"date":"2026-06-29","count":0,"in":0,"out":0},{"date":"2026-06-30","count":0,"in":0,"out":0}],` +
		`"amounts":null,"top_counterparties":[]}]}`
	if string(got) != want {
		t.Errorf("stats JSON\n got: %s\nwant: %s", got, want)
	}
}

func TestStatsWindowEdgesAreWholeUTCDays(t *testing.T) {
	clock := unix(2026, 6, 30, 0, 0, 1) // just after midnight: the whole of 06-30 is "to"
	txns := []Txn{
		{1, unix(2026, 6, 23, 23, 59, 59), "EUR", 1, "settled", "gift", "ext:bank"}, // out
		{2, unix(2026, 6, 24, 0, 0, 0), "EUR", 2, "settled", "gift", "ext:bank"},    // first second in
		{3, unix(2026, 6, 27, 12, 0, 0), "EUR", 4, "settled", "gift", "ext:bank"},
		{4, clock, "EUR", 8, "settled", "gift", "ext:bank"},
	}
	st := ComputeStats("u0123456789ab", 4, clock, 7, []string{"EUR"}, txns)
	if st.From != "2026-06-24" || st.To != "2026-06-30" {
		t.Fatalf("window %s..%s, want 2026-06-24..2026-06-30", st.From, st.To)
	}
	c := st.Currencies[0]
	if c.Count != 3 || c.TotalIn != 14 {
		t.Errorf("count %d total_in %d, want 3 and 14 (the 23:59:59 row is outside)", c.Count, c.TotalIn)
	}

	one := ComputeStats("u0123456789ab", 4, clock, 1, []string{"EUR"}, txns)
	if one.From != one.To || one.Currencies[0].Count != 1 || len(one.Currencies[0].Daily) != 1 {
		t.Errorf("days=1: %+v", one)
	}
}

func TestStatsDailySeriesIsDenseOldestFirst(t *testing.T) {
	clock := unix(2026, 1, 2, 8, 0, 0) // the window crosses a year boundary
	txns := []Txn{
		{1, unix(2025, 12, 29, 5, 0, 0), "IDR", 100, "settled", "topup", "ext:topup"},
		{2, unix(2025, 12, 29, 6, 0, 0), "IDR", -40, "settled", "gift", "u000000000001"},
		{3, clock, "IDR", 7, "settled", "refund", "ext:bank"},
	}
	st := ComputeStats("u0123456789ab", 3, clock, 30, []string{"IDR"}, txns)
	daily := st.Currencies[0].Daily
	if len(daily) != 30 {
		t.Fatalf("%d daily entries, want 30", len(daily))
	}
	for i := 1; i < len(daily); i++ {
		prev, _ := time.Parse(time.DateOnly, daily[i-1].Date)
		cur, _ := time.Parse(time.DateOnly, daily[i].Date)
		if cur.Sub(prev) != 24*time.Hour {
			t.Fatalf("daily[%d]=%s does not follow %s", i, daily[i].Date, daily[i-1].Date)
		}
	}
	if daily[0].Date != st.From || daily[29].Date != st.To || st.From != "2025-12-04" {
		t.Errorf("series %s..%s, window %s..%s", daily[0].Date, daily[29].Date, st.From, st.To)
	}
	var nonEmpty []string
	for _, d := range daily {
		if d.Count > 0 {
			nonEmpty = append(nonEmpty, fmt.Sprintf("%s:%d/%d/%d", d.Date, d.Count, d.In, d.Out))
		}
	}
	if want := []string{"2025-12-29:2/100/40", "2026-01-02:1/7/0"}; !slices.Equal(nonEmpty, want) {
		t.Errorf("non-empty days %v, want %v", nonEmpty, want)
	}
}

func TestTopCounterpartiesTiesAndLimit(t *testing.T) {
	clock := unix(2026, 3, 1, 12, 0, 0)
	var txns []Txn
	add := func(cp string, amount int64) {
		txns = append(txns, Txn{int64(len(txns) + 1), clock, "USD", amount, "settled", "gift", cp})
	}
	// Same volume 300: "b" has 3 rows and beats "a" and "c" (1 row each);
	// "a" and "c" tie on volume and count and go by name.
	add("u00000000000c", 300)
	add("u00000000000a", -300)
	add("u00000000000b", 100)
	add("u00000000000b", -100)
	add("u00000000000b", 100)
	add("ext:bank", 1000) // the largest volume comes first
	for i := range 8 {
		add(fmt.Sprintf("u1000000000%02d", i), int64(10+i)) // small volumes, partly cut off at 10
	}
	st := ComputeStats("u0123456789ab", int64(len(txns)), clock, 30, []string{"USD"}, txns)
	var got []string
	for _, c := range st.Currencies[0].TopCounterparties {
		got = append(got, fmt.Sprintf("%s:%d:%d", c.Counterparty, c.Count, c.Volume))
	}
	want := []string{
		"ext:bank:1:1000", "u00000000000b:3:300", "u00000000000a:1:300", "u00000000000c:1:300",
		"u100000000007:1:17", "u100000000006:1:16", "u100000000005:1:15", "u100000000004:1:14",
		"u100000000003:1:13", "u100000000002:1:12",
	}
	if !slices.Equal(got, want) {
		t.Errorf("top counterparties\n got: %v\nwant: %v", got, want)
	}
}

func TestStatsWithoutTransactionsKeepsEmptyArraysAndNullAmounts(t *testing.T) {
	st := ComputeStats("u0123456789ab", 0, 0, 2, []string{"EUR"}, nil)
	got, _ := json.Marshal(st)
	want := `{"user_id":"u0123456789ab","seq":0,"days":2,"from":"1969-12-31","to":"1970-01-01","currencies":[` +
		`{"currency":"EUR","count":0,"total_in":0,"total_out":0,"by_category":[],` +
		`"daily":[{"date":"1969-12-31","count":0,"in":0,"out":0},{"date":"1970-01-01","count":0,"in":0,"out":0}],` +
		`"amounts":null,"top_counterparties":[]}]}`
	if string(got) != want {
		t.Errorf("\n got: %s\nwant: %s", got, want)
	}
	none := ComputeStats("u0123456789ab", 0, 0, 1, nil, nil)
	if got, _ := json.Marshal(none); !json.Valid(got) || string(got[len(got)-16:]) != `"currencies":[]}` {
		t.Errorf("no accounts: %s", got)
	}
}
