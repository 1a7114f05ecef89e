package api

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"scalpel.example/payments-go/internal/testledger"
)

const rich = "u00000000aaaa" // EUR settled close to the int64 limit

// transferLedger: alice has EUR settled 1000 with a pending payout of -100
// (available 900) and an empty USD account; bob has EUR and IDR; carol has
// no accounts; rich holds MaxInt64-10 EUR.
func transferLedger(t *testing.T, kind string) *testledger.Builder {
	b := testledger.NewStore(t, kind)
	b.User(alice, "EUR", "USD")
	b.User(bob, "EUR", "IDR")
	b.User(carol)
	b.User(rich, "EUR")
	b.Txn(day, alice, "EUR", 1000, "settled", "topup", "ext:topup")
	b.Txn(day, alice, "EUR", -100, "pending", "payout", "ext:payout")
	b.Txn(day, rich, "EUR", math.MaxInt64-10, "settled", "topup", "ext:topup")
	return b
}

func (e *env) transfer(key, body string) response {
	e.t.Helper()
	h := map[string]string{"Content-Type": "application/json"}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return e.do("POST", "/v1/transfers", h, body)
}

func body(from, to, currency string, amount any) string {
	return fmt.Sprintf(`{"from":%q,"to":%q,"currency":%q,"amount":%v}`, from, to, currency, amount)
}

func errBody(code, message string) string {
	return fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, message)
}

func TestTransferErrors(t *testing.T) { onEachStore(t, testTransferErrors) }

