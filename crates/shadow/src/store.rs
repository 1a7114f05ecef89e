//! The durable store: one SQLite file (WAL) written by one dedicated thread.
//!
//! Writers never touch SQLite on a request path: they hand a message to a bounded channel
//! (`try_send`; a full channel is counted, not waited on). Each message is one
//! transaction, so a sample and the counters that include it land together, and a
//! `SIGKILL` loses nothing that was committed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};
use scalpel_diff::{DiffKind, Difference};

use crate::ShadowError;
use crate::model::SkipReason;
use crate::tally::{EndpointTally, FieldTally, Sample, SampleResponse, Tally};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS skipped (reason TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS redaction_withheld (part TEXT PRIMARY KEY, count INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS endpoints (
    endpoint TEXT PRIMARY KEY, compared INTEGER NOT NULL, signature_overflow INTEGER NOT NULL,
    failed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS endpoint_errors (
    endpoint TEXT NOT NULL, kind TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (endpoint, kind));
CREATE TABLE IF NOT EXISTS fields (
    endpoint TEXT NOT NULL, path TEXT NOT NULL, kind TEXT NOT NULL,
    raw INTEGER NOT NULL, noise INTEGER NOT NULL,
    PRIMARY KEY (endpoint, path, kind));
CREATE TABLE IF NOT EXISTS signatures (
    endpoint TEXT NOT NULL, signature TEXT NOT NULL, count INTEGER NOT NULL,
    PRIMARY KEY (endpoint, signature));
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    recorded_at_ms INTEGER NOT NULL,
    endpoint TEXT NOT NULL, method TEXT NOT NULL, target TEXT NOT NULL,
    request_headers TEXT NOT NULL, request_body BLOB NOT NULL,
    primary_status INTEGER NOT NULL, primary_headers TEXT NOT NULL, primary_body BLOB NOT NULL,
    candidate_status INTEGER NOT NULL, candidate_headers TEXT NOT NULL, candidate_body BLOB NOT NULL,
    secondary_status INTEGER, secondary_headers TEXT, secondary_body BLOB,
    differences TEXT NOT NULL, noise_differences TEXT NOT NULL);
";

/// Messages queued for the writer thread.
const CHANNEL: usize = 256;

enum Msg {
    Write {
        tally: Option<Box<Tally>>,
        sample: Option<Box<Sample>>,
    },
    Sync(mpsc::Sender<()>),
}

/// A handle on the writer thread of one store file.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    tx: SyncSender<Msg>,
    thread: Mutex<Option<JoinHandle<()>>>,
    dropped: AtomicU64,
    /// Shared with the writer thread, which counts each transaction SQLite refused.
    failed: Arc<AtomicU64>,
}

/// What a store file holds.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub(crate) meta: BTreeMap<String, String>,
    pub(crate) tally: Tally,
    pub(crate) samples: Vec<Sample>,
}

impl StoredRun {
    /// The run's settings (`mode`, `primary`, `candidate`, `secondary`, noise thresholds…).
    pub fn meta(&self) -> &BTreeMap<String, String> {
        &self.meta
    }

    /// The samples, oldest first.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }
}

fn db_err(path: &Path) -> impl Fn(rusqlite::Error) -> ShadowError + '_ {
    move |e| ShadowError::Store {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn open_connection(path: &Path) -> Result<Connection, ShadowError> {
    // The store holds samples of real traffic: a new file is its owner's alone (SQLite
    // gives the -wal and -shm files the database file's mode).
    match scalpel_requests::private_file()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(ShadowError::Store {
                path: path.to_path_buf(),
                reason: e.to_string(),
            });
        }
    }
    let conn = Connection::open(path).map_err(db_err(path))?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(db_err(path))?;
    // FULL: every commit reaches the disk, so a sample recorded is a sample kept.
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(db_err(path))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(db_err(path))?;
    conn.execute_batch(SCHEMA).map_err(db_err(path))?;
    // Stores written before failed requests were counted apart get the column.
    // Then each primary or candidate error was one failed request: the column is filled
    // from them, so an old run's failures are not forgotten (a verdict must not pass).
    if !has_failed_column(&conn).map_err(db_err(path))? {
        conn.execute_batch(
            "BEGIN;
             ALTER TABLE endpoints ADD COLUMN failed INTEGER NOT NULL DEFAULT 0;
             UPDATE endpoints SET failed = (
                 SELECT COALESCE(SUM(count), 0) FROM endpoint_errors e
                 WHERE e.endpoint = endpoints.endpoint AND e.kind NOT LIKE 'secondary:%');
             COMMIT;",
        )
        .map_err(db_err(path))?;
    }
    Ok(conn)
}

