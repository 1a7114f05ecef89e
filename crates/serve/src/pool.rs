//! The balancer's view of an app: the set of workers that may take traffic (swapped
//! whole with `ArcSwap`, written only by the supervisor), the app's [`Selection`], the
//! guard that counts a request in flight on a worker ([`InFlight`]), and — with `max_in_flight_per_worker` — the app's one FIFO queue of
//! requests waiting for a free worker slot.
//!
//! The queue exists for single-threaded CPU-bound workers: a request sent to a busy
//! worker waits behind whatever runs there (a 512-byte QR render: tens of ms), while one
//! held here goes to whichever worker frees first (M/G/k with a shared queue instead of
//! joining the shortest of k queues). Every claim of a slot and every hand-off happens
//! under the queue's lock, so a slot is never given twice; a slot freed goes to the
//! oldest waiter first, and a new request takes a slot only when no waiter can.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{Notify, oneshot};

use crate::backend::{Backend, WorkerState};
use crate::config::Balance;
use crate::selection::{self, Selection};

/// A request in flight on a backend; dropping it ends the request (and, in a pool with
/// `max_in_flight_per_worker`, hands the freed slot to the oldest waiting request).
#[derive(Debug)]
pub(crate) struct InFlight {
    backend: Arc<Backend>,
    waiting: AtomicBool,
    pool: Option<Arc<Pool>>,
}

impl InFlight {
    /// Counts a request in flight on `backend` until the guard drops, and as waiting for
    /// its response head until [`InFlight::head_received`]; with a `pool`, the end hands
    /// the freed slot on.
    fn new(backend: &Arc<Backend>, pool: Option<Arc<Pool>>) -> Self {
        backend.enter();
        InFlight {
            backend: backend.clone(),
            waiting: AtomicBool::new(true),
            pool,
        }
    }

    pub(crate) fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// The response head arrived: the worker answered (progress), and this request no
    /// longer waits, whatever its body does next.
    pub(crate) fn head_received(&self) {
        if self.waiting.swap(false, Ordering::Relaxed) {
            self.backend.head_arrived();
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.backend.leave(*self.waiting.get_mut());
        if let Some(pool) = self.pool.take()
            && pool.per_worker.load(Ordering::Relaxed) > 0
        {
            pool.dispatch();
        }
    }
}

/// The workers of one app that may take traffic. The supervisor adds a worker once its
/// health check passes and removes it the moment it fails, exits or starts draining;
/// the proxy reads a snapshot per request without locking.
#[derive(Debug)]
pub(crate) struct Pool {
    ready: ArcSwap<Vec<Arc<Backend>>>,
    // Serializes writers only; readers never take it.
    write: Mutex<()>,
    /// The app's `balance`; a live reload swaps it (one lock-free load per request).
    selection: ArcSwap<Box<dyn Selection>>,
    changed: Notify,
    /// `max_in_flight_per_worker` (0: no limit, no queue); a live reload changes it.
    per_worker: AtomicUsize,
    /// `max_queued`: waiting requests past this are refused at once.
    max_queued: AtomicUsize,
    /// Requests waiting for a slot, oldest first. Every slot claim of a limited pool
    /// happens under this lock.
    waiters: Mutex<VecDeque<Waiter>>,
}

/// A request waiting in the queue: where its slot is sent, and the worker it must not
/// get (its first attempt failed there), if any.
#[derive(Debug)]
struct Waiter {
    tx: oneshot::Sender<InFlight>,
    avoid: Option<Arc<Backend>>,
}

/// Why a limited pool gave a request no worker slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No worker was ready within `wait_for_worker`.
    NoWorker,
    /// Every slot was taken and `max_queued` requests were waiting already.
    QueueFull,
    /// It waited `queue_timeout` and no slot came free.
    QueueTimeout,
}

