//! Whether the acting key may still write, asked before every step's call
//! (docs/design.md §5 Apply, 2: the scope still allows it; a revoked key allows
//! nothing).
//!
//! The answer is needed before the call, not before the claim, so it is
//! asked beside the claim's commit rather than after it: on PostgreSQL
//! that is one round trip a step instead of two. And on a store with a key
//! epoch ([`plangate_store::Credentials::key_epoch`]) it is not asked again
//! while the epoch stays where it was when the key was last found active —
//! any revocation by any process moves it — so a step there costs a small
//! file read instead of a query, for at most [`KEY_MAX_AGE`] at a time.

use plangate_core::{Code, Scope, StepError};
use plangate_store::KeyEpoch;

use crate::Engine;
use crate::auth::KEY_MAX_AGE;

/// What one apply knows about its key: the epoch at which it was last
/// found active with a scope that may write, and when.
#[derive(Default)]
pub(super) struct KeyCheck {
    seen: Option<(KeyEpoch, std::time::Instant)>,
}

impl KeyCheck {
    /// `Ok` when the key `key_id` may still write; otherwise the step's
    /// failure, ready to record ("nothing was sent").
    pub(super) async fn still_writes(
        &mut self,
        engine: &Engine,
        key_id: &str,
    ) -> Result<(), StepError> {
        // Read before the query, so a revocation racing the query moves
        // the epoch past the one remembered with its answer.
        let epoch = engine.store().key_epoch();
        if let (Some(now), Some((seen, at))) = (epoch, self.seen)
            && now == seen
            && at.elapsed() < KEY_MAX_AGE
        {
            return Ok(());
        }
        self.seen = None;
        let fail = |code: Code, message: String| StepError {
            code: code.into(),
            message,
            upstream: None,
        };
        match engine.store().find_key(key_id).await {
            Ok(Some(key)) if key.is_active() && key.scope != Scope::Read => {
                self.seen = epoch.map(|e| (e, std::time::Instant::now()));
                Ok(())
            }
            Ok(_) => Err(fail(
                Code::Forbidden,
                "the API key was revoked or lost its write scope; nothing was sent".to_owned(),
            )),
            Err(e) => Err(fail(
                Code::StoreUnavailable,
                format!(
                    "plangate cannot read its key store ({e}); nothing was sent. Check the gateway's log and apply again"
                ),
            )),
        }
    }
}
