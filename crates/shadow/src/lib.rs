//! The shadow mirroring proxy, the replay driver and the durable SQLite store of comparison results.
