//! Feature pins, no code. Cargo unifies a dependency's features over what is being built:
//! `cargo test` adds the dev-dependencies (criterion, proptest, rqrr), which turn on a few
//! features of shared crates (serde, hashbrown, getrandom, zerocopy and through it syn),
//! and a crate built with other features is a different crate: tokio, hyper, h2, serde,
//! every proc macro and every workspace crate were compiled twice, once for
//! `cargo build --release` and again for `cargo test --release`. Depending on this crate
//! turns those features on in both builds (the cargo-hakari "workspace hack" pattern).
//!
//! It must NOT hold code, and must NOT pin a feature that changes behaviour (tokio's
//! `test-util` is one: it puts a lock in every `Instant::now` of the runtime).
