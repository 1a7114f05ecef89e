package api

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"scalpel.example/payments-go/internal/rustcore"
	"scalpel.example/payments-go/internal/testledger"
)

// randomLedger: 120 users (a few without accounts, most with one to three
// currencies), 3,000 rows over 400 days before 2026-06-30 in ts order, every
// category, pending and settled, counterparties among the users, strangers
// and ext: names, amounts from 1 to 10^12 of either sign. Seeded: the same
// ledger on every run.
func randomLedger(t *testing.T, kind string) (*testledger.Builder, []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(30, 2026))
	b := testledger.NewStore(t, kind)
	currencies := []string{"EUR", "IDR", "USD"}
	var users []string
	accounts := map[string][]string{}
	for i := range 120 {
		id := fmt.Sprintf("u%012x", rng.Uint64()&0xffffffffffff)
		var cs []string
		if i%20 != 0 {
			for _, c := range currencies {
				if len(cs) == 0 || rng.IntN(3) == 0 {
					cs = append(cs, c)
				}
			}
		}
		b.User(id, cs...)
		users = append(users, id)
		accounts[id] = cs
	}
	categories := []string{"gift", "topup", "payout", "refund", "fee", "transfer"}
	ext := []string{"ext:topup", "ext:payout", "ext:fee", "ext:bank", "u0000000000ee"}
	end := day + 14*3600 // 2026-07-01T00:00Z: the last row falls on 2026-06-30
	rows := make([]testledger.Row, 0, 3000)
	for i := range 3000 {
		user := users[rng.IntN(len(users))]
		for len(accounts[user]) == 0 {
			user = users[rng.IntN(len(users))]
		}
		cp := ext[rng.IntN(len(ext))]
		if rng.IntN(2) == 0 {
			cp = users[rng.IntN(len(users))]
		}
		amount := rng.Int64N(10000) + 1
		if rng.IntN(50) == 0 {
			amount = rng.Int64N(1_000_000_000_000) + 1
		}
		if rng.IntN(2) == 0 {
			amount = -amount
		}
		status := "settled"
		if rng.IntN(10) == 0 {
			status = "pending"
		}
		cs := accounts[user]
		rows = append(rows, testledger.Row{
			TS:   end - 400*86400 + int64(i)*400*86400/3000, // ascending, some days without rows
			User: user, Currency: cs[rng.IntN(len(cs))], Amount: amount, Status: status,
			Category: categories[rng.IntN(len(categories))], Counterparty: cp,
		})
	}
	b.Rows(rows)
	// Two funded users for a transfer after the start.
	b.User(alice, "EUR")
	b.User(bob, "EUR")
	b.Txn(end-60, alice, "EUR", 5000, "settled", "topup", "ext:topup")
	return b, append(users, alice, bob)
}

// readRequests are, per user, the hot endpoints and every kind of bad input
// that reaches them (bad input the head check or the router refuses never
// reaches an engine: it is covered by the matching-rule tests).
func readRequests(id string) []string {
	p := "/v1/users/" + id
	return []string{
		p + "/balance", p + "/stats", p + "/stats?days=1", p + "/stats?days=7", p + "/stats?days=90",
		p + "/stats?days=365", p + "/stats?days=007", p + "/stats?days=%37", p + "/stats?days=7&days=x",
		p + "/stats?days=0", p + "/stats?days=366", p + "/stats?days=abc", p + "/stats?days=",
		p + "/stats?days=+7", p + "/stats?days=%zz", p + "/stats?x=1;days=3",
		"/v1/users/" + strings.ToUpper(id) + "/balance", "/v1/users/" + id[:12] + "/stats",
		"/v1/users/" + id + "0/balance", "/v1/users/u%30" + id[2:] + "/balance",
	}
}

type fullResponse struct {
	status               int
	ctype, length, allow string
	body                 string
}

func (e *env) full(method, path string) fullResponse {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	h := resp.Header
	return fullResponse{resp.StatusCode, h.Get("Content-Type"), h.Get("Content-Length"), h.Get("Allow"), string(body)}
}

