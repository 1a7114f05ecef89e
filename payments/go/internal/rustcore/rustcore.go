// Package rustcore runs the Rust read model of the payments example inside
// this process through cgo: payments/ffi, a static library built by cargo,
// whose C declarations are payments/ffi/include/payments_ffi.h. It is tier 3
// of the ladder (`payments-go --engine rust`): GET balance and stats are
// answered by the same Rust code as the separate Rust service (tier 4), with
// Go's HTTP layer in front of it.
//
// The Rust side keeps its own read model, fed by the Go read model with every
// row Go applies (readmodel.Mirror), so both stand at the same seq and a
// request carries only its method, raw path and raw query across; the answer
// comes back as a status and a body in Rust's memory, written out and then
// freed by Rust. payments/SPEC.md ("The Go service's Rust engine") says why
// this shape and what a call costs.
//
// Linking: the library is found through the linker's search path, so a build
// or test needs CGO_LDFLAGS=-L<cargo target>/release (scripts/build-go.sh and
// scripts/test.sh set it; `cargo build --release -p payments-ffi` makes it).
package rustcore

/*
#cgo CFLAGS: -I${SRCDIR}/../../../ffi/include
#cgo LDFLAGS: -lpayments_ffi -lgcc_s -lutil -lrt -lpthread -lm -ldl
// The pointers passed are read during the call only, and Rust never calls back
// into Go: the cheaper cgo call (Go 1.24), and no escape of the arguments.
#cgo noescape payments_engine_add_users
#cgo nocallback payments_engine_add_users
#cgo noescape payments_engine_add_accounts
#cgo nocallback payments_engine_add_accounts
#cgo noescape payments_engine_apply
#cgo nocallback payments_engine_apply
#cgo nocallback payments_engine_publish
#cgo nocallback payments_engine_seq
#cgo noescape payments_engine_respond
#cgo nocallback payments_engine_respond
#cgo nocallback payments_reply_free
#cgo noescape payments_test_panic
#cgo nocallback payments_test_panic
#cgo nocallback payments_abi_version
#include "payments_ffi.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// flushRows is how many packed rows Apply collects before handing them over
// in one call (the tail's batch size).
const flushRows = 10000

// LibrarySHA256 is the SHA-256 of the libpayments_ffi.a linked into this
// binary, stamped by scripts/build-go.sh (-ldflags -X); empty in a plain go
// build. Stamping it also makes Go relink when only the library changed (Go
// does not hash a C library's contents into its build cache).
var LibrarySHA256 string

// ErrPanicked reports a Rust panic caught at the boundary: the request gets a
// 500, the process goes on.
var ErrPanicked = errors.New("the Rust engine panicked (caught at the boundary)")

// Engine is one Rust read model. Respond is safe for concurrent use, also
// while another goroutine feeds the engine; the feeding methods (AddUser,
// AddAccount, Apply, Publish) are for one goroutine at a time, the Go read
// model's tailer.
type Engine struct {
	ptr *C.PaymentsEngine

	// Feeding buffers, packed as payments/ffi/src/batch.rs reads them.
	mu       sync.Mutex
	users    []byte
	accounts []byte
	rows     []byte
	nrows    int

	// broken holds the first feeding failure: from then on every answer is a
	// 500, never one from a read model that missed rows (fail closed).
	broken atomic.Pointer[error]
}

// ABIVersion is the ABI version of the library linked in: one C call that
// does nothing else, so it also measures what a cgo call costs by itself.
func ABIVersion() uint32 {
	return uint32(C.payments_abi_version())
}

// New returns an engine over an empty ledger. It fails if the library linked
// in was built from another version of the header.
func New() (*Engine, error) {
	if v := ABIVersion(); v != C.PAYMENTS_ABI_VERSION {
		return nil, fmt.Errorf("payments_ffi: library ABI %d, header ABI %d: rebuild with ./run build", v, C.PAYMENTS_ABI_VERSION)
	}
	ptr := C.payments_engine_new()
	if ptr == nil {
		return nil, ErrPanicked
	}
	return &Engine{ptr: ptr}, nil
}

// Close frees the engine. No other method may run during or after it.
func (e *Engine) Close() {
	C.payments_engine_free(e.ptr)
	e.ptr = nil
}

func putString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// AddUser adds a user read at start (SPEC: users are read once).
func (e *Engine) AddUser(id string) {
	e.mu.Lock()
	e.users = putString(e.users, id)
	e.mu.Unlock()
}

// AddAccount adds an account of a known user, read at start.
func (e *Engine) AddAccount(userID, currency string) {
	e.mu.Lock()
	e.accounts = putString(putString(e.accounts, userID), currency)
	e.mu.Unlock()
}

// Apply adds one transaction row, in seq order. Rows reach readers at the
// next Publish.
func (e *Engine) Apply(seq, ts int64, userID, currency string, amount int64, status, category, counterparty string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.rows
	b = binary.LittleEndian.AppendUint64(b, uint64(seq))
	b = binary.LittleEndian.AppendUint64(b, uint64(ts))
	b = binary.LittleEndian.AppendUint64(b, uint64(amount))
	for _, s := range [...]string{userID, currency, status, category, counterparty} {
		b = putString(b, s)
	}
	e.rows = b
	e.nrows++
	if e.nrows >= flushRows {
		e.flushLocked()
	}
}

// feed hands one packed buffer to a feeding function and empties it.
func (e *Engine) feed(what string, buf *[]byte, call func(*C.PaymentsEngine, *C.uint8_t, C.size_t) C.int32_t) {
	if len(*buf) == 0 {
		return
	}
	rc := call(e.ptr, (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(*buf))), C.size_t(len(*buf)))
	*buf = (*buf)[:0]
	if rc != C.PAYMENTS_OK {
		e.fail(fmt.Errorf("payments_ffi: %s: %s", what, describe(rc)))
	}
}

func (e *Engine) flushLocked() {
	if e.broken.Load() != nil {
		e.users, e.accounts, e.rows, e.nrows = e.users[:0], e.accounts[:0], e.rows[:0], 0
		return
	}
	e.feed("adding users", &e.users, func(p *C.PaymentsEngine, b *C.uint8_t, n C.size_t) C.int32_t {
		return C.payments_engine_add_users(p, b, n)
	})
	e.feed("adding accounts", &e.accounts, func(p *C.PaymentsEngine, b *C.uint8_t, n C.size_t) C.int32_t {
		return C.payments_engine_add_accounts(p, b, n)
	})
	e.feed("applying rows", &e.rows, func(p *C.PaymentsEngine, b *C.uint8_t, n C.size_t) C.int32_t {
		return C.payments_engine_apply(p, b, n)
	})
	e.nrows = 0
}

func (e *Engine) fail(err error) {
	e.broken.CompareAndSwap(nil, &err)
}

// Err is the feeding failure that broke the engine, or nil.
func (e *Engine) Err() error {
	if p := e.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// Publish hands over what was added and makes it visible to Respond. After a
// failure it returns the error that broke the engine.
func (e *Engine) Publish() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.flushLocked()
	if err := e.Err(); err != nil {
		return err
	}
	if rc := C.payments_engine_publish(e.ptr); rc != C.PAYMENTS_OK {
		e.fail(fmt.Errorf("payments_ffi: publishing: %s", describe(rc)))
	}
	return e.Err()
}

// Seq is the seq of what Respond answers from (the last Publish).
func (e *Engine) Seq() int64 {
	return int64(C.payments_engine_seq(e.ptr))
}

func describe(rc C.int32_t) string {
	switch rc {
	case C.PAYMENTS_PANIC:
		return "Rust panicked (caught)"
	case C.PAYMENTS_BAD_INPUT:
		return "malformed input"
	case C.PAYMENTS_BAD_ROW:
		return "a row with an unknown status or category"
	case C.PAYMENTS_BROKEN:
		return "the engine broke in an earlier call"
	}
	return fmt.Sprintf("code %d", int32(rc))
}

// stringArg is the (pointer, length) C reads a Go string through, during the
// call only (the bytes hold no Go pointers, as cgo requires).
func stringArg(s string) (*C.uint8_t, C.size_t) {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// Respond answers one GET balance or stats request (SPEC: the raw path, no
// decoding; the raw query without '?'): write gets the status and the body,
// which lives in Rust's memory until write returns — copy it to keep it. An
// error (a caught panic, a broken engine) means no answer: the caller sends a
// 500.
func (e *Engine) Respond(method, path, query string, write func(status int, body []byte)) error {
	if err := e.Err(); err != nil {
		return err
	}
	mp, ml := stringArg(method)
	pp, pl := stringArg(path)
	qp, ql := stringArg(query)
	var ans C.PaymentsAnswer
	rc := C.payments_engine_respond(e.ptr, mp, ml, pp, pl, qp, ql, &ans)
	return deliver(rc, &ans, write)
}

// deliver hands a filled answer to write and frees it, whatever write does.
func deliver(rc C.int32_t, ans *C.PaymentsAnswer, write func(status int, body []byte)) error {
	switch rc {
	case C.PAYMENTS_OK:
	case C.PAYMENTS_PANIC:
		return ErrPanicked
	default:
		return fmt.Errorf("payments_ffi: answering: %s", describe(rc))
	}
	defer C.payments_reply_free(ans.reply)
	write(int(ans.status), unsafe.Slice((*byte)(unsafe.Pointer(ans.body)), int(ans.body_len)))
	return nil
}

// Responder answers GET balance and stats; Engine is one.
type Responder interface {
	Respond(method, path, query string, write func(status int, body []byte)) error
}

// Panicking is e with a Respond that panics in Rust, inside the same boundary
// as a real answer (payments_test_panic). FOR TESTS ONLY: it shows a Rust
// panic become ErrPanicked (a 500) instead of an abort of the process.
func (e *Engine) Panicking() Responder { return panicking{e} }

type panicking struct{ e *Engine }

func (p panicking) Respond(_, _, _ string, write func(status int, body []byte)) error {
	var ans C.PaymentsAnswer
	rc := C.payments_test_panic(p.e.ptr, &ans)
	return deliver(rc, &ans, write)
}
