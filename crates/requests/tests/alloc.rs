//! `render_into` must not allocate once warmed up: counted with a real global allocator.
//! (A separate test binary, so no other test's allocations interfere; and only the measuring
//! thread's allocations count: the harness's main thread allocates when it prints another
//! test's result, which once made this test see 5 allocations that were not its own.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use scalpel_requests::{DataSet, Order, RenderedRequest, RequestSet, RequestTemplate};

struct Counting;

thread_local! {
    // Const-initialised and without Drop: touching them never allocates.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: an allocation during this thread's teardown is simply not counted.
    let _ = MEASURING.try_with(|m| {
        if m.get() {
            COUNT.with(|c| c.set(c.get() + 1));
        }
    });
}

/// How many allocations `f` made on this thread.
fn allocations_in(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    MEASURING.with(|m| m.set(true));
    f();
    MEASURING.with(|m| m.set(false));
    COUNT.with(|c| c.get())
}

// SAFETY: forwards every call unchanged to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn render_into_is_allocation_free_after_warm_up() {
    let ids: Vec<String> = (0..1000).map(|i| format!("user {i} ü")).collect();
    let template = RequestTemplate::parse(
        "POST",
        "/v1/users/{id}/stats?days=30&raw={id:raw}x",
        &[
            "X-User: {id}".to_owned(),
            "Accept: application/json".to_owned(),
            "X-Custom-Static: yes".to_owned(),
        ],
        Some("{{\"user\": \"{id}\"}}"),
    )
    .unwrap();
    // `raw` values with a space would be refused; use ids without one for that part.
    let ids: Vec<String> = ids.into_iter().map(|s| s.replace(' ', "_")).collect();
    let set = RequestSet::new(
        template,
        Some(DataSet::from_lines("ids", ids)),
        Order::Shuffled { seed: 5 },
    )
    .unwrap();

    let mut out = RenderedRequest::default();
    // Warm up over every row so the buffers reach their largest size.
    for i in 0..2 * set.len() as u64 {
        set.render_into(i, &mut out);
    }
    let during = allocations_in(|| {
        for i in 0..10_000u64 {
            set.render_into(i, &mut out);
            std::hint::black_box(&out);
        }
    });
    assert_eq!(
        during, 0,
        "render_into allocated {during} times in 10,000 calls"
    );
    assert!(out.path_and_query.starts_with("/v1/users/user_"));
}

#[test]
fn reading_an_access_log_is_allocation_free_after_warm_up() {
    use scalpel_requests::{RecordedSource, SourceOptions};
    let mut log = String::new();
    for i in 0..500 {
        log.push_str(&format!(
            "10.0.0.{} - - [10/Oct/2000:13:{:02}:{:02} -0700] \"GET /v1/users/u{i}/stats?q=caf\\xC3\\xA9 HTTP/1.1\" 200 {i} \"https://ref.example/\" \"Mozilla/5.0 (\\\"x\\\")\" 0.00{}\n",
            i % 250,
            i / 60 % 60,
            i % 60,
            i % 10
        ));
    }
    let source =
        RecordedSource::from_bytes("access.log", log.into_bytes(), SourceOptions::new()).unwrap();
    assert_eq!(source.len(), 500);
    let mut reader = source.reader().looping(true);
    let mut out = RenderedRequest::default();
    for _ in 0..1_000 {
        reader.next_into(&mut out).unwrap();
    }
    let during = allocations_in(|| {
        for _ in 0..10_000 {
            let r = reader.next_into(&mut out).unwrap().unwrap();
            std::hint::black_box((&out, r));
        }
    });
    assert_eq!(
        during, 0,
        "reading allocated {during} times in 10,000 requests"
    );
    assert_eq!(out.headers.len(), 2);
    assert_eq!(out.headers[1].1, "Mozilla/5.0 (\"x\")");
    assert!(
        out.path_and_query.ends_with("?q=caf%C3%A9"),
        "{}",
        out.path_and_query
    );
}
