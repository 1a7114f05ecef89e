//! A deterministic, realistically skewed ledger for tests and benchmarks.
//!
//! Shape: ~1% creators (all three currencies) receive gifts from everyone else, chosen with
//! Zipf-like weights, so the top creators get tens of thousands of transactions and the
//! tail a thousand or so; most other users send a handful of gifts, a few send hundreds.
//! Senders top up before spending (balances never go below zero), 0.5% of gifts are
//! refunded, creators are paid out weekly with a fee and payouts of the last two days are
//! still pending. 365 days ending 2026-06-30 (a constant, so a seed fully determines the
//! file). Only integer arithmetic and our own PRNG: same seed, same rows, on any platform.

use std::collections::HashSet;
use std::path::Path;

use rusqlite::{Connection, params};

use crate::error::{Error, SqliteContext};
use crate::store::{StoreKind, schema};
use payments_model::{SECONDS_PER_DAY, UserId};

/// Last second of the generated ledger: 2026-06-30T23:59:59Z.
pub const END_TS: i64 = 1_782_863_999;
const SPAN_DAYS: i64 = 365;
const START_TS: i64 = END_TS + 1 - SPAN_DAYS * SECONDS_PER_DAY;
/// Payouts in this many final days stay pending.
const PENDING_DAYS: i64 = 2;

const CURRENCIES: [&str; 3] = ["EUR", "IDR", "USD"];
const CATEGORY_GIFT: &str = "gift";
const EXT_TOPUP: u32 = u32::MAX;
const EXT_PAYOUT: u32 = u32::MAX - 1;
const EXT_FEE: u32 = u32::MAX - 2;
const EXT_BANK: u32 = u32::MAX - 3;

/// Gift prices per currency index (EUR, IDR, USD) and how often each is chosen.
const GIFT_PRICES: [[i64; 7]; 3] = [
    [25, 99, 199, 499, 999, 2_999, 9_999],
    [1_000, 5_000, 10_000, 25_000, 50_000, 100_000, 500_000],
    [25, 99, 199, 499, 999, 2_999, 9_999],
];
const GIFT_WEIGHTS: [u64; 7] = [30, 25, 18, 12, 8, 5, 2];
const TOPUP_PACKS: [[i64; 8]; 3] = [
    [500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000],
    [
        50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000,
    ],
    [500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000],
];
const MIN_PAYOUT: [i64; 3] = [1_000, 100_000, 1_000];
/// Gifts sent per non-creator: (per-mille share, min, max).
const GIFT_TIERS: [(u64, i64, i64); 5] = [
    (600, 1, 6),
    (250, 7, 30),
    (100, 31, 120),
    (45, 121, 400),
    (5, 401, 2_000),
];

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    users: u32,
    seed: u64,
    force: bool,
}

impl GenerateOptions {
    /// `users` users from `seed`; refuses to overwrite an existing file.
    pub fn new(users: u32, seed: u64) -> GenerateOptions {
        GenerateOptions {
            users,
            seed,
            force: false,
        }
    }

    /// Replace an existing file (and its `-wal`/`-shm`), or a database's ledger tables.
    pub fn force(mut self, force: bool) -> GenerateOptions {
        self.force = force;
        self
    }

    pub(crate) fn forced(&self) -> bool {
        self.force
    }
}

/// What [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct GenerateSummary {
    user_ids: Vec<String>,
    transactions: u64,
    creators: u32,
}

impl GenerateSummary {
    /// The user ids, in generation order.
    pub fn user_ids(&self) -> &[String] {
        &self.user_ids
    }

    /// Rows written to `transactions`.
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    /// How many users are creators.
    pub fn creators(&self) -> u32 {
        self.creators
    }
}

/// xoshiro256** seeded by splitmix64: small, fast, and fully under our control (rand's
/// `StdRng` does not promise the same stream across versions).
#[derive(Debug)]
struct Rng([u64; 4]);

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mix(*x)
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut x = seed;
        Rng([
            splitmix(&mut x),
            splitmix(&mut x),
            splitmix(&mut x),
            splitmix(&mut x),
        ])
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in `0..n` (Lemire's multiply; the bias is below 2^-40 for our `n`).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    fn per_mille(&mut self, p: u64) -> bool {
        self.below(1000) < p
    }

    fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut r = self.below(weights.iter().sum());
        for (i, &w) in weights.iter().enumerate() {
            if r < w {
                return i;
            }
            r -= w;
        }
        weights.len() - 1
    }
}

