//! The C functions called as C would call them: packed batches in, answers out, freed.
//! (Byte identity with the Go engine and the Rust service over whole ledgers is checked
//! from Go, `payments/go/internal/api`, and by `scripts/e2e.sh`.)

use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use payments_model::Row;

use super::*;
use crate::batch::tests::{put_row, put_str};

const A: &str = "u00000000000a";
const B: &str = "u00000000000b";
/// 2026-06-30T10:00:00Z.
const TS: i64 = 20_634 * 86_400 + 36_000;

struct Engine(*mut PaymentsEngine);

impl Drop for Engine {
    fn drop(&mut self) {
        // SAFETY: made by payments_engine_new in `engine`, freed here once.
        unsafe { payments_engine_free(self.0) }
    }
}

// SAFETY: the engine is documented as usable from any thread.
unsafe impl Send for Engine {}
// SAFETY: as above.
unsafe impl Sync for Engine {}

fn engine(users: &[&str], accounts: &[(&str, &str)]) -> Engine {
    let e = Engine(payments_engine_new());
    assert!(!e.0.is_null());
    let mut buf = Vec::new();
    for u in users {
        put_str(&mut buf, u);
    }
    // SAFETY: a live engine and a buffer alive for the call (as in every call below).
    assert_eq!(
        unsafe { payments_engine_add_users(e.0, buf.as_ptr(), buf.len()) },
        PAYMENTS_OK
    );
    buf.clear();
    for (u, c) in accounts {
        put_str(&mut buf, u);
        put_str(&mut buf, c);
    }
    assert_eq!(
        // SAFETY: as above.
        unsafe { payments_engine_add_accounts(e.0, buf.as_ptr(), buf.len()) },
        PAYMENTS_OK
    );
    e
}

fn row<'a>(
    seq: i64,
    user: &'a str,
    amount: i64,
    status: &'a str,
    category: &'a str,
    cp: &'a str,
) -> Row<'a> {
    Row {
        seq,
        ts: TS + seq,
        user_id: user,
        currency: "EUR",
        amount,
        status,
        category,
        counterparty: cp,
    }
}

fn apply(e: &Engine, rows: &[Row<'_>]) -> i32 {
    let mut buf = Vec::new();
    for r in rows {
        put_row(&mut buf, r);
    }
    // SAFETY: as above.
    unsafe { payments_engine_apply(e.0, buf.as_ptr(), buf.len()) }
}

fn publish(e: &Engine) {
    // SAFETY: as above.
    assert_eq!(unsafe { payments_engine_publish(e.0) }, PAYMENTS_OK);
}

fn no_answer() -> PaymentsAnswer {
    PaymentsAnswer {
        status: 7,
        body: ptr::null(),
        body_len: 0,
        reply: ptr::null_mut(),
    }
}

/// (status, body) of one request, the reply freed after copying the body.
fn get(e: &Engine, path: impl AsRef<[u8]>, query: &str) -> (u16, String) {
    let path = path.as_ref();
    let mut out = no_answer();
    // SAFETY: as above; out is writable.
    let rc = unsafe {
        payments_engine_respond(
            e.0,
            b"GET".as_ptr(),
            3,
            path.as_ptr(),
            path.len(),
            query.as_ptr(),
            query.len(),
            &mut out,
        )
    };
    assert_eq!(rc, PAYMENTS_OK);
    // SAFETY: body_len bytes at body, valid until the reply is freed just below.
    let body = unsafe { std::slice::from_raw_parts(out.body, out.body_len) }.to_vec();
    // SAFETY: the reply of this answer, freed once.
    unsafe { payments_reply_free(out.reply) };
    (out.status, String::from_utf8(body).unwrap())
}

fn balance(seq: i64, settled: i64, pending: i64, available: i64) -> String {
    format!(
        r#"{{"user_id":"{A}","seq":{seq},"balances":[{{"currency":"EUR","settled":{settled},"pending":{pending},"available":{available}}}]}}"#
    )
}

#[test]
fn header_is_what_cbindgen_generates_from_this_crate() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{dir}/src/lib.rs"))
        .generate()
        .unwrap();
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let path = format!("{dir}/include/payments_ffi.h");
    if std::env::var_os("PAYMENTS_FFI_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{path} is not what cbindgen generates from src/lib.rs; regenerate it with\n  \
         PAYMENTS_FFI_BLESS=1 cargo test --release -p payments-ffi header\n--- generated:\n{}",
        String::from_utf8_lossy(&generated)
    );
    assert_eq!(payments_abi_version(), PAYMENTS_ABI_VERSION);
}