func testTransferErrors(t *testing.T, kind string) {
	e := start(t, transferLedger(t, kind))
	var (
		missingKey  = errBody("missing_idempotency_key", "the Idempotency-Key header is required")
		invalidKey  = errBody("invalid_idempotency_key", "Idempotency-Key must be 1 to 128 characters of A-Z a-z 0-9 _ -")
		invalidJSON = errBody("invalid_json", "body must be a JSON object with from, to, currency and amount")
		tooLarge    = errBody("body_too_large", "body must be at most 16384 bytes")
		invalidID   = errBody("invalid_user_id", "user id must be 'u' followed by 12 lowercase hex digits")
		sameUser    = errBody("same_user", "from and to must be different users")
		invalidAmt  = errBody("invalid_amount", "amount must be an integer from 1 to 9007199254740991")
		notFound    = errBody("user_not_found", "user not found")
		mismatch    = errBody("currency_mismatch", "both users need an account in that currency")
		funds       = errBody("insufficient_funds", "insufficient funds")
		overflow    = errBody("amount_overflow", "the receiver's balance would overflow")
	)
	ok := body(alice, bob, "EUR", 10)
	cases := []struct {
		name, key, body string
		status          int
		want            string
	}{
		{"no key", "", ok, 400, missingKey},
		{"no key and bad JSON", "", "nope", 400, missingKey},
		{"key with a space", "a b", ok, 400, invalidKey},
		{"key with a dot", "a.b", ok, 400, invalidKey},
		{"key of 129 chars", strings.Repeat("k", 129), ok, 400, invalidKey},
		{"too large", "k1", `{"from":"` + strings.Repeat("x", 17000) + `"}`, 413, tooLarge},
		{"not JSON", "k1", "nope", 400, invalidJSON},
		{"empty body", "k1", "", 400, invalidJSON},
		{"array", "k1", "[]", 400, invalidJSON},
		{"two values", "k1", ok + ok, 400, invalidJSON},
		{"unknown field", "k1", `{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"note":"x"}`, 400, invalidJSON},
		{"number as from", "k1", `{"from":1,"to":"` + bob + `","currency":"EUR","amount":1}`, 400, invalidJSON},
		{"null body", "k1", "null", 400, invalidJSON},
		{"string body", "k1", `"x"`, 400, invalidJSON},
		{"number as currency", "k1", `{"from":"` + alice + `","to":"` + bob + `","currency":1,"amount":1}`, 400, invalidJSON},
		{"missing currency", "k1", `{"from":"` + alice + `","to":"` + bob + `","amount":1}`, 400, invalidJSON},
		{"null currency", "k1", `{"from":"` + alice + `","to":"` + bob + `","currency":null,"amount":1}`, 400, invalidJSON},
		{"missing currency and bad from", "k1", `{"from":"x","to":"` + bob + `","amount":1}`, 400, invalidJSON},
		{"null from", "k1", `{"from":null,"to":"` + bob + `","currency":"EUR","amount":1}`, 400, invalidID},
		{"string amount", "k1", body(alice, bob, "EUR", `"10"`), 400, invalidJSON},
		{"bool amount", "k1", body(alice, bob, "EUR", "true"), 400, invalidJSON},
		{"bad from", "k1", body("u12", bob, "EUR", 10), 400, invalidID},
		{"bad to", "k1", body(alice, "U00000000000B", "EUR", 10), 400, invalidID},
		{"missing from", "k1", `{"to":"` + bob + `","currency":"EUR","amount":1}`, 400, invalidID},
		{"same user", "k1", body(alice, alice, "EUR", 10), 400, sameUser},
		{"zero", "k1", body(alice, bob, "EUR", 0), 400, invalidAmt},
		{"negative", "k1", body(alice, bob, "EUR", -5), 400, invalidAmt},
		{"fraction", "k1", body(alice, bob, "EUR", 1.5), 400, invalidAmt},
		{"exponent", "k1", body(alice, bob, "EUR", "1e3"), 400, invalidAmt},
		{"2^53", "k1", body(alice, bob, "EUR", "9007199254740992"), 400, invalidAmt},
		{"beyond int64", "k1", body(alice, bob, "EUR", "99999999999999999999999"), 400, invalidAmt},
		{"null amount", "k1", body(alice, bob, "EUR", "null"), 400, invalidAmt},
		{"missing amount", "k1", `{"from":"` + alice + `","to":"` + bob + `","currency":"EUR"}`, 400, invalidAmt},
		{"unknown receiver", "k1", body(alice, "u0000000000ff", "EUR", 10), 404, notFound},
		{"unknown sender", "k1", body("u0000000000ff", bob, "EUR", 10), 404, notFound},
		{"receiver lacks USD", "k1", body(alice, bob, "USD", 1), 422, mismatch},
		{"sender lacks IDR", "k1", body(alice, bob, "IDR", 1), 422, mismatch},
		{"no accounts at all", "k1", body(alice, carol, "EUR", 1), 422, mismatch},
		{"unknown currency", "k1", body(alice, bob, "XYZ", 1), 422, mismatch},
		{"pending payout is not available", "k1", body(alice, bob, "EUR", 901), 422, funds},
		{"receiver overflow", "k1", body(alice, rich, "EUR", 11), 422, overflow},
	}
	for _, c := range cases {
		expect(t, c.name, e.transfer(c.key, c.body), c.status, c.want)
	}
	expect(t, "empty key header", e.do("POST", "/v1/transfers", map[string]string{"Idempotency-Key": ""}, ok), 400, invalidKey)
	// Nothing was written by any of them, not even the idempotency key.
	if n := count(t, e.b.DB, `SELECT count(*) FROM transfers`); n != 0 {
		t.Errorf("%d transfers stored after rejected requests", n)
	}
	if n := count(t, e.b.DB, `SELECT count(*) FROM transactions WHERE category = 'transfer'`); n != 0 {
		t.Errorf("%d transfer rows after rejected requests", n)
	}
}

type transferAnswer struct {
	TransferID string `json:"transfer_id"`
	From       string `json:"from"`
	To         string `json:"to"`
	Currency   string `json:"currency"`
	Amount     int64  `json:"amount"`
	Seq        int64  `json:"seq"`
}

