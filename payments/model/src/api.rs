//! The HTTP-free face of the service: a request line in, a status and canonical JSON body
//! out. The binary only moves bytes between hyper and [`respond`].

use crate::ids::{CATEGORIES, SECONDS_PER_DAY, UserId, day_of, write_date};
use crate::model::{Account, Snapshot};

/// Default stats window when `days` is absent.
pub const DEFAULT_DAYS: u32 = 30;
const TOP_COUNTERPARTIES: usize = 10;

/// A computed answer: the HTTP status and the canonical JSON body (borrowed from the
/// [`Scratch`] it was written into). The content type is always `application/json`.
#[derive(Debug)]
pub struct Reply<'a> {
    /// HTTP status code.
    pub status: u16,
    /// Canonical JSON, no trailing newline.
    pub body: &'a [u8],
}

/// Buffers reused from request to request (keep one per thread): the output, the amounts
/// for percentiles, the daily and per-counterparty aggregates. After warm-up a request
/// allocates nothing here.
#[derive(Debug, Default)]
pub struct Scratch {
    out: Vec<u8>,
    amounts: Vec<u64>,
    daily: Vec<Agg>,
    by_counterparty: Vec<CounterpartyAgg>,
    touched: Vec<u32>,
    top: Vec<(u32, CounterpartyAgg)>,
}

