package headcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"scalpel.example/payments-go/internal/testheads"
)

type tableCase = testheads.Case

func table(t testing.TB) []tableCase { return testheads.Load(t, testheads.ID) }

func withoutLeadingEmptyLines(raw []byte) []byte {
	return raw[leadingEmptyLines(raw):]
}

// scriptConn yields the given chunks, one per read, then io.EOF, and keeps
// what is written to it.
type scriptConn struct {
	net.Conn // nil: only Read, Write and Close are used
	chunks   [][]byte
	written  bytes.Buffer
	closed   bool
}

func (s *scriptConn) Read(p []byte) (int, error) {
	for len(s.chunks) > 0 && len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:] // an empty read is no chunk
	}
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.chunks[0])
	s.chunks[0] = s.chunks[0][n:]
	return n, nil
}

func (s *scriptConn) Write(p []byte) (int, error)      { return s.written.Write(p) }
func (s *scriptConn) Close() error                     { s.closed = true; return nil }
func (s *scriptConn) SetWriteDeadline(time.Time) error { return nil }
func (s *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (s *scriptConn) SetDeadline(time.Time) error      { return nil }
func (s *scriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *scriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }

func readAll(c net.Conn, size int) []byte {
	var seen []byte
	buf := make([]byte, size)
	for {
		n, err := c.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			return seen
		}
	}
}

// throughConn is what net/http would read through a checked conn fed chunks,
// with reads of at most readSize bytes, and what is written when it closes.
func throughConn(chunks [][]byte, readSize int) (passed, answer []byte) {
	cp := make([][]byte, len(chunks))
	for i, c := range chunks {
		cp[i] = append([]byte(nil), c...)
	}
	s := &scriptConn{chunks: cp}
	c := &conn{Conn: s}
	passed = readAll(c, readSize)
	c.Close()
	return passed, s.written.Bytes()
}

func chunked(raw []byte, size int) [][]byte {
	var out [][]byte
	for len(raw) > size {
		out = append(out, raw[:size])
		raw = raw[size:]
	}
	return append(out, raw)
}

// verdict is the one outcome of a case, whatever the chunking.
func verdict(t *testing.T, c tableCase) (passed, answer []byte) {
	passed, answer = throughConn([][]byte{c.Raw}, 8192)
	type split struct {
		chunks [][]byte
		reads  []int
	}
	var splits []split
	if len(c.Raw) <= 400 {
		for at := 1; at < len(c.Raw); at++ {
			splits = append(splits, split{[][]byte{c.Raw[:at], c.Raw[at:]}, []int{8192}})
		}
		splits = append(splits, split{chunked(c.Raw, 1), []int{8192, 5}})
	}
	for _, size := range []int{7, 1000, 4096, 65536} {
		splits = append(splits, split{chunked(c.Raw, size), []int{8192, 5}})
	}
	for _, s := range splits {
		for _, size := range s.reads {
			p, a := throughConn(s.chunks, size)
			if !bytes.Equal(p, passed) || !bytes.Equal(a, answer) {
				t.Fatalf("line %d: chunks of %d.., reads of %d: a different verdict", c.Line, len(s.chunks[0]), size)
			}
		}
	}
	return passed, answer
}

func TestEveryCaseOfTheTableGetsItsAnswerHoweverTheBytesArrive(t *testing.T) {
	for _, c := range table(t) {
		passed, answer := verdict(t, c)
		if c.Status == 0 {
			if !bytes.Equal(passed, withoutLeadingEmptyLines(c.Raw)) || len(answer) != 0 {
				t.Errorf("line %d: passed %d of %d bytes, answered %q", c.Line, len(passed), len(c.Raw), answer)
			}
			continue
		}
		head := fmt.Sprintf("HTTP/1.1 %d ", c.Status)
		body := `{"error":{"code":"` + c.Code + `","message":"`
		headRequest := bytes.HasPrefix(c.Raw, []byte("HEAD "))
		if len(passed) != 0 || !bytes.HasPrefix(answer, []byte(head)) || bytes.Contains(answer, []byte(body)) == headRequest {
			t.Errorf("line %d: want %d %s; passed %d bytes, answered %q", c.Line, c.Status, c.Code, len(passed), answer)
		}
	}
}

func TestARefusalIsJSONWithItsLengthAndClosesTheConnection(t *testing.T) {
	want := "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 115\r\nconnection: close\r\n\r\n" +
		`{"error":{"code":"invalid_target","message":"request target must be a path of URI characters, without a fragment"}}`
	if got := string(InvalidTarget.Response(false)); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := string(TargetTooLong.Response(true)); !strings.HasSuffix(got, "content-length: 90\r\nconnection: close\r\n\r\n") {
		t.Errorf("HEAD answer %q", got)
	}
	for r := InvalidRequest; r <= HeadersTooLarge; r++ {
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(r.Response(false))), nil)
		if err != nil {
			t.Fatalf("%s: %v", r.Code(), err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != r.Status() || string(body) != r.Body() || resp.Header.Get("Content-Type") != "application/json" || !resp.Close {
			t.Errorf("%s: %d %v %q", r.Code(), resp.StatusCode, resp.Header, body)
		}
	}
}

func TestPipelinedRequestsBeforeARefusedHeadArePassedAndNothingAfterIt(t *testing.T) {
	ok := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	withBody := []byte("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\nGET /#x HTTP")
	bad := []byte("GET /#x HTTP/1.1\r\nHost: x\r\n\r\n")
	stream := bytes.Join([][]byte{ok, withBody, ok, bad, ok}, nil)
	for _, size := range []int{len(stream), 1, 3, 40} {
		passed, answer := throughConn(chunked(stream, size), 8192)
		if want := bytes.Join([][]byte{ok, withBody, ok}, nil); !bytes.Equal(passed, want) {
			t.Errorf("chunks of %d: passed %q", size, passed)
		}
		if !bytes.HasPrefix(answer, []byte("HTTP/1.1 400 Bad Request\r\n")) || !bytes.HasSuffix(answer, []byte(InvalidTarget.Body())) {
			t.Errorf("chunks of %d: answer %q", size, answer)
		}
	}
}