#[test]
fn rows_become_visible_at_publish_with_exact_bytes() {
    let e = engine(&[A, B], &[(A, "EUR")]);
    publish(&e);
    let path = format!("/v1/users/{A}/balance");
    assert_eq!(get(&e, &path, ""), (200, balance(0, 0, 0, 0)));
    let rows = [
        row(1, A, 2000, "settled", "topup", "ext:topup"),
        row(2, A, -500, "settled", "gift", B),
        row(3, A, -200, "pending", "payout", "ext:payout"),
        row(4, A, 300, "pending", "refund", B),
    ];
    assert_eq!(apply(&e, &rows), PAYMENTS_OK);
    // Applied, not yet published: readers still see seq 0.
    assert_eq!(get(&e, &path, "").1, balance(0, 0, 0, 0));
    // SAFETY: a live engine.
    assert_eq!(unsafe { payments_engine_seq(e.0) }, 0);
    publish(&e);
    assert_eq!(get(&e, &path, ""), (200, balance(4, 1500, 100, 1300)));
    // SAFETY: a live engine.
    assert_eq!(unsafe { payments_engine_seq(e.0) }, 4);
    let (status, stats) = get(&e, format!("/v1/users/{A}/stats"), "days=1");
    assert_eq!(status, 200);
    assert_eq!(
        stats,
        format!(
            r#"{{"user_id":"{A}","seq":4,"days":1,"from":"2026-06-30","to":"2026-06-30","currencies":[{{"currency":"EUR","count":4,"total_in":2300,"total_out":700,"by_category":[{{"category":"gift","count":1,"in":0,"out":500}},{{"category":"payout","count":1,"in":0,"out":200}},{{"category":"refund","count":1,"in":300,"out":0}},{{"category":"topup","count":1,"in":2000,"out":0}}],"daily":[{{"date":"2026-06-30","count":4,"in":2300,"out":700}}],"amounts":{{"p50":300,"p90":2000,"p99":2000,"max":2000}},"top_counterparties":[{{"counterparty":"ext:topup","count":1,"volume":2000}},{{"counterparty":"{B}","count":2,"volume":800}},{{"counterparty":"ext:payout","count":1,"volume":200}}]}}]}}"#
        )
    );
}

