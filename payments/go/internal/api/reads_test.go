package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"scalpel.example/payments-go/internal/testledger"
)

const (
	alice = "u0123456789ab"
	bob   = "u00000000000b"
	carol = "u0000000000c0" // a user with no accounts
)

var day = time.Date(2026, 6, 30, 10, 0, 0, 0, time.UTC).Unix()

// readLedger: alice has EUR settled 1500, pending -200 and +300, and an
// empty USD account; bob has EUR.
func readLedger(t *testing.T) *testledger.Builder {
	b := testledger.New(t)
	b.User(alice, "EUR", "USD")
	b.User(bob, "EUR")
	b.User(carol)
	b.Txn(day-2*86400, alice, "EUR", 2000, "settled", "topup", "ext:topup") // seq 1
	b.Txn(day-86400, alice, "EUR", -500, "settled", "gift", bob)            // seq 2
	b.Txn(day-86400, bob, "EUR", 500, "settled", "gift", alice)             // seq 3
	b.Txn(day, alice, "EUR", -200, "pending", "payout", "ext:payout")       // seq 4
	b.Txn(day, alice, "EUR", 300, "pending", "refund", "ext:bank")          // seq 5
	return b
}

func TestBalanceCanonicalBody(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		e := startEngine(t, readLedger(t), engine, nil)
		expect(t, "alice", e.get("/v1/users/"+alice+"/balance"), 200,
			`{"user_id":"u0123456789ab","seq":5,"balances":[`+
				`{"currency":"EUR","settled":1500,"pending":100,"available":1300},`+
				`{"currency":"USD","settled":0,"pending":0,"available":0}]}`)
		expect(t, "carol without accounts", e.get("/v1/users/"+carol+"/balance"), 200,
			`{"user_id":"u0000000000c0","seq":5,"balances":[]}`)
		expect(t, "healthz", e.get("/healthz"), 200, `{"status":"ok","seq":5}`)
	})
}

func TestStatsOverHTTP(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		e := startEngine(t, readLedger(t), engine, nil)
		got := e.get("/v1/users/" + alice + "/stats?days=2")
		expect(t, "alice days=2", got, 200,
			`{"user_id":"u0123456789ab","seq":5,"days":2,"from":"2026-06-29","to":"2026-06-30","currencies":[`+
				`{"currency":"EUR","count":3,"total_in":300,"total_out":700,`+
				`"by_category":[{"category":"gift","count":1,"in":0,"out":500},{"category":"payout","count":1,"in":0,"out":200},{"category":"refund","count":1,"in":300,"out":0}],`+
				`"daily":[{"date":"2026-06-29","count":1,"in":0,"out":500},{"date":"2026-06-30","count":2,"in":300,"out":200}],`+
				`"amounts":{"p50":300,"p90":500,"p99":500,"max":500},`+
				`"top_counterparties":[{"counterparty":"u00000000000b","count":1,"volume":500},{"counterparty":"ext:bank","count":1,"volume":300},{"counterparty":"ext:payout","count":1,"volume":200}]},`+
				`{"currency":"USD","count":0,"total_in":0,"total_out":0,"by_category":[],`+
				`"daily":[{"date":"2026-06-29","count":0,"in":0,"out":0},{"date":"2026-06-30","count":0,"in":0,"out":0}],`+
				`"amounts":null,"top_counterparties":[]}]}`)

		var def struct {
			Days       int    `json:"days"`
			From       string `json:"from"`
			Currencies []struct {
				Count int `json:"count"`
			} `json:"currencies"`
		}
		r := e.get("/v1/users/" + alice + "/stats")
		if err := json.Unmarshal([]byte(r.body), &def); err != nil || r.status != 200 {
			t.Fatalf("default days: %d %s", r.status, r.body)
		}
		if def.Days != 30 || def.From != "2026-06-01" || def.Currencies[0].Count != 4 {
			t.Errorf("default window: %+v", def)
		}
		// "007" is 7, the first of repeated parameters counts, unknown ones are ignored.
		seven := e.get("/v1/users/" + alice + "/stats?days=7").body
		for _, q := range []string{"days=007", "days=7&days=abc", "x=1&days=7"} {
			if got := e.get("/v1/users/" + alice + "/stats?" + q); got.status != 200 || got.body != seven {
				t.Errorf("?%s: %d %s", q, got.status, got.body)
			}
		}
	})
}

