package rustcore

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

const (
	alice = "u0123456789ab"
	bob   = "u00000000000b"
	// ts is 2026-06-30T10:00:00Z.
	ts = 20634*86400 + 36000
)

// newEngine is an engine with alice (EUR, USD) and bob (EUR), published.
func newEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	e.AddUser(alice)
	e.AddUser(bob)
	e.AddAccount(alice, "EUR")
	e.AddAccount(alice, "USD")
	e.AddAccount(bob, "EUR")
	if err := e.Publish(); err != nil {
		t.Fatal(err)
	}
	return e
}

type answer struct {
	status int
	body   string
}

func get(t testing.TB, r Responder, path, query string) answer {
	t.Helper()
	var a answer
	if err := r.Respond("GET", path, query, func(status int, body []byte) {
		a = answer{status, string(body)}
	}); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestRowsAreAnsweredAfterPublishWithTheSpecBytes(t *testing.T) {
	e := newEngine(t)
	e.Apply(1, ts-86400, alice, "EUR", 2000, "settled", "topup", "ext:topup")
	e.Apply(2, ts, alice, "EUR", -500, "settled", "gift", bob)
	e.Apply(3, ts, bob, "EUR", 500, "settled", "gift", alice)
	e.Apply(4, ts, alice, "EUR", -200, "pending", "payout", "ext:payout")
	balance := "/v1/users/" + alice + "/balance"
	before := `{"user_id":"u0123456789ab","seq":0,"balances":[{"currency":"EUR","settled":0,"pending":0,"available":0},{"currency":"USD","settled":0,"pending":0,"available":0}]}`
	if got := get(t, e, balance, ""); got != (answer{200, before}) {
		t.Fatalf("before Publish: %+v", got)
	}
	if err := e.Publish(); err != nil {
		t.Fatal(err)
	}
	if e.Seq() != 4 {
		t.Errorf("Seq %d, want 4", e.Seq())
	}
	want := `{"user_id":"u0123456789ab","seq":4,"balances":[{"currency":"EUR","settled":1500,"pending":-200,"available":1300},{"currency":"USD","settled":0,"pending":0,"available":0}]}`
	if got := get(t, e, balance, ""); got != (answer{200, want}) {
		t.Errorf("balance: %+v", got)
	}
	stats := get(t, e, "/v1/users/"+bob+"/stats", "days=1")
	wantStats := `{"user_id":"u00000000000b","seq":4,"days":1,"from":"2026-06-30","to":"2026-06-30","currencies":[{"currency":"EUR","count":1,"total_in":500,"total_out":0,"by_category":[{"category":"gift","count":1,"in":500,"out":0}],"daily":[{"date":"2026-06-30","count":1,"in":500,"out":0}],"amounts":{"p50":500,"p90":500,"p99":500,"max":500},"top_counterparties":[{"counterparty":"u0123456789ab","count":1,"volume":500}]}]}`
	if stats != (answer{200, wantStats}) {
		t.Errorf("stats: %+v", stats)
	}
	for _, c := range []struct{ path, query, code string }{
		{"/v1/users/U1/balance", "", "invalid_user_id"},
		{"/v1/users/" + alice + "/stats", "days=366", "invalid_days"},
		{"/v1/users/u0000000000ff/stats", "", "user_not_found"},
	} {
		if got := get(t, e, c.path, c.query); !strings.Contains(got.body, `"code":"`+c.code+`"`) || got.status < 400 {
			t.Errorf("%s?%s: %+v", c.path, c.query, got)
		}
	}
	// Empty strings cross as (nil, 0).
	if got := get(t, e, "", ""); got.status != 404 {
		t.Errorf("empty path: %+v", got)
	}
}

func TestARustPanicIsAnErrorAndTheProcessGoesOn(t *testing.T) {
	e := newEngine(t)
	e.Apply(1, ts, alice, "EUR", 700, "settled", "topup", "ext:topup")
	if err := e.Publish(); err != nil {
		t.Fatal(err)
	}
	want := get(t, e, "/v1/users/"+alice+"/balance", "")
	for range 3 {
		called := false
		err := e.Panicking().Respond("GET", "/v1/users/"+alice+"/balance", "", func(int, []byte) { called = true })
		if !errors.Is(err, ErrPanicked) || called {
			t.Fatalf("panicking Respond: err %v, write called %v", err, called)
		}
		if got := get(t, e, "/v1/users/"+alice+"/balance", ""); got != want {
			t.Fatalf("after a caught panic: %+v, want %+v", got, want)
		}
	}
}

func TestAFeedingFailureBreaksTheEngineClosed(t *testing.T) {
	e := newEngine(t)
	e.Apply(1, ts, alice, "EUR", 5, "settled", "lottery", bob)
	err := e.Publish()
	if err == nil || !strings.Contains(err.Error(), "unknown status or category") {
		t.Fatalf("Publish after a bad row: %v", err)
	}
	if e.Err() == nil {
		t.Fatal("Err is nil after a failed Publish")
	}
	err = e.Respond("GET", "/v1/users/"+alice+"/balance", "", func(int, []byte) {
		t.Error("a broken engine answered")
	})
	if err == nil {
		t.Error("a broken engine gave no error")
	}
	// Later rows change nothing: still broken.
	e.Apply(2, ts, alice, "EUR", 5, "settled", "gift", bob)
	if e.Publish() == nil {
		t.Error("Publish recovered from a broken feed")
	}
}

// Run under -race (scripts/test.sh): answers on many goroutines while one
// feeds. Every batch is +10 then -3, so a published state holds whole batches
// and alice's settled balance is 7*seq/2.
func TestConcurrentAnswersWhileFeeding(t *testing.T) {
	e := newEngine(t)
	var done atomic.Bool
	var wg sync.WaitGroup
	var answers atomic.Int64
	for range 4 {
		wg.Go(func() {
			for !done.Load() {
				var a answer
				if err := e.Respond("GET", "/v1/users/"+alice+"/balance", "", func(status int, body []byte) {
					a = answer{status, string(body)}
				}); err != nil {
					t.Error(err)
					return
				}
				seq, err := strconv.ParseInt(between(a.body, `"seq":`, ","), 10, 64)
				if err != nil || seq%2 != 0 {
					t.Errorf("torn snapshot: %s", a.body)
					return
				}
				want := fmt.Sprintf(`"currency":"EUR","settled":%d,`, 7*seq/2)
				if a.status != 200 || !strings.Contains(a.body, want) {
					t.Errorf("seq %d: %s", seq, a.body)
					return
				}
				answers.Add(1)
			}
		})
	}
	for k := range int64(2000) {
		e.Apply(2*k+1, ts, alice, "EUR", 10, "settled", "gift", bob)
		e.Apply(2*k+2, ts, alice, "EUR", -3, "settled", "fee", "ext:fee")
		if err := e.Publish(); err != nil {
			t.Fatal(err)
		}
	}
	for answers.Load() < 100 && !t.Failed() {
		runtime.Gosched()
	}
	done.Store(true)
	wg.Wait()
	if e.Seq() != 4000 {
		t.Errorf("Seq %d, want 4000", e.Seq())
	}
}

func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}