func TestNoAnswerWhenNetHTTPStopsReadingBeforeTheRefusedHead(t *testing.T) {
	s := &scriptConn{chunks: [][]byte{[]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /#x HTTP/1.1\r\n\r\n")}}
	c := &conn{Conn: s}
	buf := make([]byte, 8192)
	if n, err := c.Read(buf); n != 34 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	c.Close() // say the first request asked for "Connection: close"
	if s.written.Len() != 0 {
		t.Errorf("answered %q", s.written.Bytes())
	}
}

func TestAClientLeavingMidHeadGetsNoAnswer(t *testing.T) {
	passed, answer := throughConn([][]byte{[]byte("GET /healthz HTTP/1.1\r\nHo")}, 8192)
	if len(passed) != 0 || len(answer) != 0 {
		t.Errorf("passed %q, answered %q", passed, answer)
	}
}

func TestALargeBodyPassesThroughAndTheNextHeadIsChecked(t *testing.T) {
	body := bytes.Repeat([]byte("#"), 200000)
	head := fmt.Sprintf("POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body))
	stream := bytes.Join([][]byte{[]byte(head), body, []byte("GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n")}, nil)
	passed, answer := throughConn(chunked(stream, 9000), 8192)
	if len(passed) != len(head)+len(body) || !bytes.HasPrefix(answer, []byte("HTTP/1.1 400 ")) {
		t.Errorf("passed %d bytes, answered %q", len(passed), answer)
	}
}

// xorshift: a small deterministic generator.
type rng uint64

func (r *rng) below(n int) int {
	*r ^= *r << 13
	*r ^= *r >> 7
	*r ^= *r << 17
	return int(uint64(*r) % uint64(n))
}

func TestMutatedHeadsGetOneVerdictAndNeverPanic(t *testing.T) {
	var seeds [][]byte
	for _, c := range table(t) {
		if len(c.Raw) < 300 {
			seeds = append(seeds, c.Raw)
		}
	}
	alphabet := []byte(" \r\n\t:/?#%@[]HTTP/1.01GETxX-\x00\x80\xff")
	r := rng(0x9e3779b97f4a7c15)
	for range 3000 {
		raw := append([]byte(nil), seeds[r.below(len(seeds))]...)
		for range r.below(4) + 1 {
			at := r.below(len(raw) + 1)
			switch r.below(3) {
			case 0:
				if at < len(raw) {
					raw[at] = alphabet[r.below(len(alphabet))]
				}
			case 1:
				if at < len(raw) {
					raw = append(raw[:at], raw[at+1:]...)
				}
			default:
				raw = append(raw[:at], append([]byte{alphabet[r.below(len(alphabet))]}, raw[at:]...)...)
			}
		}
		wp, wa := throughConn([][]byte{raw}, 8192)
		split := r.below(len(raw) + 1)
		hp, ha := throughConn([][]byte{raw[:split], raw[split:]}, 8192)
		bp, ba := throughConn(chunked(raw, 1), 3)
		if !bytes.Equal(wp, hp) || !bytes.Equal(wp, bp) || !bytes.Equal(wa, ha) || !bytes.Equal(wa, ba) {
			t.Fatalf("%q: a verdict that depends on the chunking", raw)
		}
		if len(wa) != 0 && !bytes.HasPrefix(wa, []byte("HTTP/1.1 4")) {
			t.Fatalf("%q: answer %q", raw, wa)
		}
	}
}

// TestARequestBeforeARefusedHeadIsNotCancelled: net/http watches for a client
// leaving while it serves a request (a pending read); if that read saw the end
// of the stream that the refused head causes, it would cancel the request the
// client is still waiting for.
func TestARequestBeforeARefusedHeadIsNotCancelled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cancelled := make(chan bool, 1)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
				cancelled <- true
			case <-time.After(2 * time.Second):
				cancelled <- false
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"ok":true}`)
		}),
		ConnState: ConnState,
	}
	go func() { _ = srv.Serve(Listener(ln, 5*time.Second)) }()
	t.Cleanup(func() { srv.Close() })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /#x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	first, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(first.Body)
	if first.StatusCode != 200 || string(body) != `{"ok":true}` {
		t.Errorf("first answer %d %q", first.StatusCode, body)
	}
	if <-cancelled {
		t.Error("the request before the refused head was cancelled")
	}
	second, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(second.Body)
	if second.StatusCode != 400 || string(body) != InvalidTarget.Body() {
		t.Errorf("second answer %d %q", second.StatusCode, body)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the connection stayed open: %v", err)
	}
}

// TestAHeadArrivingSlowlyOnAKeptAliveConnectionIsCutOff: net/http starts its
// ReadHeaderTimeout at the first bytes of a head, which the check holds back
// until the head is whole; without a limit of its own, a second head sent a
// byte at a time would have had the whole idle time-out.
func TestAHeadArrivingSlowlyOnAKeptAliveConnectionIsCutOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		ReadHeaderTimeout: 200 * time.Millisecond,
		IdleTimeout:       time.Hour,
		ConnState:         ConnState,
	}
	go func() { _ = srv.Serve(Listener(ln, 200*time.Millisecond)) }()
	t.Cleanup(func() { srv.Close() })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if _, err := io.WriteString(c, "GET /b HTTP/1.1\r\nHo"); err != nil {
		t.Fatal(err)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the unfinished head was not cut off: %v", err)
	}
}
