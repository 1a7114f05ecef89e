//! What a shadow run concludes, in the three forms a person or a script reads: the
//! verdict ([`Verdict`]: pass or fail and why), the terminal table ([`text_table`]) and the
//! self-contained HTML page ([`render_html`]). All three read one [`crate::Summary`], so they
//! never disagree; printing them is the caller's.

mod html;
mod text;
mod verdict;

pub use html::render_html;
pub use text::text_table;
pub use verdict::{MinConsistency, Verdict};
