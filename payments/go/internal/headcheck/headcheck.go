// Package headcheck judges every request head before net/http parses it
// (SPEC "Request heads"), so that net/http's own limits and error answers
// (text/plain 400, 431 and 505, an empty 417, a 200 to "OPTIONS *") are never
// reached and both payments services answer the same JSON for the same bytes.
// The Rust service runs the same rules (payments/service/src/head.rs); both are
// tested against one table, payments/testdata/request-heads.txt.
//
// Check is the byte-level state machine (no I/O); Listener wraps accepted
// connections with it. A head that breaks a rule ends the connection: the
// requests before it are passed on and answered, net/http then reads the end of
// the stream, and the JSON error is written when it closes the connection.
// Install ConnState on the http.Server too (see there).
package headcheck

import (
	"bytes"
	"fmt"
	"strconv"
)

const (
	// MaxHead is the longest request head: the request line, the header lines
	// and the empty line (and any empty lines before the request line).
	MaxHead = 65536
	// MaxFields is the most header lines in one head.
	MaxFields = 100
	// MaxTarget is the longest request target.
	MaxTarget = 8192
	maxMethod = 32
)

// Reject is why a head was refused: one row of the SPEC's table.
type Reject int

// The refusals, in the order of the SPEC's table.
const (
	InvalidRequest    Reject = iota + 1 // 400: the request line or a header line is not HTTP/1.1
	InvalidTarget                       // 400: not a path (or http URL) of URI characters
	LengthRequired                      // 411: Transfer-Encoding instead of Content-Length
	TargetTooLong                       // 414
	ExpectationFailed                   // 417: an Expect other than 100-continue
	HeadersTooLarge                     // 431
)

// Status is the HTTP status code.
func (r Reject) Status() int {
	return [...]int{0, 400, 400, 411, 414, 417, 431}[r]
}

// Code is the code of the JSON body.
func (r Reject) Code() string {
	return [...]string{"", "invalid_request", "invalid_target", "length_required",
		"target_too_long", "expectation_failed", "headers_too_large"}[r]
}

func (r Reject) reason() string {
	return [...]string{"", "Bad Request", "Bad Request", "Length Required", "URI Too Long",
		"Expectation Failed", "Request Header Fields Too Large"}[r]
}

// Body is the canonical JSON body.
func (r Reject) Body() string {
	message := [...]string{"",
		"malformed request line or header",
		"request target must be a path of URI characters, without a fragment",
		"a request body needs Content-Length, not Transfer-Encoding",
		"request target must be at most 8192 bytes",
		"the only expectation supported is 100-continue",
		"request head must be at most 65536 bytes and 100 header fields",
	}[r]
	return `{"error":{"code":"` + r.Code() + `","message":"` + message + `"}}`
}

// Response is the whole answer; the body is left out after a HEAD request line.
func (r Reject) Response(headRequest bool) []byte {
	body := r.Body()
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n",
		r.Status(), r.reason(), len(body))
	if !headRequest {
		out = append(out, body...)
	}
	return out
}

// Refusal is a refused head and whether its request line was a HEAD.
type Refusal struct {
	Reject      Reject
	HeadRequest bool
}

type stepKind int

const (
	stepPass     stepKind = iota // hand these bytes on: a whole checked head, or body bytes
	stepDrop                     // throw these bytes away: empty lines before a request line
	stepNeedMore                 // the bytes start a head: call again with them and more
	stepRefuse                   // the head at the front is refused; nothing after it is read
)

type step struct {
	kind    stepKind
	n       int
	refusal Refusal
}

type version int

const (
	noVersion version = iota
	http10
	http11
)

// fields is what the header lines of one head said.
type fields struct {
	count, hosts, contentLengths int
	badHost, transferEncoding    bool
	contentLength                int64 // -1: the last Content-Length was malformed
	badExpect                    bool
}

// Check is the state machine. Feed it the unread bytes of a connection in
// order with next: each call starts where the bytes of the previous pass or
// drop ended, or, after needMore, at the same place with more bytes.
//
// Lines are judged in order as they complete (the request line, then each
// header line, then the rules about the whole head), and an unfinished request
// line as soon as its method or target length decides it: so the answer never
// depends on how the bytes were split into reads.
type Check struct {
	body     int64 // body bytes still to pass before the next head
	dropped  int   // empty lines dropped before the request line (they count toward MaxHead)
	at       int   // where the next line not yet judged starts, from the start of the head
	searched int   // how far the unfinished line at `at` was searched for its end
	version  version
	fields   fields
}