impl Pool {
    /// An empty pool choosing by `balance` (behind rendezvous hashing with `sticky`).
    pub(crate) fn new(balance: Balance, sticky: bool) -> Self {
        Self {
            ready: ArcSwap::from_pointee(Vec::new()),
            write: Mutex::new(()),
            selection: ArcSwap::from_pointee(selection::for_app(balance, sticky)),
            changed: Notify::new(),
            per_worker: AtomicUsize::new(0),
            max_queued: AtomicUsize::new(0),
            waiters: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn add(self: &Arc<Self>, b: Arc<Backend>) {
        {
            let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
            b.set_state(WorkerState::Ready);
            let mut next: Vec<Arc<Backend>> = (**self.ready.load()).clone();
            next.retain(|x| !Arc::ptr_eq(x, &b));
            next.push(b);
            next.sort_by_key(|x| x.index());
            self.ready.store(Arc::new(next));
        }
        self.changed.notify_waiters();
        // A new worker's slots go to the requests waiting for one.
        self.dispatch();
    }

    /// Sets `max_in_flight_per_worker` (0: off) and `max_queued` (start and live reload);
    /// waiting requests that now fit are sent at once.
    pub(crate) fn set_limit(self: &Arc<Self>, per_worker: usize, max_queued: usize) {
        self.max_queued.store(max_queued, Ordering::Relaxed);
        self.per_worker.store(per_worker, Ordering::Relaxed);
        self.dispatch();
    }

    /// Whether requests go through the slot queue ([`Pool::acquire`]).
    pub(crate) fn limited(&self) -> bool {
        self.per_worker.load(Ordering::Relaxed) > 0
    }

    /// Requests waiting for a slot now.
    pub(crate) fn queued(&self) -> usize {
        let q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        q.iter().filter(|w| !w.tx.is_closed()).count()
    }

    /// Counts a request in flight on `b`, which `select` picked (the unlimited path and
    /// mirror copies): its end still hands a slot on if the pool is limited meanwhile.
    pub(crate) fn begin(self: &Arc<Self>, b: &Arc<Backend>) -> InFlight {
        InFlight::new(b, Some(self.clone()))
    }

    /// A slot on a ready worker for a request of a limited pool: at once when one is
    /// free and nobody waits for it, else after waiting in the queue (FIFO) up to
    /// `queue_timeout`. First, with no ready worker at all, it waits up to
    /// `wait_for_worker` for one, as [`Pool::select_wait`] does. `avoid`: the worker a
    /// first attempt failed on, used only when no other worker is ready.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        avoid: Option<&Arc<Backend>>,
        wait_for_worker: Duration,
        queue_timeout: Duration,
    ) -> Result<InFlight, Refused> {
        if self.ready.load().is_empty() {
            let deadline = tokio::time::Instant::now() + wait_for_worker;
            loop {
                let notified = self.changed.notified();
                if !self.ready.load().is_empty() {
                    break;
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Err(Refused::NoWorker);
                }
            }
        }
        let rx = {
            let mut spare = Vec::new();
            let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            // Those already waiting go first.
            self.dispatch_locked(&mut q, &mut spare);
            let claimed = if q.is_empty() {
                self.claim(avoid.map(|a| &**a))
            } else {
                None
            };
            let got = match claimed {
                Some(f) => Ok(f),
                None => {
                    let max = self.max_queued.load(Ordering::Relaxed);
                    if q.len() >= max {
                        q.retain(|w| !w.tx.is_closed());
                    }
                    if q.len() >= max {
                        Err(None)
                    } else {
                        let (tx, rx) = oneshot::channel();
                        q.push_back(Waiter {
                            tx,
                            avoid: avoid.cloned(),
                        });
                        Err(Some(rx))
                    }
                }
            };
            drop(q);
            drop(spare);
            match got {
                Ok(f) => return Ok(f),
                Err(Some(rx)) => rx,
                Err(None) => return Err(Refused::QueueFull),
            }
        };
        match tokio::time::timeout(queue_timeout, rx).await {
            Ok(Ok(f)) => Ok(f),
            // The pool itself went away (its app was removed): no worker will come.
            Ok(Err(_)) => Err(Refused::NoWorker),
            Err(_) => Err(Refused::QueueTimeout),
        }
    }

    /// Hands free slots to waiting requests, oldest first (after a slot was freed, a
    /// worker joined, or the limit changed).
    fn dispatch(self: &Arc<Self>) {
        let mut spare = Vec::new();
        {
            let mut q = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            self.dispatch_locked(&mut q, &mut spare);
        }
        // A slot sent to a waiter that had just given up comes back here; dropping it
        // (outside the lock) frees it and dispatches again.
        drop(spare);
    }

    fn dispatch_locked(self: &Arc<Self>, q: &mut VecDeque<Waiter>, spare: &mut Vec<InFlight>) {
        let mut i = 0;
        while i < q.len() {
            if q[i].tx.is_closed() {
                q.remove(i);
                continue;
            }
            match self.claim(q[i].avoid.as_deref()) {
                Some(f) => {
                    let w = q.remove(i).expect("index checked");
                    if let Err(f) = w.tx.send(f) {
                        spare.push(f);
                    }
                }
                // Nothing free at all: the others wait too.
                None if q[i].avoid.is_none() => break,
                // Only the worker this one avoids is free: the next may take it.
                None => i += 1,
            }
        }
    }

    /// A slot on a worker with one free (fewer than `max_in_flight_per_worker` in
    /// flight), chosen among those by the app's `balance`; stalled workers and `avoid`
    /// only when no other worker is ready at all. Called under the queue's lock only.
    fn claim(self: &Arc<Self>, avoid: Option<&Backend>) -> Option<InFlight> {
        let limit = match self.per_worker.load(Ordering::Relaxed) {
            0 => usize::MAX,
            n => n,
        };
        let set = self.ready.load();
        let others = set.iter().any(|b| !b.avoided(avoid));
        let free: Vec<Arc<Backend>> = set
            .iter()
            .filter(|b| (!others || !b.avoided(avoid)) && b.in_flight() < limit)
            .cloned()
            .collect();
        if free.is_empty() {
            return None;
        }
        let b = self.selection.load().select(&free, None, None).clone();
        Some(self.begin(&b))
    }

    pub(crate) fn remove(&self, b: &Arc<Backend>) {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        let mut next: Vec<Arc<Backend>> = (**self.ready.load()).clone();
        next.retain(|x| !Arc::ptr_eq(x, b));
        self.ready.store(Arc::new(next));
    }

    /// Selects by `balance` (and a sticky key, with `sticky`) from now on (a live
    /// reload; a new rotation starts afresh).
    pub(crate) fn set_selection(&self, balance: Balance, sticky: bool) {
        self.selection
            .store(Arc::new(selection::for_app(balance, sticky)));
    }

    pub(crate) fn len(&self) -> usize {
        self.ready.load().len()
    }

    /// A ready worker, or `None` when there is none right now. `key`: the hash of the
    /// request's `sticky_worker` key, for the app's [`Selection`] (see
    /// [`selection::Rendezvous`]).
    pub(crate) fn select(&self, avoid: Option<&Backend>, key: Option<u64>) -> Option<Arc<Backend>> {
        let set = self.ready.load();
        if set.is_empty() {
            return None;
        }
        Some(self.selection.load().select(&set, avoid, key).clone())
    }

    /// Like [`Pool::select`], waiting up to `wait` for a worker to become ready (start-up,
    /// or the only worker being replaced).
    pub(crate) async fn select_wait(
        &self,
        avoid: Option<&Backend>,
        key: Option<u64>,
        wait: std::time::Duration,
    ) -> Option<Arc<Backend>> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            if let Some(b) = self.select(avoid, key) {
                return Some(b);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::backend::test_backends;
    use crate::selection::{LeastConn, PowerOfTwo, RoundRobin};
    use std::net::SocketAddr;

    fn set(n: usize) -> Vec<Arc<Backend>> {
        test_backends(0..n)
    }

    /// A request in flight on `b`, outside any pool.
    fn begin(b: &Arc<Backend>) -> InFlight {
        InFlight::new(b, None)
    }

    /// A worker holding requests it does not answer is passed over by every method until
    /// it answers; an idle one or one that answers is not stalled, however long it idled.
    #[test]
    fn a_stalled_worker_gets_nothing_new_until_it_answers() {
        let addr = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let quick = |i| {
            Arc::new(
                Backend::new("t".into(), i, addr(2000 + i as u16), 0)
                    .with_stall_after(Duration::from_millis(1)),
            )
        };
        // Worker 1 never stalls in this test, however the machine pauses it.
        let never = Arc::new(
            Backend::new("t".into(), 1, addr(2001), 0).with_stall_after(Duration::from_secs(3600)),
        );
        let b = vec![quick(0), never];
        std::thread::sleep(Duration::from_millis(5));
        assert!(!b[0].stalled(), "idle is not stalled");
        let stuck = begin(&b[0]); // the wait starts now, not at creation
        assert!(!Backend::new("t".into(), 9, addr(2009), 0).stalled());
        std::thread::sleep(Duration::from_millis(5));
        assert!(b[0].stalled());
        // Worker 1 is busier, yet the only one that can answer.
        let busy: Vec<_> = (0..3).map(|_| begin(&b[1])).collect();
        busy[0].head_received();
        let (rr, lc) = (RoundRobin::default(), LeastConn::default());
        for _ in 0..4 {
            assert_eq!(rr.select(&b, None, None).index(), 1);
            assert_eq!(lc.select(&b, None, None).index(), 1);
            assert_eq!(PowerOfTwo.select(&b, None, None).index(), 1);
        }
        // An answer makes it eligible again (checked with a threshold no pause can reach).
        let patient = Arc::new(
            Backend::new("t".into(), 3, addr(2003), 0).with_stall_after(Duration::from_secs(3600)),
        );
        let _g = begin(&patient);
        let g2 = begin(&patient);
        g2.head_received();
        assert!(!patient.stalled());
        drop(stuck);
        assert!(!b[0].stalled(), "nothing in flight: not stalled");
    }

    /// A response whose head has arrived and whose body still streams (a download,
    /// server-sent events) is progress: however long it lasts, its worker is not
    /// stalled, and keeps getting new requests.
    #[test]
    fn a_streaming_response_does_not_make_its_worker_stalled() {
        let b = Arc::new(
            Backend::new("t".into(), 0, SocketAddr::from(([127, 0, 0, 1], 2100)), 0)
                .with_stall_after(Duration::from_millis(1)),
        );
        let stream = begin(&b);
        stream.head_received();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(b.in_flight(), 1, "the stream is still in flight");
        assert!(!b.stalled(), "a streaming body made its worker stalled");
        let other = Arc::new(Backend::new(
            "t".into(),
            1,
            SocketAddr::from(([127, 0, 0, 1], 2101)),
            0,
        ));
        let rr = RoundRobin::default();
        let both = vec![b.clone(), other];
        let picks: Vec<usize> = (0..4)
            .map(|_| rr.select(&both, None, None).index())
            .collect();
        assert!(
            picks.contains(&0),
            "the streaming worker got nothing: {picks:?}"
        );
        // A request that waits for its head behind the stream does count.
        let waiting = begin(&b);
        std::thread::sleep(Duration::from_millis(5));
        assert!(b.stalled());
        drop(waiting);
        assert!(!b.stalled());
    }

    fn limited_pool(workers: usize, per_worker: usize, max_queued: usize) -> Arc<Pool> {
        let pool = Arc::new(Pool::new(Balance::LeastConn, false));
        pool.set_limit(per_worker, max_queued);
        for b in set(workers) {
            pool.add(b);
        }
        pool
    }

    /// Waits (yielding) until `n` requests are queued.
    async fn until_queued(pool: &Pool, n: usize) {
        for _ in 0..10_000 {
            if pool.queued() == n {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("never {n} queued: {}", pool.queued());
    }

    /// With one slot per worker, the requests past the slots wait; each freed slot goes
    /// to the oldest waiter (whichever worker freed it), never to two requests at once.
    #[tokio::test]
    async fn a_freed_slot_goes_to_the_oldest_waiter_and_never_twice() {
        let pool = limited_pool(2, 1, 10);
        let long = Duration::from_secs(3600);
        let a = pool.acquire(None, long, long).await.unwrap();
        let b = pool.acquire(None, long, long).await.unwrap();
        assert_ne!(a.backend().index(), b.backend().index());
        let p = pool.clone();
        let first = tokio::spawn(async move { p.acquire(None, long, long).await });
        until_queued(&pool, 1).await;
        let p = pool.clone();
        let second = tokio::spawn(async move { p.acquire(None, long, long).await });
        until_queued(&pool, 2).await;
        let (b_index, a_index) = (b.backend().index(), a.backend().index());
        drop(b);
        let got = first.await.unwrap().unwrap();
        assert_eq!(
            got.backend().index(),
            b_index,
            "the oldest waiter gets the freed slot"
        );
        assert_eq!(pool.queued(), 1);
        assert!(!second.is_finished());
        assert_eq!(got.backend().in_flight(), 1, "one request per slot");
        drop(a);
        let got2 = second.await.unwrap().unwrap();
        assert_eq!(got2.backend().index(), a_index);
        assert_eq!(pool.queued(), 0);
    }

    /// The queue is bounded: past `max_queued` a request is refused at once; a waiter
    /// gives up after `queue_timeout`, and the slot freed later is not lost to it.
    #[tokio::test]
    async fn the_queue_refuses_when_full_and_waiters_time_out() {
        let pool = limited_pool(1, 1, 1);
        let long = Duration::from_secs(3600);
        let held = pool.acquire(None, long, long).await.unwrap();
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.acquire(None, long, long).await });
        until_queued(&pool, 1).await;
        let full = pool.acquire(None, long, long).await.unwrap_err();
        assert_eq!(full, Refused::QueueFull);
        waiter.abort();
        let _ = waiter.await;
        let timed = pool
            .acquire(None, long, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(timed, Refused::QueueTimeout);
        drop(held);
        // The slot is free again, for the next request.
        let again = pool.acquire(None, long, long).await.unwrap();
        assert_eq!(again.backend().in_flight(), 1);
    }

    /// A resend avoids the worker its first attempt failed on, while another worker is
    /// ready: it waits for that one's slot even if the avoided worker's is free.
    #[tokio::test]
    async fn a_resend_waits_for_another_worker_than_the_one_it_failed_on() {
        let pool = limited_pool(2, 1, 10);
        let long = Duration::from_secs(3600);
        let a = pool.acquire(None, long, long).await.unwrap();
        let b = pool.acquire(None, long, long).await.unwrap();
        let failed_on = a.backend().clone();
        drop(a);
        let p = pool.clone();
        let avoid = failed_on.clone();
        let resend = tokio::spawn(async move { p.acquire(Some(&avoid), long, long).await });
        until_queued(&pool, 1).await;
        let b_index = b.backend().index();
        drop(b);
        let got = resend.await.unwrap().unwrap();
        assert_eq!(got.backend().index(), b_index);
        assert_ne!(got.backend().index(), failed_on.index());
    }
}
