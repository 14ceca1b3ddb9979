//! plangate's structure guards live in `tests/structure.rs`; this crate
//! ships nothing. The checks read the workspace's sources as text, so they
//! need no dependency and run in a second (`scripts/test` runs them first).