// rssBytes is this process's resident set size (/proc/self/statm).
func rssBytes(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// A million answers through the boundary (balance, stats, an error), each
// freed by Rust: resident memory after them is within a few MiB of before. A
// reply not freed would keep ~300 bytes a call (300 MB); a body copied into Go
// and kept would show too.
func TestSoakAMillionCallsKeepMemoryFlat(t *testing.T) {
	const calls = 1_000_000
	if testing.Short() || raceEnabled {
		t.Skip("the soak runs in the plain test run (scripts/test.sh), not under -short or -race")
	}
	e := newEngine(t)
	for i := range int64(300) {
		cp := "ext:topup"
		if i%3 == 0 {
			cp = bob
		}
		e.Apply(i+1, ts-i*3600, alice, "EUR", 100+i, "settled", "gift", cp)
	}
	if err := e.Publish(); err != nil {
		t.Fatal(err)
	}
	requests := []struct{ path, query string }{
		{"/v1/users/" + alice + "/balance", ""},
		{"/v1/users/" + alice + "/stats", "days=30"},
		{"/v1/users/" + bob + "/balance", ""},
		{"/v1/users/" + alice + "/stats", "days=400"},
	}
	var total int
	sink := func(status int, body []byte) { total += status + len(body) }
	call := func(i int) {
		r := requests[i%len(requests)]
		if err := e.Respond("GET", r.path, r.query, sink); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20_000 { // warm: pools, Go heap, malloc arenas
		call(i)
	}
	runtime.GC()
	before := rssBytes(t)
	for i := range calls {
		call(i)
	}
	runtime.GC()
	after := rssBytes(t)
	t.Logf("%d calls: RSS %.1f MiB before, %.1f MiB after (%d bytes answered)",
		calls, float64(before)/(1<<20), float64(after)/(1<<20), total)
	if grew := after - before; grew > 8<<20 {
		t.Errorf("RSS grew by %.1f MiB over %d calls: a leak across the boundary", float64(grew)/(1<<20), calls)
	}
}
