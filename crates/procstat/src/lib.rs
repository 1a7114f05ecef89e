//! CPU% and RSS/PSS of a process tree, sampled from /proc over time.