fn has_table(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT name FROM sqlite_master WHERE type='table' AND name=?1",
        [name],
        |r| r.get::<_, String>(0),
    )
    .optional()
    .map(|n| n.is_some())
}

fn has_failed_column(conn: &Connection) -> rusqlite::Result<bool> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info('endpoints')")?;
    let names = st.query_map([], |r| r.get::<_, String>(0))?;
    for n in names {
        if n? == "failed" {
            return Ok(true);
        }
    }
    Ok(false)
}

impl Store {
    /// Opens (creating if needed) a store and starts its writer thread. `meta` is
    /// recorded as the run's settings; existing counters and samples are kept, so a
    /// restarted proxy resumes counting.
    pub fn open(path: &Path, meta: &[(&str, String)]) -> Result<(Self, StoredRun), ShadowError> {
        let conn = open_connection(path)?;
        for (k, v) in meta {
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![k, v],
            )
            .map_err(db_err(path))?;
        }
        let existing = read_run(&conn, path)?;
        let (tx, rx) = mpsc::sync_channel(CHANNEL);
        let thread_path = path.to_path_buf();
        let failed = Arc::new(AtomicU64::new(0));
        let writer_failed = failed.clone();
        let thread = std::thread::Builder::new()
            .name("scalpel-store".into())
            .spawn(move || writer(conn, rx, &thread_path, &writer_failed))
            .map_err(|e| ShadowError::Store {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        Ok((
            Self {
                path: path.to_path_buf(),
                tx,
                thread: Mutex::new(Some(thread)),
                dropped: AtomicU64::new(0),
                failed,
            },
            existing,
        ))
    }

    /// Reads a store for a report.
    pub fn read(path: &Path) -> Result<StoredRun, ShadowError> {
        if !path.exists() {
            return Err(ShadowError::Store {
                path: path.to_path_buf(),
                reason: "no such file".into(),
            });
        }
        let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(db_err(path))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(db_err(path))?;
        if !has_table(&conn, "meta").map_err(db_err(path))? {
            return Err(ShadowError::Store {
                path: path.to_path_buf(),
                reason: "not a scalpel shadow store".into(),
            });
        }
        read_run(&conn, path)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Messages dropped because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn write(&self, tally: Option<Tally>, sample: Option<Sample>) -> bool {
        let msg = Msg::Write {
            tally: tally.map(Box::new),
            sample: sample.map(Box::new),
        };
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Queues the counters, waiting for room if the writer is behind (shutdown only:
    /// blocking). `false` when the writer is gone.
    pub(crate) fn write_waiting(&self, tally: Tally) -> bool {
        let msg = Msg::Write {
            tally: Some(Box::new(tally)),
            sample: None,
        };
        self.tx.send(msg).is_ok()
    }

    /// Blocks until everything queued so far is committed. Blocking: call it from a
    /// plain thread or `spawn_blocking`, not from an async task.
    pub fn sync(&self) {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Msg::Sync(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    /// Writes that failed inside SQLite (logged as they happen).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Closing the channel ends the writer once it has drained.
        let (dead_tx, _) = mpsc::sync_channel(1);
        drop(std::mem::replace(&mut self.tx, dead_tx));
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

fn writer(mut conn: Connection, rx: Receiver<Msg>, path: &Path, failed: &AtomicU64) {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Sync(done) => {
                let _ = done.send(());
            }
            Msg::Write { tally, sample } => {
                if let Err(e) = write_tx(&mut conn, tally.as_deref(), sample.as_deref()) {
                    // Counted, not only logged: a run whose evidence did not reach the
                    // disk must say so at the end (`Recorder::store_failed`).
                    failed.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(store = %path.display(), error = %e, "store write failed");
                }
            }
        }
    }
}

fn write_tx(
    conn: &mut Connection,
    tally: Option<&Tally>,
    sample: Option<&Sample>,
) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    if let Some(s) = sample {
        insert_sample(&tx, s)?;
    }
    if let Some(t) = tally {
        write_tally(&tx, t)?;
    }
    tx.commit()
}

fn write_tally(tx: &rusqlite::Transaction<'_>, t: &Tally) -> rusqlite::Result<()> {
    tx.execute_batch(
        "DELETE FROM skipped; DELETE FROM endpoints; DELETE FROM endpoint_errors;
         DELETE FROM fields; DELETE FROM signatures; DELETE FROM redaction_withheld;",
    )?;
    let mut st = tx.prepare_cached("INSERT INTO skipped (reason, count) VALUES (?1, ?2)")?;
    for (r, n) in &t.skipped {
        st.execute(params![r.as_str(), *n as i64])?;
    }
    let mut st =
        tx.prepare_cached("INSERT INTO redaction_withheld (part, count) VALUES (?1, ?2)")?;
    for (part, n) in &t.redaction_withheld {
        st.execute(params![part, *n as i64])?;
    }
    let mut ep_st = tx.prepare_cached(
        "INSERT INTO endpoints (endpoint, compared, signature_overflow, failed)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    let mut err_st = tx.prepare_cached(
        "INSERT INTO endpoint_errors (endpoint, kind, count) VALUES (?1, ?2, ?3)",
    )?;
    let mut f_st = tx.prepare_cached(
        "INSERT INTO fields (endpoint, path, kind, raw, noise) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut sig_st = tx.prepare_cached(
        "INSERT INTO signatures (endpoint, signature, count) VALUES (?1, ?2, ?3)",
    )?;
    for (name, ep) in &t.endpoints {
        ep_st.execute(params![
            name,
            ep.compared as i64,
            ep.signature_overflow as i64,
            ep.failed as i64
        ])?;
        for (k, n) in &ep.errors {
            err_st.execute(params![name, k, *n as i64])?;
        }
        for ((path, kind), f) in &ep.fields {
            f_st.execute(params![
                name,
                path,
                kind.as_str(),
                f.raw as i64,
                f.noise as i64
            ])?;
        }
        for (sig, n) in &ep.signatures {
            sig_st.execute(params![name, sig, *n as i64])?;
        }
    }
    Ok(())
}

fn headers_json(h: &[(String, String)]) -> String {
    serde_json::to_string(h).unwrap_or_else(|_| "[]".into())
}

fn insert_sample(tx: &rusqlite::Transaction<'_>, s: &Sample) -> rusqlite::Result<()> {
    let diffs = serde_json::to_string(&s.differences).unwrap_or_else(|_| "[]".into());
    let noise = serde_json::to_string(&s.noise_differences).unwrap_or_else(|_| "[]".into());
    tx.execute(
        "INSERT INTO samples (recorded_at_ms, endpoint, method, target, request_headers,
            request_body, primary_status, primary_headers, primary_body, candidate_status,
            candidate_headers, candidate_body, secondary_status, secondary_headers,
            secondary_body, differences, noise_differences)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
        params![
            s.recorded_at_ms as i64,
            s.endpoint,
            s.method,
            s.target,
            headers_json(&s.request_headers),
            &s.request_body[..],
            s.primary.status,
            headers_json(&s.primary.headers),
            &s.primary.body[..],
            s.candidate.status,
            headers_json(&s.candidate.headers),
            &s.candidate.body[..],
            s.secondary.as_ref().map(|r| r.status),
            s.secondary.as_ref().map(|r| headers_json(&r.headers)),
            s.secondary.as_ref().map(|r| r.body.to_vec()),
            diffs,
            noise,
        ],
    )?;
    Ok(())
}

/// A stored count; a negative one (a damaged or hand-edited file) reads as 0.
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

fn read_run(conn: &Connection, path: &Path) -> Result<StoredRun, ShadowError> {
    read_run_inner(conn).map_err(db_err(path))
}

fn read_run_inner(conn: &Connection) -> rusqlite::Result<StoredRun> {
    let mut tally = Tally::default();
    read_skipped(conn, &mut tally)?;
    // A store from before failed requests were counted apart (read-only, so not
    // migrated): each primary or candidate error was one failed request then.
    let has_failed = has_failed_column(conn)?;
    read_endpoints(conn, has_failed, &mut tally)?;
    read_errors(conn, has_failed, &mut tally)?;
    read_fields(conn, &mut tally)?;
    read_signatures(conn, &mut tally)?;
    read_withheld(conn, &mut tally)?;
    Ok(StoredRun {
        meta: read_meta(conn)?,
        tally,
        samples: read_samples(conn)?,
    })
}

/// The run's settings (`mode`, the upstreams, the noise rule…).
fn read_meta(conn: &Connection) -> rusqlite::Result<BTreeMap<String, String>> {
    let mut meta = BTreeMap::new();
    let mut st = conn.prepare("SELECT key, value FROM meta")?;
    for row in st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
        let (k, v) = row?;
        meta.insert(k, v);
    }
    Ok(meta)
}

/// Parts of kept samples withheld by redaction; a store from before they were counted
/// (read-only: no table) has none.
fn read_withheld(conn: &Connection, tally: &mut Tally) -> rusqlite::Result<()> {
    if has_table(conn, "redaction_withheld")? {
        let mut st = conn.prepare("SELECT part, count FROM redaction_withheld")?;
        for row in st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (part, n) = row?;
            tally.redaction_withheld.insert(part, count(n));
        }
    }
    Ok(())
}

/// Skipped requests by reason (reasons this version does not know are left out).
fn read_skipped(conn: &Connection, tally: &mut Tally) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT reason, count FROM skipped")?;
    for row in st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
        let (reason, n) = row?;
        if let Some(r) = SkipReason::ALL.iter().find(|r| r.as_str() == reason) {
            tally.skipped.insert(*r, count(n));
        }
    }
    Ok(())
}

