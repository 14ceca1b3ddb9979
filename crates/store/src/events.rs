//! The append-only event log (DESIGN §6) will live here.
//!
//! It is the store's source of truth: mode and plan are folds over a key's
//! events, and any projection kept for speed must equal the fold, including
//! across processes sharing one store. Appends go through the [`Store`]
//! trait and are durable before the answer is sent.
//!
//! [`Store`]: crate::Store
