package main

// Process-level tests: the real binary, started as a process on a free
// loopback port over a real ledger (an SQLite file, or a database on the
// package's PostgreSQL cluster), killed with SIGKILL in the middle of a stream
// of transfers and restarted — or, on PostgreSQL, left running while the
// database backends serving it are terminated.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scalpel.example/payments-go/internal/headcheck"
	"scalpel.example/payments-go/internal/pgtest"
	"scalpel.example/payments-go/internal/testheads"
	"scalpel.example/payments-go/internal/testledger"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds the service once per test run (PAYMENTS_GO_BIN overrides,
// e.g. with the binary scripts/build-go.sh made).
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("PAYMENTS_GO_BIN"); p != "" {
			binPath = p
			return
		}
		binDir, binErr = os.MkdirTemp("", "payments-go-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "payments-go")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// syncBuffer collects a child's stderr safely.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type service struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	exited chan struct{}
	err    error       // cmd.Wait's result, once exited is closed
	lines  chan string // stdout lines after the first (the first few only)
}

var listeningLine = regexp.MustCompile(`^payments-go listening on (http://127\.0\.0\.1:\d+) \(seq \d+(, engine rust)?\)$`)

// startService runs the binary on port 0 (plus extra flags) and waits (with
// a deadline) for its "listening" line.
func startService(t *testing.T, db string, extra ...string) *service {
	t.Helper()
	s := &service{t: t, stderr: &syncBuffer{}, exited: make(chan struct{}), lines: make(chan string, 8)}
	s.cmd = exec.Command(binary(t), append([]string{"--db", db, "--port", "0"}, extra...)...)
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() {
			select {
			case s.lines <- sc.Text():
			default: // nobody reads that many lines; keep draining
			}
		}
		close(s.lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
	select {
	case line, ok := <-lines:
		m := listeningLine.FindStringSubmatch(line)
		if !ok || m == nil {
			t.Fatalf("unexpected first line %q; stderr: %s", line, s.stderr)
		}
		s.url = m[1]
	case <-time.After(90 * time.Second):
		t.Fatalf("service not ready after 90 s; stderr: %s", s.stderr)
	}
	return s
}

// stop sends sig and returns the exit code.
func (s *service) stop(sig syscall.Signal) int {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		s.t.Fatalf("no exit 60 s after %v", sig)
	}
	return s.cmd.ProcessState.ExitCode()
}

func kill(s *service) {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

var client = &http.Client{Timeout: 60 * time.Second}

type attempt struct {
	key, body string
	answered  bool // a complete HTTP answer was received
	status    int
	reply     string
}

func post(url, key, body string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/transfers", strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(b), nil
}

func TestKillDuringTransfersLosesNothingAndAppliesOnce(t *testing.T) {
	for _, kind := range testledger.Stores {
		t.Run(kind, func(t *testing.T) { killDuringTransfers(t, kind, false) })
	}
}

// TestBackendKillDuringTransfersLosesNothingAndAppliesOnce: the PostgreSQL
// backends serving the service (its reader and writer pools) are terminated
// while transfers stream in. Transfers in flight get a 500 (nothing is
// acknowledged that was not committed); their retries with the same key apply
// each exactly once, and the service carries on with new connections.
func TestBackendKillDuringTransfersLosesNothingAndAppliesOnce(t *testing.T) {
	killDuringTransfers(t, "postgres", true)
}

func killDuringTransfers(t *testing.T, kind string, backend bool) {
	b := testledger.NewStore(t, kind)
	users := make([]string, 6)
	for i := range users {
		users[i] = fmt.Sprintf("u%012x", 0xabc000+i)
		b.User(users[i], "EUR")
		b.Txn(1782777600, users[i], "EUR", 10_000_000, "settled", "topup", "ext:topup")
	}

	first := startService(t, b.DSN)
	const workers = 4
	const ackedBeforeKill = 200
	var acked atomic.Int64
	var stopping atomic.Bool
	results := make([][]attempt, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; !stopping.Load() && i < 100_000; i++ {
				from := rng.IntN(len(users))
				to := (from + 1 + rng.IntN(len(users)-1)) % len(users)
				a := attempt{
					key:  fmt.Sprintf("kill-%d-%d", w, i),
					body: fmt.Sprintf(`{"from":%q,"to":%q,"currency":"EUR","amount":%d}`, users[from], users[to], 1+rng.IntN(1000)),
				}
				status, reply, err := post(first.url, a.key, a.body)
				if err == nil {
					a.answered, a.status, a.reply = true, status, reply
					if status == http.StatusCreated {
						acked.Add(1)
					}
				}
				results[w] = append(results[w], a)
				if err != nil {
					return // the service is gone
				}
			}
		})
	}

	deadline := time.Now().Add(120 * time.Second)
	for acked.Load() < ackedBeforeKill && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if acked.Load() < ackedBeforeKill {
		stopping.Store(true)
		wg.Wait()
		t.Fatalf("only %d transfers acknowledged in 120 s; stderr: %s", acked.Load(), first.stderr)
	}
	if backend {
		terminateBackends(t, b)
		// Carry on: the service must recover with new connections.
		for acked.Load() < 2*ackedBeforeKill && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		stopping.Store(true)
		wg.Wait()
		if acked.Load() < 2*ackedBeforeKill {
			t.Fatalf("only %d transfers acknowledged after the backends were terminated; stderr: %s", acked.Load(), first.stderr)
		}
	} else {
		kill(first) // SIGKILL while the workers are still sending
		stopping.Store(true)
		wg.Wait()
	}

	var all []*attempt
	for w := range results {
		for i := range results[w] {
			all = append(all, &results[w][i])
		}
	}
	var unanswered []*attempt
	for _, a := range all {
		switch {
		case !a.answered:
			unanswered = append(unanswered, a)
		case backend && a.status == http.StatusInternalServerError:
			// The database went away under it: not acknowledged, retried below.
			unanswered = append(unanswered, a)
			a.answered = false
		case a.status != http.StatusCreated:
			t.Fatalf("%s: answered %d %s before the kill", a.key, a.status, a.reply)
		}
	}
	if backend && len(unanswered) == 0 {
		t.Log("no transfer was in flight when the backends were terminated")
	}

	db := b.DB
	storedBefore := map[string]bool{}
	for _, a := range unanswered {
		var n int
		if err := b.QueryRow(`SELECT count(*) FROM transfers WHERE idempotency_key = ?`, a.key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		storedBefore[a.key] = n == 1
	}

	second := first
	if !backend {
		second = startService(t, b.DSN)
	}
	// Retry every transfer whose answer was lost (same key, same body), and
	// every acknowledged one: the latter must replay the same bytes.
	for _, a := range all {
		status, reply, err := post(second.url, a.key, a.body)
		if err != nil {
			t.Fatalf("retry %s: %v", a.key, err)
		}
		if status != http.StatusCreated {
			t.Fatalf("retry %s: %d %s", a.key, status, reply)
		}
		if a.answered && reply != a.reply {
			t.Errorf("retry of acknowledged %s\n got: %s\nwant: %s", a.key, reply, a.reply)
		}
		a.answered, a.status, a.reply = true, status, reply
	}
	t.Logf("%s: %d transfers sent, %d acknowledged, %d unanswered (%d of them committed before the kill)", kind,
		len(all), len(all)-len(unanswered), len(unanswered), countTrue(storedBefore))

	// The restarted read model converges on the ledger.
	var maxSeq int64
	if err := db.QueryRow(`SELECT COALESCE(MAX(seq), 0) FROM transactions`).Scan(&maxSeq); err != nil {
		t.Fatal(err)
	}
	waitHealthSeq(t, second.url, maxSeq)
	for _, u := range users {
		var settled, pending int64
		if err := b.QueryRow(`SELECT settled, pending FROM accounts WHERE user_id = ? AND currency = 'EUR'`, u).Scan(&settled, &pending); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`{"user_id":%q,"seq":%d,"balances":[{"currency":"EUR","settled":%d,"pending":%d,"available":%d}]}`, u, maxSeq, settled, pending, settled)
		if got := getBody(t, second.url+"/v1/users/"+u+"/balance"); got != want {
			t.Errorf("balance after restart\n got: %s\nwant: %s", got, want)
		}
	}
	if code := second.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM; stderr: %s", code, second.stderr)
	}

	// Every transfer exactly once: one stored key each, two legs each.
	var transfers, legs, badLegs int
	must(t, db.QueryRow(`SELECT count(*) FROM transfers`).Scan(&transfers))
	must(t, db.QueryRow(`SELECT count(*) FROM transactions WHERE category = 'transfer'`).Scan(&legs))
	must(t, db.QueryRow(`SELECT count(*) FROM (SELECT transfer_id FROM transactions WHERE category = 'transfer'
		GROUP BY transfer_id HAVING count(*) != 2 OR sum(amount) != 0) AS bad`).Scan(&badLegs))
	if transfers != len(all) || legs != 2*len(all) || badLegs != 0 {
		t.Errorf("%d attempts: %d stored transfers, %d legs, %d transfer ids without exactly two balanced legs",
			len(all), transfers, legs, badLegs)
	}
	for _, a := range all {
		var answer struct {
			TransferID string `json:"transfer_id"`
			Seq        int64  `json:"seq"`
		}
		must(t, json.Unmarshal([]byte(a.reply), &answer))
		var n int
		must(t, b.QueryRow(`SELECT count(*) FROM transactions WHERE transfer_id = ? AND seq IN (?, ?)`,
			answer.TransferID, answer.Seq-1, answer.Seq).Scan(&n))
		if n != 2 {
			t.Errorf("%s: transfer %s (seq %d) has %d legs in the ledger", a.key, answer.TransferID, answer.Seq, n)
		}
	}
	if err := testledger.CheckInvariant(db); err != nil {
		t.Error(err)
	}
}