/// Each endpoint's counts; `failed` is -1 (counted from the errors) in an old store.
fn read_endpoints(conn: &Connection, has_failed: bool, tally: &mut Tally) -> rusqlite::Result<()> {
    let sql = if has_failed {
        "SELECT endpoint, compared, signature_overflow, failed FROM endpoints"
    } else {
        "SELECT endpoint, compared, signature_overflow, -1 FROM endpoints"
    };
    let mut st = conn.prepare(sql)?;
    for row in st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, i64>(3)?,
        ))
    })? {
        let (name, compared, overflow, failed) = row?;
        tally.endpoints.insert(
            name,
            EndpointTally {
                compared: count(compared),
                failed: count(failed),
                signature_overflow: count(overflow),
                errors: BTreeMap::new(),
                fields: BTreeMap::new(),
                signatures: HashMap::new(),
            },
        );
    }
    Ok(())
}

/// Failed sides by endpoint and kind; in an old store, each primary or candidate error
/// also counts as a failed request.
fn read_errors(conn: &Connection, has_failed: bool, tally: &mut Tally) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT endpoint, kind, count FROM endpoint_errors")?;
    for row in st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })? {
        let (name, kind, n) = row?;
        let ep = tally.endpoint(&name);
        if !has_failed && !kind.starts_with("secondary:") {
            ep.failed += count(n);
        }
        *ep.errors.entry(current_kind(kind)).or_default() += count(n);
    }
    Ok(())
}