func decodeAnswer(t *testing.T, r response) transferAnswer {
	t.Helper()
	var a transferAnswer
	if r.status != 201 || r.ctype != "application/json" {
		t.Fatalf("want 201 application/json, got %d %s %s", r.status, r.ctype, r.body)
	}
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatalf("201 body %s: %v", r.body, err)
	}
	return a
}

func TestTransferAppliesOnceAndReplaysIdenticalBytes(t *testing.T) {
	onEachStore(t, testTransferAppliesOnceAndReplaysIdenticalBytes)
}

func testTransferAppliesOnceAndReplaysIdenticalBytes(t *testing.T, kind string) {
	e := start(t, transferLedger(t, kind))
	key := strings.Repeat("K", 128) // the longest key allowed
	first := e.transfer(key, body(alice, bob, "EUR", 900))
	a := decodeAnswer(t, first)
	want := fmt.Sprintf(`{"transfer_id":%q,"from":%q,"to":%q,"currency":"EUR","amount":900,"seq":%d}`, a.TransferID, alice, bob, a.Seq)
	if first.body != want || len(a.TransferID) != 17 || a.TransferID[0] != 't' {
		t.Fatalf("201 body %s", first.body)
	}

	// The debit then the credit, both settled transfers, same transfer_id.
	rows, err := e.b.DB.Query(e.b.Q(`SELECT seq, user_id, amount, status, category, counterparty FROM transactions WHERE transfer_id = ? ORDER BY seq`), a.TransferID)
	if err != nil {
		t.Fatal(err)
	}
	var legs []string
	for rows.Next() {
		var seq, amount int64
		var user, status, category, cp string
		if err := rows.Scan(&seq, &user, &amount, &status, &category, &cp); err != nil {
			t.Fatal(err)
		}
		legs = append(legs, fmt.Sprintf("%d %s %d %s %s %s", seq, user, amount, status, category, cp))
	}
	rows.Close()
	wantLegs := []string{
		fmt.Sprintf("%d %s -900 settled transfer %s", a.Seq-1, alice, bob),
		fmt.Sprintf("%d %s 900 settled transfer %s", a.Seq, bob, alice),
	}
	if fmt.Sprint(legs) != fmt.Sprint(wantLegs) {
		t.Errorf("legs\n got: %v\nwant: %v", legs, wantLegs)
	}

	// Retries, sequential and concurrent, give the same bytes and apply nothing.
	var wg sync.WaitGroup
	replies := make([]response, 16) // a 16-way race on one key
	for i := range replies {
		wg.Go(func() { replies[i] = e.transfer(key, body(alice, bob, "EUR", 900)) })
	}
	wg.Wait()
	for i, r := range replies {
		if r.status != 201 || r.body != first.body {
			t.Errorf("retry %d: %d %s, want the first answer %s", i, r.status, r.body, first.body)
		}
	}
	if n := count(t, e.b.DB, `SELECT count(*) FROM transactions WHERE category = 'transfer'`); n != 2 {
		t.Errorf("%d transfer rows after retries, want 2", n)
	}

	// Same key, different request: conflict, whatever the difference.
	for _, b := range []string{body(alice, bob, "EUR", 1), body(bob, alice, "EUR", 900)} {
		expect(t, "conflict", e.transfer(key, b), 409,
			errBody("idempotency_conflict", "idempotency key was used with a different request"))
	}

	// alice now has 100 settled, -100 pending: available 0.
	expect(t, "drained", e.transfer("k2", body(alice, bob, "EUR", 1)), 422, errBody("insufficient_funds", "insufficient funds"))
	if err := testledger.CheckInvariant(e.b.DB); err != nil {
		t.Error(err)
	}

	// The read model sees the transfer through tailing.
	e.waitSeq(a.Seq)
	expect(t, "bob after", e.get("/v1/users/"+bob+"/balance"), 200, fmt.Sprintf(
		`{"user_id":%q,"seq":%d,"balances":[{"currency":"EUR","settled":900,"pending":0,"available":900},{"currency":"IDR","settled":0,"pending":0,"available":0}]}`, bob, a.Seq))
}