#[derive(Debug)]
struct User {
    id: String,
    created_at: i64,
    /// Currency indexes, sorted, first is not necessarily primary.
    currencies: Vec<u8>,
    primary: u8,
    creator: bool,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    ts: i64,
    /// Generation order, the tie-break that keeps the sort deterministic.
    ord: u32,
    user: u32,
    currency: u8,
    amount: i64,
    pending: bool,
    category: &'static str,
    /// A user index, or one of the `EXT_*` values.
    counterparty: u32,
}

struct Events {
    list: Vec<Event>,
}

impl Events {
    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        ts: i64,
        user: u32,
        currency: u8,
        amount: i64,
        pending: bool,
        category: &'static str,
        counterparty: u32,
    ) {
        let ord = self.list.len() as u32;
        self.list.push(Event {
            ts,
            ord,
            user,
            currency,
            amount,
            pending,
            category,
            counterparty,
        });
    }
}

/// Writes a new ledger to `db` (schema, users, transactions in `ts` order, accounts equal
/// to the sums) in one SQLite transaction.
pub fn generate(db: &Path, options: &GenerateOptions) -> Result<GenerateSummary, Error> {
    let plan = Plan::new(options)?;
    if db.exists() {
        if !options.force {
            return Err(Error::Exists(db.to_path_buf()));
        }
        for suffix in ["", "-wal", "-shm"] {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(Error::Io {
                        path: p.into(),
                        source,
                    });
                }
            }
        }
    }
    write(db, &plan)?;
    Ok(plan.summary())
}

/// A generated ledger in memory, before it is written to a store.
pub(crate) struct Plan {
    users: Vec<User>,
    events: Vec<Event>,
}

/// One `transactions` row of a [`Plan`], in `ts` (= `seq`) order.
pub(crate) struct PlanRow<'a> {
    pub(crate) ts: i64,
    pub(crate) user: &'a str,
    pub(crate) currency: &'a str,
    pub(crate) amount: i64,
    pub(crate) status: &'static str,
    pub(crate) category: &'static str,
    pub(crate) counterparty: &'a str,
}

impl Plan {
    pub(crate) fn new(options: &GenerateOptions) -> Result<Plan, Error> {
        if options.users == 0 {
            return Err(Error::InvalidOptions("--users must be at least 1".into()));
        }
        let mut rng = Rng::new(options.seed);
        let users = make_users(&mut rng, options.seed, options.users);
        let events = make_events(&mut rng, &users);
        Ok(Plan { users, events })
    }

    pub(crate) fn summary(&self) -> GenerateSummary {
        GenerateSummary {
            user_ids: self.users.iter().map(|u| u.id.clone()).collect(),
            transactions: self.events.len() as u64,
            creators: self.users.iter().filter(|u| u.creator).count() as u32,
        }
    }

    /// `users` rows: (id, created_at).
    pub(crate) fn users(&self) -> impl Iterator<Item = (&str, i64)> {
        self.users.iter().map(|u| (u.id.as_str(), u.created_at))
    }

    /// `transactions` rows in insertion order.
    pub(crate) fn rows(&self) -> impl Iterator<Item = PlanRow<'_>> {
        self.events.iter().map(|e| PlanRow {
            ts: e.ts,
            user: &self.users[e.user as usize].id,
            currency: CURRENCIES[e.currency as usize],
            amount: e.amount,
            status: if e.pending { "pending" } else { "settled" },
            category: e.category,
            counterparty: match e.counterparty {
                EXT_TOPUP => "ext:topup",
                EXT_PAYOUT => "ext:payout",
                EXT_FEE => "ext:fee",
                EXT_BANK => "ext:bank",
                u => self.users[u as usize].id.as_str(),
            },
        })
    }

    /// `accounts` rows (user, currency, settled, pending): the sums over the rows.
    pub(crate) fn accounts(&self) -> Vec<(&str, &'static str, i64, i64)> {
        let mut sums = vec![[[0i64; 2]; 3]; self.users.len()];
        for e in &self.events {
            sums[e.user as usize][e.currency as usize][usize::from(e.pending)] += e.amount;
        }
        let mut out = Vec::new();
        for (u, sum) in self.users.iter().zip(&sums) {
            for &c in &u.currencies {
                let [settled, pending] = sum[c as usize];
                out.push((u.id.as_str(), CURRENCIES[c as usize], settled, pending));
            }
        }
        out
    }
}