/// How often each field differed, real and as noise.
fn read_fields(conn: &Connection, tally: &mut Tally) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT endpoint, path, kind, raw, noise FROM fields")?;
    for row in st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
        ))
    })? {
        let (name, path, kind, raw, noise) = row?;
        if let Some(kind) = DiffKind::parse(&kind) {
            tally.endpoint(&name).fields.insert(
                (path, kind),
                FieldTally {
                    raw: count(raw),
                    noise: count(noise),
                },
            );
        }
    }
    Ok(())
}

/// The counted difference signatures a mismatch is decided from.
fn read_signatures(conn: &Connection, tally: &mut Tally) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT endpoint, signature, count FROM signatures")?;
    for row in st.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })? {
        let (name, sig, n) = row?;
        tally.endpoint(&name).signatures.insert(sig, count(n));
    }
    Ok(())
}

/// The kept samples, oldest first.
fn read_samples(conn: &Connection) -> rusqlite::Result<Vec<Sample>> {
    let mut st = conn.prepare(
        "SELECT recorded_at_ms, endpoint, method, target, request_headers, request_body,
            primary_status, primary_headers, primary_body, candidate_status, candidate_headers,
            candidate_body, secondary_status, secondary_headers, secondary_body, differences,
            noise_differences FROM samples ORDER BY id",
    )?;
    let headers =
        |s: String| -> Vec<(String, String)> { serde_json::from_str(&s).unwrap_or_default() };
    let diffs = |s: String| -> Vec<Difference> { serde_json::from_str(&s).unwrap_or_default() };
    let rows = st.query_map([], |r| {
        let secondary = match r.get::<_, Option<u16>>(12)? {
            Some(status) => Some(SampleResponse {
                status,
                headers: headers(r.get::<_, Option<String>>(13)?.unwrap_or_default()),
                body: Bytes::from(r.get::<_, Option<Vec<u8>>>(14)?.unwrap_or_default()),
            }),
            None => None,
        };
        Ok(Sample {
            recorded_at_ms: count(r.get::<_, i64>(0)?),
            endpoint: r.get(1)?,
            method: r.get(2)?,
            target: r.get(3)?,
            request_headers: headers(r.get(4)?),
            request_body: Bytes::from(r.get::<_, Vec<u8>>(5)?),
            primary: SampleResponse {
                status: r.get(6)?,
                headers: headers(r.get(7)?),
                body: Bytes::from(r.get::<_, Vec<u8>>(8)?),
            },
            candidate: SampleResponse {
                status: r.get(9)?,
                headers: headers(r.get(10)?),
                body: Bytes::from(r.get::<_, Vec<u8>>(11)?),
            },
            secondary,
            differences: diffs(r.get(15)?),
            noise_differences: diffs(r.get(16)?),
        })
    })?;
    rows.collect()
}