// terminateBackends ends every PostgreSQL backend of the service (its
// application_name) in the test's database, as an operator's
// pg_terminate_backend or a backend crash would.
func terminateBackends(t *testing.T, b *testledger.Builder) {
	t.Helper()
	var n int
	err := b.DB.QueryRow(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'payments-go' AND datname = current_database()`).Scan(&n)
	if err != nil || n == 0 {
		t.Fatalf("terminated %d backends of the service (%v)", n, err)
	}
	t.Logf("terminated %d backends of the service", n)
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitHealthSeq(t *testing.T, url string, seq int64) {
	t.Helper()
	want := fmt.Sprintf(`{"status":"ok","seq":%d}`, seq)
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := getBody(t, url+"/healthz")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz %s, want %s", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSIGINTExitsZero(t *testing.T) {
	b := testledger.New(t)
	s := startService(t, b.Path)
	if got := getBody(t, s.url+"/healthz"); got != `{"status":"ok","seq":0}` {
		t.Errorf("healthz on an empty ledger: %s", got)
	}
	if code := s.stop(syscall.SIGINT); code != 0 {
		t.Errorf("exit code %d after SIGINT; stderr: %s", code, s.stderr)
	}
}

func TestBadStartsPrintOneLineAndExit2(t *testing.T) {
	dir := t.TempDir()
	notLedger := filepath.Join(dir, "empty.db")
	must(t, os.WriteFile(notLedger, nil, 0o644))
	cases := [][]string{
		{"--db", filepath.Join(dir, "missing.db"), "--port", "0"},
		{"--db", notLedger, "--port", "0"},
		{"--db", dir, "--port", "0"},
		{"--port", "0"},
		{"--db", notLedger},
		{"--db", notLedger, "--port", "70000"},
		{"--db", notLedger, "--port", "x"},
		{"--nope"},
		{"--db", notLedger, "--port", "0", "extra"},
		{"--db", notLedger, "--port", "0", "--pprof", "0.0.0.0:6060"},
		{"--db", notLedger, "--port", "0", "--pprof", "example.com:6060"},
		{"--db", notLedger, "--port", "0", "--pprof", "6060"},
		{"--db", notLedger, "--port", "0", "--engine", "cgo"},
		{"--db", notLedger, "--port", "0", "--engine", "rust"}, // not a ledger: refused with the Rust engine too
	}
	for _, args := range cases {
		cmd := exec.Command(binary(t), args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.HasPrefix(lines[0], "payments-go: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); !os.IsNotExist(err) {
		t.Errorf("a missing ledger was created: %v", err)
	}
}

var pprofLine = regexp.MustCompile(`^pprof on (http://127\.0\.0\.1:\d+)/debug/pprof/$`)

// TestPprofServesACPUProfileOnItsOwnListener takes a real one-second CPU
// profile while requests hit the API, checks it is a gzipped pprof protobuf
// (decoded here with compress/gzip, not by the code that wrote it), that the
// API listener does not serve the profiler, and that the process still exits
// 0 on SIGTERM.
func TestPprofServesACPUProfileOnItsOwnListener(t *testing.T) {
	b := testledger.New(t)
	s := startService(t, b.Path, "--pprof", "127.0.0.1:0")
	var purl string
	select {
	case line := <-s.lines:
		m := pprofLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("second line %q, want the pprof address", line)
		}
		purl = m[1]
	case <-time.After(60 * time.Second):
		t.Fatalf("no pprof line after 60 s; stderr: %s", s.stderr)
	}
	if purl == s.url {
		t.Fatalf("pprof shares the API listener %s", s.url)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			if resp, err := client.Get(s.url + "/healthz"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	resp, err := client.Get(purl + "/debug/pprof/profile?seconds=1")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-done
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("profile: status %d, err %v, body %.200q", resp.StatusCode, err, raw)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("profile is not gzip: %v (%d bytes)", err, len(raw))
	}
	pb, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("profile gzip stream: %v", err)
	}
	// The string table of a CPU profile names its sample and period types.
	for _, want := range []string{"samples", "cpu", "nanoseconds"} {
		if !bytes.Contains(pb, []byte(want)) {
			t.Errorf("profile (%d bytes) lacks %q", len(pb), want)
		}
	}
	if got := getBody(t, s.url+"/debug/pprof/"); got != `{"error":{"code":"not_found","message":"no such endpoint"}}` {
		t.Errorf("API listener answered /debug/pprof/ with %q", got)
	}
	if code := s.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM; stderr: %s", code, s.stderr)
	}
}

// lockLedger holds the ledger exclusively through db (one connection), as a
// long write by another process would: the service's first query waits in
// SQLite's busy handler, so it stays in the middle of loading.
func lockLedger(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, stmt := range []string{`PRAGMA locking_mode=EXCLUSIVE`, `BEGIN EXCLUSIVE`, `COMMIT`} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
}

// waitOpenFile waits until process pid has path open: the service has begun
// loading (it opens the ledger only after installing its signal handlers).
func waitOpenFile(t *testing.T, pid int, path string) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("no %s: %v", dir, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == path {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d never opened %s", pid, path)
}

// TestSIGTERMWhileLoadingExitsZero: a SIGTERM while the read model loaded
// made the service exit 2 ("context canceled"), the code for bad input.
func TestSIGTERMWhileLoadingExitsZero(t *testing.T) {
	b := testledger.New(t)
	b.User("u0000000000a1", "EUR")
	b.Txn(1782777600, "u0000000000a1", "EUR", 100, "settled", "topup", "ext:topup")
	lockLedger(t, b.DB)

	cmd := exec.Command(binary(t), "--db", b.Path, "--port", "0")
	stderr, stdout := &syncBuffer{}, &syncBuffer{}
	cmd.Stderr, cmd.Stdout = stderr, stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	waitOpenFile(t, cmd.Process.Pid, b.Path)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit 60 s after SIGTERM; stderr: %s", stderr)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM while loading, want 0; stderr: %s", code, stderr)
	}
	if got := stderr.String(); got != "payments-go: stopped by a signal while loading the ledger\n" {
		t.Errorf("stderr %q", got)
	}
	if got := stdout.String(); got != "" {
		t.Errorf("printed %q though it never became ready", got)
	}
}