impl Scratch {
    /// Empty buffers; they grow to the largest request seen.
    pub fn new() -> Scratch {
        Scratch::default()
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Agg {
    count: u64,
    inflow: i64,
    outflow: i64,
}

impl Agg {
    fn add(&mut self, amount: i64) {
        self.count += 1;
        if amount > 0 {
            self.inflow = self.inflow.wrapping_add(amount);
        } else {
            self.outflow = self.outflow.wrapping_sub(amount);
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct CounterpartyAgg {
    count: u64,
    volume: u64,
}

/// The fixed error answers of the SPEC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiError {
    /// 400 `invalid_user_id`.
    InvalidUserId,
    /// 400 `invalid_days`.
    InvalidDays,
    /// 404 `user_not_found`.
    UserNotFound,
    /// 404 `not_found`.
    NotFound,
    /// 405 `method_not_allowed`.
    MethodNotAllowed,
}

impl ApiError {
    /// HTTP status.
    pub fn status(self) -> u16 {
        match self {
            ApiError::InvalidUserId | ApiError::InvalidDays => 400,
            ApiError::UserNotFound | ApiError::NotFound => 404,
            ApiError::MethodNotAllowed => 405,
        }
    }

    /// The canonical body.
    pub fn body(self) -> &'static [u8] {
        match self {
            ApiError::InvalidUserId => {
                br#"{"error":{"code":"invalid_user_id","message":"user id must be 'u' followed by 12 lowercase hex digits"}}"#
            }
            ApiError::InvalidDays => {
                br#"{"error":{"code":"invalid_days","message":"days must be an integer from 1 to 365"}}"#
            }
            ApiError::UserNotFound => {
                br#"{"error":{"code":"user_not_found","message":"user not found"}}"#
            }
            ApiError::NotFound => br#"{"error":{"code":"not_found","message":"no such endpoint"}}"#,
            ApiError::MethodNotAllowed => {
                br#"{"error":{"code":"method_not_allowed","message":"method not allowed"}}"#
            }
        }
    }
}

enum Route<'p> {
    Health,
    Balance(&'p str),
    Stats(&'p str),
}

/// Matches the raw path exactly (SPEC "Matching rules": no decoding, no cleaning).
fn route(path: &str) -> Option<Route<'_>> {
    if path == "/healthz" {
        return Some(Route::Health);
    }
    let rest = path.strip_prefix("/v1/users/")?;
    let (id, tail) = rest.split_at(rest.find('/')?);
    if id.is_empty() {
        return None;
    }
    match tail {
        "/balance" => Some(Route::Balance(id)),
        "/stats" => Some(Route::Stats(id)),
        _ => None,
    }
}

/// Answers one request against a snapshot. `path` is the raw path, `query` the raw query
/// string without `?`.
pub fn respond<'s>(
    snapshot: &Snapshot,
    method: &str,
    path: &str,
    query: Option<&str>,
    scratch: &'s mut Scratch,
) -> Reply<'s> {
    scratch.out.clear();
    match answer(snapshot, method, path, query, scratch) {
        Ok(()) => Reply {
            status: 200,
            body: &scratch.out,
        },
        Err(e) => Reply {
            status: e.status(),
            body: e.body(),
        },
    }
}

fn answer(
    snapshot: &Snapshot,
    method: &str,
    path: &str,
    query: Option<&str>,
    scratch: &mut Scratch,
) -> Result<(), ApiError> {
    let route = route(path).ok_or(ApiError::NotFound)?;
    if method != "GET" {
        return Err(ApiError::MethodNotAllowed);
    }
    let out = &mut scratch.out;
    match route {
        Route::Health => {
            out.extend_from_slice(br#"{"status":"ok","seq":"#);
            push_int(out, snapshot.seq);
            out.push(b'}');
            Ok(())
        }
        Route::Balance(raw) => {
            let id = UserId::parse(raw).ok_or(ApiError::InvalidUserId)?;
            let user = snapshot.user(id).ok_or(ApiError::UserNotFound)?;
            write_balance(out, id, snapshot.seq, &user.accounts);
            Ok(())
        }
        Route::Stats(raw) => {
            let id = UserId::parse(raw).ok_or(ApiError::InvalidUserId)?;
            let days = parse_days(query)?;
            let user = snapshot.user(id).ok_or(ApiError::UserNotFound)?;
            write_stats(snapshot, id, days, &user.accounts, scratch);
            Ok(())
        }
    }
}

/// The `days` parameter per SPEC: the first well-formed `days` pair of a query decoded like
/// Go's `url.ParseQuery`, matching `^[0-9]{1,3}$` with a value in 1..=365.
pub fn parse_days(query: Option<&str>) -> Result<u32, ApiError> {
    let Some(query) = query else {
        return Ok(DEFAULT_DAYS);
    };
    let mut key = Vec::new();
    let mut value = Vec::new();
    for pair in query.split('&') {
        if pair.is_empty() || pair.contains(';') {
            continue;
        }
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if !unescape_into(k, &mut key) || key != b"days" {
            continue;
        }
        if !unescape_into(v, &mut value) {
            continue;
        }
        if value.is_empty() || value.len() > 3 || !value.iter().all(u8::is_ascii_digit) {
            return Err(ApiError::InvalidDays);
        }
        let days = value.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
        return if (1..=365).contains(&days) {
            Ok(days)
        } else {
            Err(ApiError::InvalidDays)
        };
    }
    Ok(DEFAULT_DAYS)
}

/// Query-component unescaping as Go's `url.QueryUnescape`: `+` is a space, `%XX` a byte;
/// a malformed escape makes the whole component invalid (`false`).
fn unescape_into(s: &str, out: &mut Vec<u8>) -> bool {
    out.clear();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => return false,
                }
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    true
}

fn push_int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn push_str(out: &mut Vec<u8>, s: &str) {
    // SPEC: every string is plain ASCII that needs no escaping in Go or Rust.
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

fn write_balance(out: &mut Vec<u8>, id: UserId, seq: i64, accounts: &[Account]) {
    out.extend_from_slice(br#"{"user_id":""#);
    id.write_to(out);
    out.extend_from_slice(br#"","seq":"#);
    push_int(out, seq);
    out.extend_from_slice(br#","balances":["#);
    for (i, a) in accounts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"currency":"#);
        push_str(out, &a.currency);
        out.extend_from_slice(br#","settled":"#);
        push_int(out, a.settled);
        out.extend_from_slice(br#","pending":"#);
        push_int(out, a.pending);
        out.extend_from_slice(br#","available":"#);
        push_int(out, a.settled.wrapping_add(a.pending_out));
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

fn write_stats(snapshot: &Snapshot, id: UserId, days: u32, accounts: &[Account], s: &mut Scratch) {
    let to_day = day_of(snapshot.clock);
    let from_day = to_day - i64::from(days - 1);
    let from_ts = from_day * SECONDS_PER_DAY;
    let end_ts = (to_day + 1) * SECONDS_PER_DAY;

    let out = &mut s.out;
    out.extend_from_slice(br#"{"user_id":""#);
    id.write_to(out);
    out.extend_from_slice(br#"","seq":"#);
    push_int(out, snapshot.seq);
    out.extend_from_slice(br#","days":"#);
    push_int(out, days);
    out.extend_from_slice(br#","from":""#);
    write_date(out, from_day);
    out.extend_from_slice(br#"","to":""#);
    write_date(out, to_day);
    out.extend_from_slice(br#"","currencies":["#);

    if s.by_counterparty.len() < snapshot.names.len() {
        s.by_counterparty
            .resize(snapshot.names.len(), CounterpartyAgg::default());
    }
    for (ai, account) in accounts.iter().enumerate() {
        // Transactions are sorted by ts: the window is a contiguous slice.
        let lo = account.txs.partition_point(|t| t.ts < from_ts);
        let hi = account.txs.partition_point(|t| t.ts < end_ts);
        let window = &account.txs[lo..hi];

        let mut total = Agg::default();
        let mut by_category = [Agg::default(); CATEGORIES.len()];
        s.daily.clear();
        s.daily.resize(days as usize, Agg::default());
        s.amounts.clear();
        s.touched.clear();
        let mut max = 0u64;
        for t in window {
            total.add(t.amount);
            by_category[usize::from(t.category)].add(t.amount);
            s.daily[(day_of(t.ts) - from_day) as usize].add(t.amount);
            let abs = t.amount.unsigned_abs();
            max = max.max(abs);
            s.amounts.push(abs);
            let c = &mut s.by_counterparty[t.counterparty as usize];
            if c.count == 0 {
                s.touched.push(t.counterparty);
            }
            c.count += 1;
            c.volume = c.volume.wrapping_add(abs);
        }

        let out = &mut s.out;
        if ai > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"currency":"#);
        push_str(out, &account.currency);
        out.extend_from_slice(br#","count":"#);
        push_int(out, total.count);
        out.extend_from_slice(br#","total_in":"#);
        push_int(out, total.inflow);
        out.extend_from_slice(br#","total_out":"#);
        push_int(out, total.outflow);
        out.extend_from_slice(br#","by_category":["#);
        let mut first = true;
        for (name, agg) in CATEGORIES.iter().zip(&by_category) {
            if agg.count == 0 {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(br#"{"category":"#);
            push_str(out, name);
            write_agg_tail(out, agg);
        }
        out.extend_from_slice(br#"],"daily":["#);
        for (i, agg) in s.daily.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(br#"{"date":""#);
            write_date(out, from_day + i as i64);
            out.push(b'"');
            write_agg_tail(out, agg);
        }
        out.extend_from_slice(br#"],"amounts":"#);
        let n = s.amounts.len();
        if n == 0 {
            out.extend_from_slice(b"null");
        } else {
            // Nearest rank, in integers (SPEC). Select the highest rank first; each lower
            // rank then lies in the already partitioned prefix.
            let rank = |p: usize| ((p * n).div_ceil(100)).max(1) - 1;
            let (i50, i90, i99) = (rank(50), rank(90), rank(99));
            let a = &mut s.amounts;
            a.select_nth_unstable(i99);
            if i90 < i99 {
                a[..i99].select_nth_unstable(i90);
            }
            if i50 < i90 {
                a[..i90].select_nth_unstable(i50);
            }
            out.extend_from_slice(br#"{"p50":"#);
            push_int(out, a[i50]);
            out.extend_from_slice(br#","p90":"#);
            push_int(out, a[i90]);
            out.extend_from_slice(br#","p99":"#);
            push_int(out, a[i99]);
            out.extend_from_slice(br#","max":"#);
            push_int(out, max);
            out.push(b'}');
        }
        out.extend_from_slice(br#","top_counterparties":["#);
        s.top.clear();
        for &c in &s.touched {
            let slot = &mut s.by_counterparty[c as usize];
            s.top.push((c, *slot));
            *slot = CounterpartyAgg::default();
        }
        let names = &snapshot.names;
        let order = |a: &(u32, CounterpartyAgg), b: &(u32, CounterpartyAgg)| {
            b.1.volume
                .cmp(&a.1.volume)
                .then(b.1.count.cmp(&a.1.count))
                .then_with(|| names[a.0 as usize].cmp(&names[b.0 as usize]))
        };
        if s.top.len() > TOP_COUNTERPARTIES {
            s.top.select_nth_unstable_by(TOP_COUNTERPARTIES - 1, order);
            s.top.truncate(TOP_COUNTERPARTIES);
        }
        s.top.sort_unstable_by(order);
        for (i, (c, agg)) in s.top.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(br#"{"counterparty":"#);
            push_str(out, &names[*c as usize]);
            out.extend_from_slice(br#","count":"#);
            push_int(out, agg.count);
            out.extend_from_slice(br#","volume":"#);
            push_int(out, agg.volume);
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
    }
    s.out.extend_from_slice(b"]}");
}

fn write_agg_tail(out: &mut Vec<u8>, agg: &Agg) {
    out.extend_from_slice(br#","count":"#);
    push_int(out, agg.count);
    out.extend_from_slice(br#","in":"#);
    push_int(out, agg.inflow);
    out.extend_from_slice(br#","out":"#);
    push_int(out, agg.outflow);
    out.push(b'}');
}
