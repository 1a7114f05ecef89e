//! The payments ledger model, read model, balance and stats, canonical JSON.