/// A failed side's kind as written now (`side:KIND`, KIND a `scalpel_http::ErrorKind`
/// name). Stores written before the one vocabulary named a body cut short `body`
/// (`candidate:body`): read as `body_cut`, so an old run's failures keep counting under
/// the name a new run writes.
fn current_kind(kind: String) -> String {
    match kind.strip_suffix(":body") {
        Some(side) => format!("{side}:body_cut"),
        None => kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store written before the one vocabulary of failures (`candidate:body` for a body
    /// cut short) reads back with `scalpel_http::ErrorKind`'s names, its counts whole,
    /// beside what a newer run added under the new name.
    #[test]
    fn stores_from_before_the_one_error_vocabulary_read_with_its_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.execute_batch(
            "INSERT INTO endpoints VALUES ('/a', 5, 0, 4);
             INSERT INTO endpoint_errors VALUES ('/a', 'candidate:body', 2),
                 ('/a', 'primary:body', 1), ('/a', 'candidate:body_cut', 4),
                 ('/a', 'primary:timeout', 3);",
        )
        .unwrap();
        drop(conn);
        let read = Store::read(&path).unwrap();
        let errors = &read.tally.endpoints["/a"].errors;
        let names: Vec<(&str, u64)> = errors.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(
            names,
            [
                ("candidate:body_cut", 6),
                ("primary:body_cut", 1),
                ("primary:timeout", 3)
            ]
        );
        for (kind, _) in names {
            let (_, name) = kind.split_once(':').unwrap();
            assert!(scalpel_http::ErrorKind::from_name(name).is_some(), "{kind}");
        }
    }

    /// A store written before failed requests had their own column: opened (migrated)
    /// or only read, its failures still count, so its verdict cannot turn into a pass.
    #[test]
    fn stores_from_before_the_failed_column_keep_their_failures() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let conn = Connection::open(&path).unwrap();
        // The old `endpoints` first; the rest of the schema is unchanged.
        conn.execute_batch(
            "CREATE TABLE endpoints (endpoint TEXT PRIMARY KEY, compared INTEGER NOT NULL,
                 signature_overflow INTEGER NOT NULL);",
        )
        .unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        conn.execute_batch(
            "INSERT INTO endpoints VALUES ('/a', 5, 0);
             INSERT INTO endpoint_errors VALUES ('/a', 'candidate:timeout', 2),
                 ('/a', 'primary:connect', 1), ('/a', 'secondary:connect', 4);",
        )
        .unwrap();
        drop(conn);
        let read = Store::read(&path).unwrap();
        assert_eq!(read.tally.endpoints["/a"].failed, 3);
        let (_store, opened) = Store::open(&path, &[]).unwrap();
        assert_eq!(opened.tally.endpoints["/a"].failed, 3);
        assert_eq!(opened.tally.endpoints["/a"].compared, 5);
    }
}
