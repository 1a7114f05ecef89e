-- The payments ledger. Written by `payments generate`; read by both services; the Go
-- service appends transfers. See SPEC.md. Money is integer minor units.
PRAGMA journal_mode = WAL;

CREATE TABLE IF NOT EXISTS users (
    id         TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS accounts (
    user_id  TEXT NOT NULL REFERENCES users(id),
    currency TEXT NOT NULL,
    settled  INTEGER NOT NULL DEFAULT 0,
    pending  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, currency)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS transactions (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    ts           INTEGER NOT NULL,
    user_id      TEXT NOT NULL REFERENCES users(id),
    currency     TEXT NOT NULL,
    amount       INTEGER NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('settled', 'pending')),
    category     TEXT NOT NULL CHECK (category IN ('gift', 'topup', 'payout', 'refund', 'fee', 'transfer')),
    counterparty TEXT NOT NULL,
    transfer_id  TEXT
);

CREATE INDEX IF NOT EXISTS transactions_by_user ON transactions (user_id, seq);

CREATE TABLE IF NOT EXISTS transfers (
    idempotency_key TEXT PRIMARY KEY,
    request_hash    TEXT NOT NULL,
    transfer_id     TEXT NOT NULL,
    status_code     INTEGER NOT NULL,
    response        TEXT NOT NULL,
    created_at      INTEGER NOT NULL
) WITHOUT ROWID;