// The Go engine and the Rust engine, each serving the same ledger, answer
// every user's balance and stats and every bad input with the same status,
// headers and bytes — on both stores, before and after new rows arrive.
func TestEnginesAnswerTheSameBytes(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		b, users := randomLedger(t, kind)
		goSide := startEngine(t, b, "go", nil)
		rustSide := startEngine(t, b, "rust", nil)
		compare := func(ids []string) int {
			n := 0
			for _, id := range ids {
				for _, path := range readRequests(id) {
					for _, method := range []string{"GET", "HEAD", "POST"} {
						if method != "GET" && !strings.HasSuffix(path, "/balance") {
							continue
						}
						g, r := goSide.full(method, path), rustSide.full(method, path)
						if g != r {
							t.Fatalf("%s %s\n  go: %+v\nrust: %+v", method, path, g, r)
						}
						n++
					}
				}
			}
			return n
		}
		unknown := []string{"u0000000000ee", "u000000000000"}
		n := compare(append(users, unknown...))

		// A transfer through the Go side: the Rust side catches up by its
		// tail, and the two users' answers still agree.
		r := goSide.do("POST", "/v1/transfers", map[string]string{"Idempotency-Key": "engines-1"},
			fmt.Sprintf(`{"from":%q,"to":%q,"currency":"EUR","amount":1234}`, alice, bob))
		if r.status != 201 {
			t.Fatalf("transfer: %d %s", r.status, r.body)
		}
		rustSide.waitSeq(goSide.model.Seq())
		n += compare([]string{alice, bob})
		t.Logf("%s: %d requests, same status, headers and bytes", kind, n)
	})
}

// SPEC "The read model": a transfer answered 201 shows in the next read, on
// either engine and store — the handler catches the model (and the Rust
// engine fed by it) up before answering, not at the next tail tick.
func TestATransferIsVisibleToTheNextRead(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		onEachStore(t, func(t *testing.T, kind string) {
			b := testledger.NewStore(t, kind)
			b.User(alice, "EUR")
			b.User(bob, "EUR")
			b.Txn(day, alice, "EUR", 1000, "settled", "topup", "ext:topup")
			e := startEngine(t, b, engine, nil)
			for i := 1; i <= 5; i++ {
				r := e.do("POST", "/v1/transfers", map[string]string{"Idempotency-Key": fmt.Sprint("visible-", i)},
					fmt.Sprintf(`{"from":%q,"to":%q,"currency":"EUR","amount":10}`, alice, bob))
				if r.status != 201 {
					t.Fatalf("transfer %d: %d %s", i, r.status, r.body)
				}
				seq := 1 + 2*i // two legs per transfer after the top-up
				expect(t, fmt.Sprint("alice after transfer ", i), e.get("/v1/users/"+alice+"/balance"), 200,
					fmt.Sprintf(`{"user_id":%q,"seq":%d,"balances":[{"currency":"EUR","settled":%d,"pending":0,"available":%d}]}`,
						alice, seq, 1000-10*i, 1000-10*i))
				// days=2: the legs are dated now, and a run may cross midnight.
				if st := e.get("/v1/users/" + bob + "/stats?days=2").body; !strings.Contains(st, fmt.Sprintf(`"total_in":%d,`, 10*i)) {
					t.Fatalf("bob's stats after transfer %d: %s", i, st)
				}
			}
		})
	})
}

// A panic inside the Rust engine (payments_test_panic, the same boundary as a
// real answer) is a 500 with the standard error body; the process and the
// server go on.
func TestARustPanicIsA500WithTheStandardBody(t *testing.T) {
	e := startEngine(t, readLedger(t), "rust", func(r *rustcore.Engine) ReadEngine { return r.Panicking() })
	const internal = `{"error":{"code":"internal_error","message":"internal error"}}`
	for range 3 {
		expect(t, "balance", e.get("/v1/users/"+alice+"/balance"), 500, internal)
		expect(t, "stats", e.get("/v1/users/"+alice+"/stats?days=7"), 500, internal)
		expect(t, "healthz", e.get("/healthz"), 200, `{"status":"ok","seq":5}`)
	}
	// The engine itself still answers after the panics.
	var got string
	if err := e.rust.Respond("GET", "/v1/users/"+alice+"/balance", "", func(_ int, body []byte) { got = string(body) }); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, `{"user_id":"u0123456789ab","seq":5,`) {
		t.Errorf("engine after panics: %s", got)
	}
}