func TestRejectedKeyIsNotStoredAndMayBeRetried(t *testing.T) {
	onEachStore(t, testRejectedKeyIsNotStoredAndMayBeRetried)
}

func testRejectedKeyIsNotStoredAndMayBeRetried(t *testing.T, kind string) {
	b := transferLedger(t, kind)
	e := start(t, b)
	expect(t, "too much", e.transfer("later", body(bob, alice, "EUR", 50)), 422, errBody("insufficient_funds", "insufficient funds"))
	decodeAnswer(t, e.transfer("fund-bob", body(alice, bob, "EUR", 50)))
	decodeAnswer(t, e.transfer("later", body(bob, alice, "EUR", 50))) // now bob can pay
}

func TestTransferAtTheLimits(t *testing.T) { onEachStore(t, testTransferAtTheLimits) }

func testTransferAtTheLimits(t *testing.T, kind string) {
	e := start(t, transferLedger(t, kind))
	const max53 = 1<<53 - 1
	a := decodeAnswer(t, e.transfer("big", body(rich, bob, "EUR", max53)))
	if a.Amount != max53 {
		t.Errorf("amount %d", a.Amount)
	}
	// rich receives up to exactly MaxInt64 again, and not one unit more.
	decodeAnswer(t, e.transfer("back", body(bob, rich, "EUR", max53)))
	decodeAnswer(t, e.transfer("fill", body(alice, rich, "EUR", 10)))
	expect(t, "one more", e.transfer("more", body(alice, rich, "EUR", 1)), 422,
		errBody("amount_overflow", "the receiver's balance would overflow"))
	var settled int64
	if err := e.b.QueryRow(`SELECT settled FROM accounts WHERE user_id = ? AND currency = 'EUR'`, rich).Scan(&settled); err != nil || settled != math.MaxInt64 {
		t.Errorf("rich settled %d (%v), want MaxInt64", settled, err)
	}
	if err := testledger.CheckInvariant(e.b.DB); err != nil {
		t.Error(err)
	}
}

func TestConcurrentTransfersNeverOverdraw(t *testing.T) {
	onEachStore(t, testConcurrentTransfersNeverOverdraw)
}

func testConcurrentTransfersNeverOverdraw(t *testing.T, kind string) {
	b := transferLedger(t, kind)
	dave := "u00000000000d"
	b.User(dave, "EUR")
	b.Txn(day, dave, "EUR", 1000, "settled", "topup", "ext:topup")
	e := start(t, b)

	const senders = 24
	statuses := make([]int, senders)
	var wg sync.WaitGroup
	for i := range senders {
		to := []string{alice, bob}[i%2]
		wg.Go(func() {
			statuses[i] = e.transfer(fmt.Sprintf("race-%d", i), body(dave, to, "EUR", 100)).status
		})
	}
	wg.Wait()
	var ok, poor int
	for _, s := range statuses {
		switch s {
		case 201:
			ok++
		case 422:
			poor++
		}
	}
	// 1000 / 100: exactly 10 succeed, the other 14 are refused.
	if ok != 10 || poor != senders-10 {
		t.Errorf("201: %d, 422: %d; statuses %v", ok, poor, statuses)
	}
	var settled int64
	if err := e.b.QueryRow(`SELECT settled FROM accounts WHERE user_id = ? AND currency = 'EUR'`, dave).Scan(&settled); err != nil || settled != 0 {
		t.Errorf("dave settled %d (%v), want 0", settled, err)
	}
	if err := testledger.CheckInvariant(e.b.DB); err != nil {
		t.Error(err)
	}
}

