//! `render_into` must not allocate once warmed up: counted with a real global allocator.
//! (A separate test binary, so no other test's allocations interfere.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use scalpel_requests::{DataSet, Order, RenderedRequest, RequestSet, RequestTemplate};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call unchanged to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
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
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for i in 0..10_000u64 {
        set.render_into(i, &mut out);
        std::hint::black_box(&out);
    }
    let during = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(
        during, 0,
        "render_into allocated {during} times in 10,000 calls"
    );
    assert!(out.path_and_query.starts_with("/v1/users/user_"));
}