func (c *Check) next(data []byte) step {
	if c.body > 0 {
		n := int(min(int64(len(data)), c.body))
		c.body -= int64(n)
		return step{kind: stepPass, n: n}
	}
	if c.at == 0 {
		// Empty lines before a request line (RFC 9112 section 2.2) are
		// dropped, not passed: the two HTTP libraries do not agree on them.
		if empty := leadingEmptyLines(data); empty > 0 {
			c.dropped += empty
			if c.dropped > MaxHead {
				return step{kind: stepRefuse, refusal: Refusal{Reject: HeadersTooLarge}}
			}
			return step{kind: stepDrop, n: empty}
		}
		if len(data) == 1 && data[0] == '\r' {
			return step{kind: stepNeedMore}
		}
	}
	headRequest := bytes.HasPrefix(data, []byte("HEAD "))
	n, body, reject := c.judge(data)
	switch {
	case reject != 0:
		return step{kind: stepRefuse, refusal: Refusal{Reject: reject, HeadRequest: headRequest}}
	case n == 0:
		return step{kind: stepNeedMore}
	}
	*c = Check{body: body}
	return step{kind: stepPass, n: n}
}

// judge judges the lines of data not judged yet: the head's length and body
// length for a whole good head, 0 for a good start of one, or a refusal.
func (c *Check) judge(data []byte) (int, int64, Reject) {
	limit := MaxHead - c.dropped
	for {
		from := max(c.searched, c.at)
		lf := bytes.IndexByte(data[from:], '\n')
		if lf < 0 {
			c.searched = len(data)
			break
		}
		end := from + lf + 1
		if end > limit {
			return 0, 0, c.pastLimit(data[:limit])
		}
		line := stripCR(data[c.at : end-1])
		c.at = end
		if c.version == noVersion {
			v, reject := checkRequestLine(line)
			if reject != 0 {
				return 0, 0, reject
			}
			c.version = v
			continue
		}
		if len(line) == 0 {
			body, reject := c.fields.judge(c.version)
			if reject != 0 {
				return 0, 0, reject
			}
			return end, body, 0
		}
		c.fields.count++
		if c.fields.count > MaxFields {
			return 0, 0, HeadersTooLarge
		}
		if !c.fields.check(line) {
			return 0, 0, InvalidRequest
		}
	}
	if len(data) > limit {
		return 0, 0, c.pastLimit(data[:limit])
	}
	// An unfinished request line can already be judged on its method and target.
	if c.version == noVersion {
		return 0, 0, requestLinePrefix(data)
	}
	return 0, 0, 0
}

// pastLimit is the answer for a head that goes past MaxHead, head being its
// first MaxHead bytes: its request line decides if it is unfinished, otherwise
// 431 (every whole line before the limit was judged good).
func (c *Check) pastLimit(head []byte) Reject {
	if c.version != noVersion {
		return HeadersTooLarge
	}
	if r := requestLinePrefix(head); r != 0 {
		return r
	}
	return InvalidRequest
}

// check judges a header line, `name: value` with a token name and a value of
// visible ASCII, spaces and tabs, and records what the rules about the whole
// head need. false: malformed.
func (f *fields) check(line []byte) bool {
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return false
	}
	name, value := line[:colon], line[colon+1:]
	if len(name) == 0 || !all(name, isTchar) {
		return false
	}
	if !all(value, func(b byte) bool { return b == '\t' || b == ' ' || (b >= 0x21 && b <= 0x7e) }) {
		return false
	}
	value = bytes.Trim(value, " \t")
	switch {
	case bytes.EqualFold(name, []byte("host")):
		f.hosts++
		f.badHost = f.badHost || !all(value, func(b byte) bool {
			return isAlnum(b) || bytes.IndexByte([]byte("-._~:[]"), b) >= 0
		})
	case bytes.EqualFold(name, []byte("transfer-encoding")):
		f.transferEncoding = true
	case bytes.EqualFold(name, []byte("content-length")):
		f.contentLengths++
		f.contentLength = -1
		if len(value) > 0 && len(value) <= 18 && all(value, isDigit) {
			f.contentLength, _ = strconv.ParseInt(string(value), 10, 64)
		}
	case bytes.EqualFold(name, []byte("expect")):
		f.badExpect = f.badExpect || !bytes.EqualFold(value, []byte("100-continue"))
	}
	return true
}

// judge applies the rules about the whole head, in order, and returns the
// body length if it passes.
func (f *fields) judge(v version) (int64, Reject) {
	hostsOK := f.hosts == 1 || (v == http10 && f.hosts == 0)
	if !hostsOK || f.badHost {
		return 0, InvalidRequest
	}
	if f.transferEncoding {
		return 0, LengthRequired
	}
	var body int64
	switch {
	case f.contentLengths == 1 && f.contentLength >= 0:
		body = f.contentLength
	case f.contentLengths != 0:
		return 0, InvalidRequest
	}
	if f.badExpect {
		return 0, ExpectationFailed
	}
	return body, 0
}

// leadingEmptyLines is how many bytes of empty lines (\r\n or \n) open data.
func leadingEmptyLines(data []byte) int {
	i := 0
	for {
		switch {
		case i < len(data) && data[i] == '\n':
			i++
		case i+1 < len(data) && data[i] == '\r' && data[i+1] == '\n':
			i += 2
		default:
			return i
		}
	}
}