// TestTransferBodyWithFoldedOrDuplicateKeysMovesNoMoney: encoding/json
// matched "Amount" to amount and kept the last of two duplicates, so these
// bodies transferred money (the first one 2, not 1). Every one must be 400
// invalid_json and leave the ledger untouched.
func TestTransferBodyWithFoldedOrDuplicateKeysMovesNoMoney(t *testing.T) {
	onEachStore(t, testTransferBodyWithFoldedOrDuplicateKeysMovesNoMoney)
}

func testTransferBodyWithFoldedOrDuplicateKeysMovesNoMoney(t *testing.T, kind string) {
	b := transferLedger(t, kind)
	e := start(t, b)
	invalidJSON := errBody("invalid_json", "body must be a JSON object with from, to, currency and amount")
	bodies := []string{
		`{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"Amount":2}`,
		`{"from":"` + bob + `","FROM":"` + alice + `","to":"` + carol + `","currency":"EUR","amount":1}`,
		`{"FROM":"` + alice + `","To":"` + bob + `","Currency":"EUR","AMOUNT":1}`,
		`{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"amount":500}`,
		`{"from":"` + bob + `","from":"` + alice + `","to":"` + carol + `","currency":"EUR","amount":1}`,
		`{"from":"` + alice + `","to":"` + bob + `","currency":"USD","currency":"EUR","amount":1}`,
		`{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"\u0061mount":2}`,
		`{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"amount ":2}`,
		`{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"\u212Amount":2}`,
		`{"from":"` + alice + `","to":"` + bob + `","currency":"EUR","amount":1,"from":"` + alice + `"}`,
	}
	for i, body := range bodies {
		expect(t, body, e.transfer(fmt.Sprintf("fold-%d", i), body), 400, invalidJSON)
	}
	if n := count(t, e.b.DB, `SELECT count(*) FROM transactions WHERE category = 'transfer'`); n != 0 {
		t.Errorf("%d transfer rows after bodies the SPEC rejects", n)
	}
	if n := count(t, e.b.DB, `SELECT count(*) FROM transfers`); n != 0 {
		t.Errorf("%d stored idempotency keys after rejected bodies", n)
	}
	// A key escaped in the body is still the key it spells: accepted once.
	a := decodeAnswer(t, e.transfer("escaped", `{"\u0066rom":"`+alice+`","to":"`+bob+`","currency":"EUR","amount":3}`))
	if a.From != alice || a.Amount != 3 {
		t.Errorf("escaped key: %+v", a)
	}
}

// TestOppositeTransfersRaceWithoutDeadlock: 16 transfers at once, half from
// alice to bob and half back, on the same two accounts. PostgreSQL locks both
// accounts in user-id order, so no pair of transactions waits on each other
// (a deadlock would be a 500); every one succeeds and the balances net out.
func TestOppositeTransfersRaceWithoutDeadlock(t *testing.T) {
	onEachStore(t, func(t *testing.T, kind string) {
		b := transferLedger(t, kind)
		b.Txn(day, bob, "EUR", 1000, "settled", "topup", "ext:topup")
		e := start(t, b)
		var wg sync.WaitGroup
		replies := make([]response, 16)
		for i := range replies {
			from, to := alice, bob
			if i%2 == 1 {
				from, to = bob, alice
			}
			wg.Go(func() { replies[i] = e.transfer(fmt.Sprintf("swap-%d", i), body(from, to, "EUR", 100)) })
		}
		wg.Wait()
		for i, r := range replies {
			if r.status != 201 {
				t.Errorf("transfer %d: %d %s", i, r.status, r.body)
			}
		}
		for user, want := range map[string]int64{alice: 1000, bob: 1000} {
			var settled int64
			if err := e.b.QueryRow(`SELECT settled FROM accounts WHERE user_id = ? AND currency = 'EUR'`, user).Scan(&settled); err != nil || settled != want {
				t.Errorf("%s settled %d (%v), want %d", user, settled, err, want)
			}
		}
		if err := testledger.CheckInvariant(e.b.DB); err != nil {
			t.Error(err)
		}
	})
}
