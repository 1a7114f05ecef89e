//! Request templates with `{name}` placeholders, filled from data files.
//!
//! A load run or a shadow replay needs many different requests of one shape, e.g.
//! `GET /v1/users/{id}/stats?days=30` over a file of 16,000 user ids. This crate parses
//! such a template ([`RequestTemplate`]), reads the values ([`DataSet`]: one value per
//! line, or CSV with a header row), binds the two and fixes an order ([`RequestSet`],
//! [`Order`]), and then renders the i-th request on demand ([`RenderedRequest`]).
//!
//! It must not do network I/O: it knows what to send, never how. Errors are typed
//! ([`RequestsError`]) and name the file, line, template column or placeholder.
//!
//! Design: all validation happens once, in [`RequestSet::new`], which renders every row;
//! after that [`RequestSet::render_into`] cannot fail, takes no lock, and reuses the
//! caller's buffers, so a load worker can call it per request without allocating. Header
//! values and bodies that hold placeholders are rendered for every row up front (handing
//! one out is a reference-count bump); bodies only up to 256 MiB in all, beyond which
//! they are rendered per request.
//! The shuffled order is a Fisher–Yates permutation over SplitMix64, written out here so
//! that a seed gives the same order on every machine and version.
//!
//! The template language and data formats are described for users in `docs/requests.md`.
//!
//! # Example
//!
//! ```
//! use scalpel_requests::{DataSet, Order, RequestSet, RequestTemplate};
//!
//! let template = RequestTemplate::parse(
//!     "GET",
//!     "/v1/users/{id}/stats?days=30",
//!     &["Accept: application/json".to_owned(), "X-User: {id}".to_owned()],
//!     None,
//! )?;
//! let ids = DataSet::from_lines("ids", vec!["u-1".into(), "a b".into()]);
//! let set = RequestSet::new(template, Some(ids), Order::Sequential)?;
//! assert_eq!(set.len(), 2);
//!
//! let second = set.render(1);
//! assert_eq!(second.path_and_query, "/v1/users/a%20b/stats?days=30");
//! assert_eq!(second.headers[1].1, "a b");
//! // Wraps around.
//! assert_eq!(set.render(2).path_and_query, "/v1/users/u-1/stats?days=30");
//! # Ok::<(), scalpel_requests::RequestsError>(())
//! ```

mod data;
mod error;
mod order;
mod set;
mod template;

pub use data::DataSet;
pub use error::RequestsError;
pub use order::Order;
pub use set::{MAX_BODY, RenderedRequest, RequestSet};
pub use template::RequestTemplate;