// exchange sends raw on a new connection and reads one answer (no body after
// a HEAD).
func exchange(t *testing.T, addr string, raw []byte) (status int, ctype, body string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	// The service may answer and stop reading before all is sent.
	go func() { _, _ = c.Write(raw) }()
	method := http.MethodGet
	if bytes.HasPrefix(bytes.TrimLeft(raw, "\r\n"), []byte("HEAD ")) {
		method = http.MethodHead
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%.80q: %v", raw, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%.80q: body: %v", raw, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestEveryRequestHeadOfTheTableGetsItsAnswer sends each case of
// payments/testdata/request-heads.txt to the real service. net/http answered
// some with text/plain 400, 431 or 505, an empty 417, a 200 to "OPTIONS *",
// and routed "/x#frag" as a path; now the head check answers them first. Both
// engines: with --engine rust the heads that pass reach the Rust core.
func TestEveryRequestHeadOfTheTableGetsItsAnswer(t *testing.T) {
	for _, engine := range []string{"go", "rust"} {
		t.Run(engine, func(t *testing.T) {
			b := testledger.New(t)
			b.User(testheads.ID, "EUR")
			b.Txn(1782777600, testheads.ID, "EUR", 100, "settled", "topup", "ext:topup")
			s := startService(t, b.Path, "--engine", engine)
			addr := strings.TrimPrefix(s.url, "http://")
			checkCodes := map[string]bool{}
			for r := headcheck.InvalidRequest; r <= headcheck.HeadersTooLarge; r++ {
				checkCodes[r.Code()] = true
			}
			for _, c := range testheads.Load(t, testheads.ID) {
				status, ctype, body := exchange(t, addr, c.Raw)
				head := bytes.HasPrefix(bytes.TrimLeft(c.Raw, "\r\n"), []byte("HEAD "))
				switch {
				case ctype != "application/json":
					t.Errorf("line %d: %d with content type %q: %q", c.Line, status, ctype, body)
				case c.Status != 0:
					var want string
					for r := headcheck.InvalidRequest; r <= headcheck.HeadersTooLarge; r++ {
						if r.Code() == c.Code && !head {
							want = r.Body()
						}
					}
					if status != c.Status || body != want {
						t.Errorf("line %d: got %d %q, want %d %s", c.Line, status, body, c.Status, c.Code)
					}
				default:
					var e struct {
						Error struct{ Code string } `json:"error"`
					}
					_ = json.Unmarshal([]byte(body), &e)
					if checkCodes[e.Error.Code] || (!head && !json.Valid([]byte(body))) {
						t.Errorf("line %d: refused a head the table passes: %d %q", c.Line, status, body)
					}
				}
			}
			if code := s.stop(syscall.SIGTERM); code != 0 {
				t.Errorf("exit code %d; stderr: %s", code, s.stderr)
			}
		})
	}
}