#[test]
fn errors_come_back_as_the_spec_bytes() {
    let e = engine(&[A], &[(A, "EUR")]);
    publish(&e);
    let cases = [
        ("/v1/users/U1/balance", "", 400, "invalid_user_id"),
        (
            &format!("/v1/users/{A}/stats"),
            "days=0",
            400,
            "invalid_days",
        ),
        (
            &format!("/v1/users/{A}/stats"),
            "days=%zz&days=366",
            400,
            "invalid_days",
        ),
        ("/v1/users/u0000000000ff/balance", "", 404, "user_not_found"),
        ("/v1/users//balance", "", 404, "not_found"),
    ];
    for (path, query, status, code) in cases {
        let (got_status, body) = get(&e, path, query);
        assert_eq!(got_status, status, "{path}?{query}");
        assert!(
            body.starts_with(&format!(r#"{{"error":{{"code":"{code}","#)),
            "{path}?{query}: {body}"
        );
    }
    // A non-UTF-8 byte in the id is an invalid id, not a crash.
    let (status, _) = get(&e, b"/v1/users/u00000000000\xff/balance", "");
    assert_eq!(status, 400);
}

#[test]
fn unknown_users_move_seq_and_bad_rows_or_batches_are_refused() {
    let e = engine(&[A], &[]);
    assert_eq!(
        apply(&e, &[row(1, "u0000000000ff", 5, "settled", "gift", A)]),
        PAYMENTS_OK
    );
    assert_eq!(
        apply(&e, &[row(2, A, 5, "settled", "lottery", B)]),
        PAYMENTS_BAD_ROW
    );
    assert_eq!(
        apply(&e, &[row(3, A, 5, "cleared", "gift", B)]),
        PAYMENTS_BAD_ROW
    );
    publish(&e);
    // SAFETY: a live engine.
    assert_eq!(unsafe { payments_engine_seq(e.0) }, 3);

    let mut buf = Vec::new();
    put_row(&mut buf, &row(4, A, 5, "settled", "gift", B));
    for cut in [1, 8, 24, 30, buf.len() - 1] {
        // SAFETY: a live engine, cut <= buf.len().
        let rc = unsafe { payments_engine_apply(e.0, buf.as_ptr(), cut) };
        assert_eq!(rc, PAYMENTS_BAD_INPUT, "cut at {cut}");
    }
    // SAFETY: null engines and null buffers of length 0 are allowed inputs.
    unsafe {
        assert_eq!(
            payments_engine_apply(ptr::null(), buf.as_ptr(), buf.len()),
            PAYMENTS_BAD_INPUT
        );
        assert_eq!(payments_engine_apply(e.0, ptr::null(), 0), PAYMENTS_OK);
        assert_eq!(payments_engine_publish(ptr::null()), PAYMENTS_BAD_INPUT);
        assert_eq!(payments_engine_seq(ptr::null()), -1);
        let mut out = std::mem::MaybeUninit::<PaymentsAnswer>::uninit();
        let rc = payments_engine_respond(
            ptr::null(),
            ptr::null(),
            0,
            ptr::null(),
            0,
            ptr::null(),
            0,
            out.as_mut_ptr(),
        );
        assert_eq!(rc, PAYMENTS_BAD_INPUT);
        let rc = payments_engine_respond(
            e.0,
            ptr::null(),
            0,
            ptr::null(),
            0,
            ptr::null(),
            0,
            ptr::null_mut(),
        );
        assert_eq!(rc, PAYMENTS_BAD_INPUT);
        payments_reply_free(ptr::null_mut());
        payments_engine_free(ptr::null_mut());
    }
}

#[test]
fn a_panic_is_caught_at_the_boundary_and_later_answers_are_right() {
    let e = engine(&[A], &[(A, "EUR")]);
    assert_eq!(
        apply(&e, &[row(1, A, 700, "settled", "topup", "ext:topup")]),
        PAYMENTS_OK
    );
    publish(&e);
    let path = format!("/v1/users/{A}/balance");
    for _ in 0..3 {
        let mut out = no_answer();
        // SAFETY: a live engine, a writable out.
        assert_eq!(
            unsafe { payments_test_panic(e.0, &mut out) },
            PAYMENTS_PANIC
        );
        assert_eq!(
            (out.status, out.reply.is_null()),
            (7, true),
            "out untouched"
        );
        assert_eq!(get(&e, &path, ""), (200, balance(1, 700, 0, 700)));
    }
}

#[test]
fn an_answer_outlives_its_engine_until_freed() {
    let e = engine(&[A], &[(A, "EUR")]);
    publish(&e);
    let path = format!("/v1/users/{A}/balance");
    let mut out = std::mem::MaybeUninit::<PaymentsAnswer>::uninit();
    // SAFETY: a live engine, a writable out.
    let rc = unsafe {
        payments_engine_respond(
            e.0,
            b"GET".as_ptr(),
            3,
            path.as_ptr(),
            path.len(),
            ptr::null(),
            0,
            out.as_mut_ptr(),
        )
    };
    assert_eq!(rc, PAYMENTS_OK);
    // SAFETY: written by the call that returned PAYMENTS_OK.
    let out = unsafe { out.assume_init() };
    drop(e);
    // SAFETY: the answer owns its body until freed.
    let body = unsafe { std::slice::from_raw_parts(out.body, out.body_len) };
    assert_eq!(body, balance(0, 0, 0, 0).as_bytes());
    // SAFETY: freed once.
    unsafe { payments_reply_free(out.reply) };
}

#[test]
fn readers_on_many_threads_see_whole_batches_while_one_thread_feeds() {
    let e = engine(&[A, B], &[(A, "EUR"), (B, "EUR")]);
    publish(&e);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let path = format!("/v1/users/{A}/balance");
                let mut seen = 0;
                while !done.load(Ordering::Relaxed) {
                    let (status, body) = get(&e, &path, "");
                    assert_eq!(status, 200);
                    // Each batch is a +10 then a -3 (seq 2k+1, 2k+2): a published
                    // snapshot always holds whole batches, so settled = 7 * seq / 2.
                    let seq: i64 = body
                        .split(r#""seq":"#)
                        .nth(1)
                        .unwrap()
                        .split(',')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert_eq!(seq % 2, 0, "{body}");
                    assert_eq!(body, balance(seq, 7 * seq / 2, 0, 7 * seq / 2));
                    seen += 1;
                }
                assert!(seen > 0);
            });
        }
        for k in 0..2_000 {
            let rows = [
                row(2 * k + 1, A, 10, "settled", "gift", B),
                row(2 * k + 2, A, -3, "settled", "fee", "ext:fee"),
            ];
            assert_eq!(apply(&e, &rows), PAYMENTS_OK);
            publish(&e);
        }
        done.store(true, Ordering::Relaxed);
    });
}
