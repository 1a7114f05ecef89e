//! The one seam every selection algorithm sits behind.

use std::fmt;
use std::sync::Arc;

use crate::backend::Backend;

/// Which ready worker takes the next request. `avoid` is a worker that just failed this
/// request (a retry goes elsewhere when there is an elsewhere); a [`Backend::stalled`]
/// worker is passed over like it while another can be had. `key` is the hash of the
/// request's sticky key (`sticky_worker`), when the app has one and the request carries
/// it: only [`super::Rendezvous`] reads it; the others spread requests by load or in turn.
pub(crate) trait Selection: Send + Sync + fmt::Debug {
    /// Picks one of `backends` (never empty).
    fn select<'a>(
        &self,
        backends: &'a [Arc<Backend>],
        avoid: Option<&Backend>,
        key: Option<u64>,
    ) -> &'a Arc<Backend>;
}