fn make_users(rng: &mut Rng, seed: u64, n: u32) -> Vec<User> {
    // Ids: a keyed hash of (seed, index); the key is derived from the seed.
    let key = mix(seed ^ 0x5ca1_9e1d_0000_0001);
    let mut seen = HashSet::new();
    let mut users = Vec::with_capacity(n as usize);
    for i in 0..n {
        let mut attempt = 0u64;
        let id = loop {
            let bits = mix(key ^ mix((u64::from(i) << 16) | attempt));
            let id = UserId::from_bits(bits);
            if seen.insert(id) {
                break id;
            }
            attempt += 1;
        };
        let creator = rng.below(100) == 0;
        let (created_at, currencies, primary) = if creator {
            let created = START_TS - rng.between(1, 180) * SECONDS_PER_DAY;
            (created, vec![0, 1, 2], rng.weighted(&[20, 45, 35]) as u8)
        } else {
            let created = rng.between(
                START_TS - 60 * SECONDS_PER_DAY,
                END_TS - 3 * SECONDS_PER_DAY,
            );
            let primary = rng.weighted(&[20, 45, 35]) as u8;
            let mut currencies = vec![primary];
            let extra = if rng.per_mille(50) {
                2
            } else if rng.per_mille(200) {
                1
            } else {
                0
            };
            while currencies.len() < 1 + extra {
                let c = rng.below(3) as u8;
                if !currencies.contains(&c) {
                    currencies.push(c);
                }
            }
            currencies.sort_unstable();
            (created, currencies, primary)
        };
        users.push(User {
            id: id.to_string(),
            created_at,
            currencies,
            primary,
            creator,
        });
    }
    if n >= 2 && !users.iter().any(|u| u.creator) {
        let u = &mut users[0];
        u.creator = true;
        u.created_at = START_TS - SECONDS_PER_DAY;
        u.currencies = vec![0, 1, 2];
    }
    users
}

fn make_events(rng: &mut Rng, users: &[User]) -> Vec<Event> {
    let creators: Vec<u32> = (0..users.len() as u32)
        .filter(|&i| users[i as usize].creator)
        .collect();
    // Zipf-like popularity with an offset: the top creator gets ~5% of all gifts.
    let creator_weights: Vec<u64> = (0..creators.len() as u64)
        .map(|r| 1_000_000 / (r + 6))
        .collect();
    let mut ev = Events { list: Vec::new() };
    let mut gift_ts = Vec::new();
    for (ui, user) in users.iter().enumerate() {
        let ui = ui as u32;
        if user.creator {
            continue;
        }
        let start = user.created_at.max(START_TS);
        let kind = rng.below(1000);
        if kind < 30 {
            continue; // registered, never paid: accounts of zero
        }
        if kind < 80 {
            for _ in 0..rng.between(1, 2) {
                let c = user.primary as usize;
                let amount = TOPUP_PACKS[c][rng.below(4) as usize];
                let at = rng_ts(rng, start);
                topup(rng, &mut ev, ui, c as u8, at, amount);
            }
            continue;
        }
        let tier = GIFT_TIERS[rng.weighted(&GIFT_TIERS.map(|t| t.0))];
        let gifts = rng.between(tier.1, tier.2);
        gift_ts.clear();
        gift_ts.extend((0..gifts).map(|_| rng_ts(rng, start)));
        gift_ts.sort_unstable();
        let mut balance = [0i64; 3];
        for &ts in &gift_ts {
            let c = if rng.per_mille(850) {
                user.primary
            } else {
                user.currencies[rng.below(user.currencies.len() as u64) as usize]
            };
            let ci = c as usize;
            let price = GIFT_PRICES[ci][rng.weighted(&GIFT_WEIGHTS)];
            let quantity = if rng.per_mille(800) {
                1
            } else {
                rng.between(2, 10)
            };
            let amount = price * quantity;
            if balance[ci] < amount {
                // Top up shortly before, with the smallest pack that covers it or the next.
                let packs = &TOPUP_PACKS[ci];
                let fit = packs
                    .iter()
                    .position(|&p| p >= amount)
                    .unwrap_or(packs.len() - 1);
                let pack = packs[(fit + rng.below(2) as usize).min(packs.len() - 1)].max(amount);
                let at = (ts - rng.between(60, 3_600)).max(start);
                balance[ci] += pack;
                balance[ci] += topup(rng, &mut ev, ui, c, at, pack);
            }
            let creator = creators[rng.weighted(&creator_weights)];
            balance[ci] -= amount;
            ev.push(ts, ui, c, -amount, false, CATEGORY_GIFT, creator);
            ev.push(ts, creator, c, amount, false, CATEGORY_GIFT, ui);
            if rng.per_mille(5) {
                let at = (ts + rng.between(60, 7_200)).min(END_TS);
                balance[ci] += amount;
                ev.push(at, ui, c, amount, false, "refund", creator);
                ev.push(at, creator, c, -amount, false, "refund", ui);
            }
        }
    }
    add_payouts(rng, users, &mut ev);
    let mut list = ev.list;
    list.sort_unstable_by_key(|e| (e.ts, e.ord));
    list
}