func stripCR(line []byte) []byte {
	return bytes.TrimSuffix(line, []byte("\r"))
}

func all(b []byte, ok func(byte) bool) bool {
	for _, c := range b {
		if !ok(c) {
			return false
		}
	}
	return true
}

func isAlnum(b byte) bool { return isDigit(b) || (b|0x20 >= 'a' && b|0x20 <= 'z') }
func isDigit(b byte) bool { return b >= '0' && b <= '9' }
func isHex(b byte) bool   { return isDigit(b) || (b|0x20 >= 'a' && b|0x20 <= 'f') }

// isTchar is RFC 9110 tchar.
func isTchar(b byte) bool { return isAlnum(b) || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), b) >= 0 }

// isURIChar: RFC 3986 unreserved, sub-delims, ':', '@', '/', '?', '%': all
// that Go's and hyper's parsers take as they are.
func isURIChar(b byte) bool {
	return isAlnum(b) || bytes.IndexByte([]byte("-._~!$&'()*+,;=:@/?%"), b) >= 0
}

// requestLinePrefix is what an unfinished (or cut) request line already
// decides: a bad method, or a target past MaxTarget. 0: nothing yet.
func requestLinePrefix(line []byte) Reject {
	head := line[:min(len(line), maxMethod+1)]
	methodEnd := bytes.IndexByte(head, ' ')
	switch {
	case methodEnd < 0 && len(line) > maxMethod:
		return InvalidRequest
	case methodEnd < 0:
		if !all(line, isTchar) {
			return InvalidRequest
		}
		return 0
	case methodEnd == 0 || !all(line[:methodEnd], isTchar):
		return InvalidRequest
	}
	target := line[methodEnd+1:]
	if len(target) <= MaxTarget {
		return 0 // cannot be too long yet (and an unfinished line is judged often)
	}
	if bytes.IndexByte(target[:MaxTarget+1], ' ') < 0 {
		return TargetTooLong
	}
	return 0
}

// checkRequestLine judges `METHOD SP TARGET SP VERSION` in this order: the
// method, the target's length, the version, the target's form.
func checkRequestLine(line []byte) (version, Reject) {
	if r := requestLinePrefix(line); r != 0 {
		return noVersion, r
	}
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 < 0 {
		return noVersion, InvalidRequest
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 < 0 {
		return noVersion, InvalidRequest
	}
	target := rest[:sp2]
	var v version
	switch string(rest[sp2+1:]) {
	case "HTTP/1.1":
		v = http11
	case "HTTP/1.0":
		v = http10
	default:
		return noVersion, InvalidRequest
	}
	if !validTarget(target) {
		return noVersion, InvalidTarget
	}
	return v, 0
}

// validTarget: origin-form (/path?query) or absolute-form
// (http://host[:port]/path?query).
func validTarget(target []byte) bool {
	origin := target
	for _, scheme := range []string{"http://", "https://"} {
		if rest, ok := bytes.CutPrefix(target, []byte(scheme)); ok {
			slash := bytes.IndexByte(rest, '/')
			if slash < 0 || !validAuthority(rest[:slash]) {
				return false
			}
			origin = rest[slash:]
			break
		}
	}
	if len(origin) == 0 || origin[0] != '/' || !all(origin, isURIChar) {
		return false
	}
	// net/http refuses a malformed escape in the path; in the query, SPEC's
	// parameter rules handle it (the pair is ignored).
	path, _, _ := bytes.Cut(origin, []byte("?"))
	for i, b := range path {
		if b == '%' && (i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2])) {
			return false
		}
	}
	return true
}

// validAuthority: host[:port], the host of letters, digits, '-' and '.', the
// port 1 to 5 digits up to 65535.
func validAuthority(authority []byte) bool {
	host, port, hasPort := bytes.Cut(authority, []byte(":"))
	if len(host) == 0 || !all(host, func(b byte) bool { return isAlnum(b) || b == '-' || b == '.' }) {
		return false
	}
	if !hasPort {
		return true
	}
	if len(port) < 1 || len(port) > 5 || !all(port, isDigit) {
		return false
	}
	n, err := strconv.Atoi(string(port))
	return err == nil && n <= 65535
}

// sift runs c over data in place: the bytes to pass are moved to the front.
// It returns how many there are, where the unfinished head left over starts
// (len(data) if none), and the refusal that ended the stream, if any.
func sift(c *Check, data []byte) (pass, rest int, refusal *Refusal) {
	at := 0
	for at < len(data) {
		s := c.next(data[at:])
		switch s.kind {
		case stepPass:
			if pass != at {
				copy(data[pass:], data[at:at+s.n])
			}
			pass += s.n
			at += s.n
		case stepDrop:
			at += s.n
		case stepNeedMore:
			return pass, at, nil
		case stepRefuse:
			r := s.refusal
			return pass, len(data), &r
		}
	}
	return pass, at, nil
}