func TestReadErrorsAndTheirOrder(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		e := startEngine(t, readLedger(t), engine, nil)
		const (
			badID    = `{"error":{"code":"invalid_user_id","message":"user id must be 'u' followed by 12 lowercase hex digits"}}`
			badDays  = `{"error":{"code":"invalid_days","message":"days must be an integer from 1 to 365"}}`
			notFound = `{"error":{"code":"user_not_found","message":"user not found"}}`
			noPath   = `{"error":{"code":"not_found","message":"no such endpoint"}}`
			badVerb  = `{"error":{"code":"method_not_allowed","message":"method not allowed"}}`
			badLimit = `{"error":{"code":"invalid_limit","message":"limit must be an integer from 1 to 200"}}`
			badCur   = `{"error":{"code":"invalid_cursor","message":"cursor must be a positive integer"}}`
		)
		unknown := "u0000000000ff"
		cases := []struct {
			method, path string
			status       int
			body         string
		}{
			{"GET", "/v1/users/U0123456789AB/balance", 400, badID},
			{"GET", "/v1/users/u0123456789a/balance", 400, badID},
			{"GET", "/v1/users/u0123456789abc/stats", 400, badID},
			{"GET", "/v1/users/x/stats?days=abc", 400, badID}, // id is checked before days
			{"GET", "/v1/users/" + unknown + "/balance", 404, notFound},
			{"GET", "/v1/users/" + unknown + "/stats?days=0", 400, badDays}, // days before existence
			{"GET", "/v1/users/" + unknown + "/stats", 404, notFound},
			{"GET", "/v1/users/" + alice + "/stats?days=", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=-1", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=1.5", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=366", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=1000", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=0365", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=abc&days=7", 400, badDays},
			{"GET", "/v1/users/" + alice + "/transactions?limit=0", 400, badLimit},
			{"GET", "/v1/users/" + alice + "/transactions?limit=201", 400, badLimit},
			{"GET", "/v1/users/" + alice + "/transactions?cursor=0", 400, badCur},
			{"GET", "/v1/users/" + alice + "/transactions?cursor=-5", 400, badCur},
			{"GET", "/v1/users/" + alice + "/transactions?cursor=99999999999999999999", 400, badCur},
			{"GET", "/v1/users/" + unknown + "/transactions", 404, notFound},
			{"GET", "/v1/users/" + alice + "/balance/", 404, noPath},
			{"GET", "/v1/users/" + alice, 404, noPath},
			{"GET", "/", 404, noPath},
			{"POST", "/nope", 404, noPath},
			{"POST", "/v1/users/" + alice + "/balance", 405, badVerb},
			{"DELETE", "/v1/users/x/stats", 405, badVerb}, // method before id format
			{"PUT", "/v1/users/" + alice + "/transactions", 405, badVerb},
			{"GET", "/v1/transfers", 405, badVerb},
			{"POST", "/healthz", 405, badVerb},
		}
		for _, c := range cases {
			expect(t, c.method+" "+c.path, e.do(c.method, c.path, nil, ""), c.status, c.body)
		}
	})
}

func TestTransactionsPagesNewestFirst(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		b := readLedger(t)
		for i := range 7 {
			b.Txn(day+int64(i), bob, "EUR", int64(i+1), "settled", "gift", alice)
		}
		e := startEngine(t, b, engine, nil)
		expect(t, "alice first page", e.get("/v1/users/"+alice+"/transactions?limit=2"), 200,
			`{"user_id":"u0123456789ab","seq":12,"items":[`+
				fmt.Sprintf(`{"seq":5,"ts":%d,"currency":"EUR","amount":300,"status":"pending","category":"refund","counterparty":"ext:bank"},`, day)+
				fmt.Sprintf(`{"seq":4,"ts":%d,"currency":"EUR","amount":-200,"status":"pending","category":"payout","counterparty":"ext:payout"}],"next_cursor":4}`, day))

		// Walk bob's 8 rows three at a time: 12 11 10 | 9 8 7 | 6 3.
		var seen []string
		cursor := ""
		for page := 0; ; page++ {
			var p struct {
				Items []struct {
					Seq int64 `json:"seq"`
				} `json:"items"`
				NextCursor *int64 `json:"next_cursor"`
			}
			r := e.get("/v1/users/" + bob + "/transactions?limit=3" + cursor)
			if err := json.Unmarshal([]byte(r.body), &p); err != nil || r.status != 200 {
				t.Fatalf("page %d: %d %s", page, r.status, r.body)
			}
			var seqs []string
			for _, it := range p.Items {
				seqs = append(seqs, fmt.Sprint(it.Seq))
			}
			seen = append(seen, strings.Join(seqs, " "))
			if p.NextCursor == nil {
				break
			}
			cursor = fmt.Sprintf("&cursor=%d", *p.NextCursor)
		}
		if got := strings.Join(seen, " | "); got != "12 11 10 | 9 8 7 | 6 3" {
			t.Errorf("pages %q", got)
		}
		expect(t, "past the oldest", e.get("/v1/users/"+bob+"/transactions?cursor=3"), 200,
			`{"user_id":"u00000000000b","seq":12,"items":[],"next_cursor":null}`)
		if r := e.get("/v1/users/" + bob + "/transactions"); r.status != 200 || !strings.HasSuffix(r.body, `"next_cursor":null}`) {
			t.Errorf("default limit 50 holds all 8: %s", r.body)
		}
	})
}

