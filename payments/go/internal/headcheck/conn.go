package headcheck

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// answerTimeout bounds writing the answer to a refused head.
	answerTimeout = 5 * time.Second
	// linger and lingerBytes bound the reading before a refused connection closes.
	linger      = 2 * time.Second
	lingerBytes = 1 << 20
)

// Listener returns l with every accepted connection's incoming bytes checked
// before net/http reads them. headTimeout bounds how long a head may take to
// arrive once its first bytes are in: net/http's ReadHeaderTimeout only starts
// when it sees the first bytes of a head, which the check holds back until the
// head is whole, so pass the same value.
func Listener(l net.Listener, headTimeout time.Duration) net.Listener {
	return listener{l, headTimeout}
}

type listener struct {
	net.Listener
	headTimeout time.Duration
}

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: c, headTimeout: l.headTimeout}, nil
}

// ConnState must be the http.Server's ConnState (or be called from it). While
// a request is served, net/http keeps a read pending only to notice a client
// that leaves; after a refused head that read must not see the end of the
// stream, or net/http would cancel the request being answered.
func ConnState(c net.Conn, state http.ConnState) {
	if hc, ok := c.(*conn); ok {
		hc.active.Store(state == http.StateActive)
	}
}

// conn is a connection whose incoming bytes pass through a Check.
type conn struct {
	net.Conn
	check   Check
	ready   []byte // checked bytes not yet handed on
	partial []byte // the start of a head still arriving
	readErr error  // an error that came with bytes, returned on the next read
	active  atomic.Bool

	headTimeout time.Duration
	dmu         sync.Mutex
	deadline    time.Time // the read deadline net/http asked for
	headBy      time.Time // zero, or when the unfinished head must be whole

	mu      sync.Mutex
	answer  []byte // the answer to a refused head
	ended   bool   // net/http was told the stream ended: it read up to the refused head
	written bool
}

func (c *conn) refused() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answer != nil
}

func (c *conn) end() {
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
}

func (c *conn) refuse(r *Refusal) {
	if r == nil {
		return
	}
	c.mu.Lock()
	c.answer = r.Reject.Response(r.HeadRequest)
	c.mu.Unlock()
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(c.ready) > 0 {
			n := copy(p, c.ready)
			c.ready = c.ready[n:]
			return n, nil
		}
		if c.readErr != nil {
			err := c.readErr
			c.readErr = nil
			if errors.Is(err, io.EOF) {
				c.partial = nil
				c.end()
			}
			return 0, err
		}
		if c.refused() {
			if c.active.Load() {
				return c.holdWhileActive()
			}
			c.end()
			return 0, io.EOF
		}
		c.limitHead()
		// Read through p: the usual whole heads are checked where net/http
		// wants them; a head arriving in pieces is gathered in c.partial.
		n, err := c.Conn.Read(p)
		if n > 0 {
			var pass, rest int
			var refusal *Refusal
			if len(c.partial) == 0 {
				pass, rest, refusal = sift(&c.check, p[:n])
				c.partial = append(c.partial, p[rest:n]...)
			} else {
				c.partial = append(c.partial, p[:n]...)
				pass, rest, refusal = sift(&c.check, c.partial)
				c.ready = append(c.ready[:0], c.partial[:pass]...)
				c.partial = append(c.partial[:0], c.partial[rest:]...)
				if len(c.partial) == 0 && cap(c.partial) > 8192 {
					c.partial = nil // a long head came and went
				}
				pass = 0
			}
			c.refuse(refusal)
			c.readErr = err
			if pass > 0 {
				return pass, nil
			}
			continue
		}
		if errors.Is(err, io.EOF) {
			// The client left, perhaps mid-head: that head gets no answer (SPEC).
			c.partial = nil
			c.end()
		}
		if err == nil {
			continue
		}
		return 0, err
	}
}

// limitHead keeps an unfinished head to headTimeout from when net/http first
// waits for it (not while a request is served: the pending read then only
// watches for a client leaving).
func (c *conn) limitHead() {
	var by time.Time
	if len(c.partial) > 0 && c.headTimeout > 0 && !c.active.Load() {
		by = time.Now().Add(c.headTimeout)
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	if by.IsZero() == c.headBy.IsZero() {
		return // no change: an unfinished head keeps its first limit
	}
	c.headBy = by
	_ = c.Conn.SetReadDeadline(c.readDeadline())
}

// readDeadline is the earlier of net/http's deadline and the head's. Call
// with dmu held.
func (c *conn) readDeadline() time.Time {
	if c.headBy.IsZero() || (!c.deadline.IsZero() && c.deadline.Before(c.headBy)) {
		return c.deadline
	}
	return c.headBy
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.deadline = t
	return c.Conn.SetReadDeadline(c.readDeadline())
}

func (c *conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// holdWhileActive answers net/http's watch for a leaving client while a
// request before the refused head is served: it waits as a read from the
// client would, until net/http calls the watch off (a read deadline in the
// past) or the client really leaves. Bytes after the refused head are
// discarded.
func (c *conn) holdWhileActive() (int, error) {
	var scratch [512]byte
	for {
		if _, err := c.Conn.Read(scratch[:]); err != nil {
			if errors.Is(err, io.EOF) {
				c.end()
			}
			return 0, err
		}
	}
}

// sendAnswer writes the answer to a refused head once net/http has read up to
// it (not when it stopped earlier, say after a "Connection: close"), then
// lingers: the client may still be sending (the rest of a 100 KB target), and
// closing on unread bytes would reset the connection and could destroy the
// answer before the client reads it.
func (c *conn) sendAnswer() {
	c.mu.Lock()
	send := c.ended && c.answer != nil && !c.written
	c.written = c.written || send
	answer := c.answer
	c.mu.Unlock()
	if !send {
		return
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(answerTimeout))
	if _, err := c.Conn.Write(answer); err != nil {
		return
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.Conn.SetReadDeadline(time.Now().Add(linger))
	_, _ = io.CopyN(io.Discard, c.Conn, lingerBytes)
}

func (c *conn) Close() error {
	c.sendAnswer()
	return c.Conn.Close()
}

// CloseWrite keeps net/http's half-close before a lingering close working.
func (c *conn) CloseWrite() error {
	c.sendAnswer()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