/// A top-up (and, rarely, a partial refund from the bank a day later). Returns the extra
/// amount the refund added.
fn topup(rng: &mut Rng, ev: &mut Events, user: u32, c: u8, ts: i64, amount: i64) -> i64 {
    ev.push(ts, user, c, amount, false, "topup", EXT_TOPUP);
    if rng.per_mille(10) {
        let refund = (amount / 10).max(1);
        ev.push(
            (ts + SECONDS_PER_DAY).min(END_TS),
            user,
            c,
            refund,
            false,
            "refund",
            EXT_BANK,
        );
        return refund;
    }
    0
}

fn rng_ts(rng: &mut Rng, start: i64) -> i64 {
    rng.between(start, END_TS)
}

/// Weekly payouts of 90% of each creator's settled balance, 1% fee; pending near the end.
fn add_payouts(rng: &mut Rng, users: &[User], ev: &mut Events) {
    let mut by_creator: Vec<Vec<usize>> = vec![Vec::new(); users.len()];
    let mut order: Vec<usize> = (0..ev.list.len()).collect();
    order.sort_unstable_by_key(|&i| (ev.list[i].ts, ev.list[i].ord));
    for i in order {
        let e = &ev.list[i];
        if users[e.user as usize].creator {
            by_creator[e.user as usize].push(i);
        }
    }
    for (ci, incoming) in by_creator.iter().enumerate() {
        if !users[ci].creator {
            continue;
        }
        let offset = rng.between(0, 6) * SECONDS_PER_DAY + 10 * 3_600;
        let mut next = START_TS + offset;
        let mut settled = [0i64; 3];
        let mut k = 0;
        let mut payouts = Vec::new();
        loop {
            while k < incoming.len() && ev.list[incoming[k]].ts < next {
                let e = &ev.list[incoming[k]];
                settled[e.currency as usize] += e.amount;
                k += 1;
            }
            if next > END_TS {
                break;
            }
            let pending = next > END_TS - PENDING_DAYS * SECONDS_PER_DAY;
            for c in 0..3 {
                if settled[c] >= MIN_PAYOUT[c] {
                    let amount = settled[c] / 10 * 9;
                    let fee = (amount / 100).max(1);
                    payouts.push((next, c as u8, amount, fee, pending));
                    if !pending {
                        settled[c] -= amount + fee;
                    }
                }
            }
            next += 7 * SECONDS_PER_DAY;
        }
        for (ts, c, amount, fee, pending) in payouts {
            ev.push(ts, ci as u32, c, -amount, pending, "payout", EXT_PAYOUT);
            ev.push(ts, ci as u32, c, -fee, pending, "fee", EXT_FEE);
        }
    }
}

fn write(db: &Path, plan: &Plan) -> Result<(), Error> {
    let mut conn = Connection::open(db).at(db)?;
    conn.execute_batch(&schema(StoreKind::Sqlite)).at(db)?;
    // A new file built in one go: no journal while building (a failed run leaves a file to
    // delete, never a half-valid ledger mistaken for a good one, since `generate` refuses to
    // reuse it without --force), a large page cache, then WAL for the services.
    conn.execute_batch(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;",
    )
    .at(db)?;
    let tx = conn.transaction().at(db)?;
    {
        let mut insert_user = tx
            .prepare("INSERT INTO users (id, created_at) VALUES (?1, ?2)")
            .at(db)?;
        for (id, created_at) in plan.users() {
            insert_user.execute(params![id, created_at]).at(db)?;
        }
        let mut insert_tx = tx
            .prepare(
                "INSERT INTO transactions (ts, user_id, currency, amount, status, category, counterparty) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .at(db)?;
        for r in plan.rows() {
            insert_tx
                .execute(params![
                    r.ts,
                    r.user,
                    r.currency,
                    r.amount,
                    r.status,
                    r.category,
                    r.counterparty
                ])
                .at(db)?;
        }
        let mut insert_account = tx
            .prepare("INSERT INTO accounts (user_id, currency, settled, pending) VALUES (?1, ?2, ?3, ?4)")
            .at(db)?;
        for (user, currency, settled, pending) in plan.accounts() {
            insert_account
                .execute(params![user, currency, settled, pending])
                .at(db)?;
        }
    }
    tx.commit().at(db)?;
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA journal_mode = WAL;")
        .at(db)?;
    Ok(())
}