func TestReadModelTailsNewRowsAndSkipsUnknownUsers(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		b := readLedger(t)
		e := startEngine(t, b, engine, nil)
		seq := b.Txn(day+86400, bob, "EUR", 7, "settled", "refund", "ext:bank")
		e.waitSeq(seq)
		expect(t, "bob after a new row", e.get("/v1/users/"+bob+"/balance"), 200,
			`{"user_id":"u00000000000b","seq":6,"balances":[{"currency":"EUR","settled":507,"pending":0,"available":507}]}`)

		// A user written after start is not known (users are read once); the
		// row still advances seq and the ledger clock (SPEC "The read model").
		dave := "u00000000000d"
		b.User(dave, "IDR")
		seq = b.Txn(day+2*86400, dave, "IDR", 12345, "settled", "topup", "ext:topup")
		e.waitSeq(seq)
		expect(t, "dave stays unknown", e.get("/v1/users/"+dave+"/balance"), http.StatusNotFound,
			`{"error":{"code":"user_not_found","message":"user not found"}}`)
		expect(t, "healthz", e.get("/healthz"), 200, `{"status":"ok","seq":7}`)
		if st := e.get("/v1/users/" + bob + "/stats?days=1").body; !strings.Contains(st, `"from":"2026-07-02","to":"2026-07-02"`) {
			t.Errorf("the clock did not move to dave's row: %s", st)
		}
	})
}

// SPEC "Matching rules": raw path bytes, no decoding or cleaning; only GET
// on the read endpoints; the query decoded like url.ParseQuery.
func TestMatchingRulesOnRawPaths(t *testing.T) {
	onEachEngine(t, func(t *testing.T, engine string) {
		e := startEngine(t, readLedger(t), engine, nil)
		badID := `{"error":{"code":"invalid_user_id","message":"user id must be 'u' followed by 12 lowercase hex digits"}}`
		badDays := `{"error":{"code":"invalid_days","message":"days must be an integer from 1 to 365"}}`
		noPath := `{"error":{"code":"not_found","message":"no such endpoint"}}`
		cases := []struct {
			method, path string
			status       int
			body         string
		}{
			{"GET", "/v1/users/u%30123456789ab/balance", 400, badID},
			{"GET", "/v1/users/./balance", 400, badID},
			{"GET", "/v1/users/../balance", 400, badID},
			{"GET", "/v1/users//balance", 404, noPath},
			{"GET", "//v1/users/" + alice + "/balance", 404, noPath},
			{"GET", "/v1/users/" + alice + "/./balance", 404, noPath},
			{"GET", "/v1/users/" + alice + "/balance/", 404, noPath},
			{"GET", "/v1/users/" + alice + "/balanc%65", 404, noPath},
			{"GET", "/healthz/", 404, noPath},
			{"GET", "/v1/users/" + alice + "/stats?days", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=+7", 400, badDays},
			{"GET", "/v1/users/" + alice + "/stats?days=%2B7", 400, badDays},
		}
		for _, c := range cases {
			expect(t, c.method+" "+c.path, e.do(c.method, c.path, nil, ""), c.status, c.body)
		}

		// HEAD is a wrong method: 405, and (HEAD) no body.
		req, _ := http.NewRequest(http.MethodHead, e.srv.URL+"/v1/users/"+alice+"/balance", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET" {
			t.Errorf("HEAD: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
		}

		// %-escapes in the query are decoded; bad pairs are skipped like url.ParseQuery.
		seven := e.get("/v1/users/" + alice + "/stats?days=7").body
		for _, q := range []string{"days=%37", "d%61ys=7", "days=%zz&days=7", "a;b=1&days=7"} {
			if got := e.get("/v1/users/" + alice + "/stats?" + q); got.status != 200 || got.body != seven {
				t.Errorf("?%s: %d %s", q, got.status, got.body)
			}
		}
		if got := e.get("/v1/users/" + alice + "/stats?days=%zz"); got.status != 200 || !strings.Contains(got.body, `"days":30`) {
			t.Errorf("?days=%%zz is skipped, so the default applies: %d %s", got.status, got.body)
		}
	})
}
