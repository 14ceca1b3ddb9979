//! What a `[[notify]]` receiver is told, and how (docs/design.md §13):
//! the message of each notifiable event, its id, its Standard Webhooks
//! signature, the Slack rendering and when a failed delivery is tried
//! again. Pure: the gateway decides when an event happened and sends;
//! this decides what the message says and what it is signed with.
//!
//! A message is built from the same view every other face renders
//! ([`KeyPlanView`]), so its summary is the steps' predicted effects as
//! redacted everywhere, screened for hidden characters as wherever a
//! person reads text.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::KeyPlanView;
use crate::screen::screen;

/// The events a receiver can subscribe to (`events = [...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NotifyEvent {
    /// A plan waits for a person's review: sent once it has been quiet for
    /// `notify_debounce`, and again each time it changes.
    #[serde(rename = "plan.review_needed")]
    ReviewNeeded,
    /// An apply ended with every selected step applied.
    #[serde(rename = "plan.applied")]
    Applied,
    /// An apply ended with a step failed.
    #[serde(rename = "plan.failed")]
    Failed,
    /// A step may or may not have taken effect; a person decides.
    #[serde(rename = "step.in_doubt")]
    InDoubt,
    /// An upstream's tool definition is new or changed and held back.
    #[serde(rename = "tool.quarantined")]
    ToolQuarantined,
    /// `plangate notify test`: a receiver's set-up is checked. Sent only
    /// on demand, so no receiver subscribes to it.
    #[serde(rename = "notify.test")]
    Test,
}

impl NotifyEvent {
    /// Every event, in the order the docs list them.
    pub const ALL: [NotifyEvent; 5] = [
        NotifyEvent::ReviewNeeded,
        NotifyEvent::Applied,
        NotifyEvent::Failed,
        NotifyEvent::InDoubt,
        NotifyEvent::ToolQuarantined,
    ];

    /// The `type` a message of this event carries.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::ReviewNeeded => "plan.review_needed",
            NotifyEvent::Applied => "plan.applied",
            NotifyEvent::Failed => "plan.failed",
            NotifyEvent::InDoubt => "step.in_doubt",
            NotifyEvent::ToolQuarantined => "tool.quarantined",
            NotifyEvent::Test => "notify.test",
        }
    }

    /// The event a `type` string names.
    pub fn parse(s: &str) -> Option<NotifyEvent> {
        NotifyEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

impl std::fmt::Display for NotifyEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an event of a key's log means to the notifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// Nothing to notify, and the plan did not change.
    Nothing,
    /// The plan may have changed: once it is quiet, see whether it waits
    /// for review.
    PlanChanged,
    /// An apply started on this digest (if it was given one): what its
    /// end's message names.
    ApplyStarted {
        /// The apply.
        apply_id: String,
        /// The digest it checked.
        plan_digest: Option<String>,
    },
    /// An apply ended so.
    ApplyEnded {
        /// The apply.
        apply_id: String,
        /// How its steps ended.
        counts: ApplyCounts,
    },
    /// A step went in doubt.
    InDoubt {
        /// The step.
        step_id: String,
        /// Why.
        reason: String,
    },
    /// A tool definition was held back.
    Quarantined {
        /// The upstream.
        server: String,
        /// The upstream's tool name.
        tool: String,
        /// New or changed.
        why: &'static str,
    },
}

/// What `kind` means to the notifier: which message it leads to, or
/// whether the plan it belongs to may now wait for review. A step being
/// claimed, a call being recorded, a factor being used change no plan.
pub fn trigger(kind: &crate::EventKind) -> Trigger {
    use crate::EventKind as K;
    match kind {
        K::ApplyStarted {
            apply_id,
            plan_digest,
            ..
        } => Trigger::ApplyStarted {
            apply_id: apply_id.clone(),
            plan_digest: plan_digest.clone(),
        },
        K::ApplyFinished {
            apply_id,
            applied,
            failed,
            in_doubt,
            not_run,
        } => Trigger::ApplyEnded {
            apply_id: apply_id.clone(),
            counts: ApplyCounts {
                applied: *applied,
                failed: *failed,
                in_doubt: *in_doubt,
                not_run: *not_run,
            },
        },
        K::StepInDoubt { step_id, reason } => Trigger::InDoubt {
            step_id: step_id.clone(),
            reason: reason.clone(),
        },
        K::ToolQuarantined {
            server,
            definition,
            reason,
        } => Trigger::Quarantined {
            server: server.clone(),
            tool: definition.tool.clone(),
            why: match reason {
                crate::QuarantineReason::New => "a new tool",
                crate::QuarantineReason::Changed => "its definition changed",
            },
        },
        K::StepPlanned { .. }
        | K::StepDeduplicated { .. }
        | K::StepsDiscarded { .. }
        | K::StepRejected { .. }
        | K::StepAmended { .. }
        | K::ReviewAnswered { .. }
        | K::ReviewRequested { .. }
        | K::StepRetried { .. }
        | K::PlanExpired { .. }
        | K::SessionEnded { .. }
        | K::ModeSet { .. }
        | K::ModeLocked { .. }
        | K::ModeUnlocked => Trigger::PlanChanged,
        _ => Trigger::Nothing,
    }
}

/// How many steps' effects a message's summary names; the rest are
/// counted ("and 4 more").
pub const SUMMARY_STEPS: usize = 3;

/// One notification's body, `format = "standard"`: what happened, to
/// which key's plan at which revision, and where a person opens it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notice {
    /// The event.
    #[serde(rename = "type")]
    pub event: NotifyEvent,
    /// When it happened, RFC 3339 UTC.
    pub timestamp: String,
    /// The key whose plan it is (absent for a tool held back, which is
    /// every key's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The plan digest a yes would bind (for an apply, the one it was
    /// started on, if it was given one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_digest: Option<String>,
    /// The plan's revision when the message was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// How many steps it concerns.
    pub steps: usize,
    /// The first steps' predicted effects (redacted, screened), or what
    /// the tool event is; one line each.
    pub summary: String,
    /// A link that opens this plan (at this revision) in the console, on
    /// `[gateway] public_url` when it is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_url: Option<String>,
}

/// How an apply ended, as its `apply_finished` event counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyCounts {
    /// Steps applied.
    pub applied: u32,
    /// Steps failed.
    pub failed: u32,
    /// Steps in doubt.
    pub in_doubt: u32,
    /// Steps selected and not reached.
    pub not_run: u32,
}

impl ApplyCounts {
    /// The event an apply that ended so is notified as: `plan.failed` when
    /// a step failed, `plan.applied` when every step it reached applied;
    /// none when it ended in doubt (each in-doubt step is its own
    /// `step.in_doubt`) or reached nothing.
    pub fn event(&self) -> Option<NotifyEvent> {
        if self.failed > 0 {
            Some(NotifyEvent::Failed)
        } else if self.in_doubt == 0 && self.applied > 0 {
            Some(NotifyEvent::Applied)
        } else {
            None
        }
    }

    /// Every step the apply selected.
    pub fn selected(&self) -> usize {
        (self.applied + self.failed + self.in_doubt + self.not_run) as usize
    }
}

/// Whether a key's plan, as a person would see it, waits for a review:
/// waiting steps that no approval that counts covers.
pub fn needs_review(view: &KeyPlanView) -> bool {
    view.standing.pending_steps > 0 && !view.standing.approved
}

/// The console link to `key`'s plan at `revision`, on `base` (the
/// console's public address, `…/console`): the page opens that key's plan
/// and says so if it has changed since.
pub fn console_link(base: &str, key: &str, revision: Option<u64>) -> String {
    let base = base.trim_end_matches('/');
    let key = percent_encode(key);
    match revision {
        Some(r) => format!("{base}#key={key}&revision={r}"),
        None => format!("{base}#key={key}"),
    }
}

/// `s` with everything but unreserved characters percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The summary of `effects`: the first [`SUMMARY_STEPS`], screened, one a
/// line, then how many more.
fn summarize<'a>(effects: impl ExactSizeIterator<Item = &'a str>) -> String {
    let total = effects.len();
    let mut lines: Vec<String> = effects
        .take(SUMMARY_STEPS)
        .enumerate()
        .map(|(i, e)| format!("{}. {}", i + 1, screen(e).marked()))
        .collect();
    if total > SUMMARY_STEPS {
        lines.push(format!("and {} more", total - SUMMARY_STEPS));
    }
    lines.join("\n")
}

impl Notice {
    /// `plan.review_needed` for `view`'s waiting steps.
    pub fn review_needed(view: &KeyPlanView, timestamp: String, console: Option<&str>) -> Notice {
        let effects = view.steps.iter().map(|s| s.step.predicted_effect.as_str());
        Notice {
            event: NotifyEvent::ReviewNeeded,
            timestamp,
            key: Some(view.key.clone()),
            plan_digest: Some(view.standing.plan_digest.clone()),
            revision: Some(view.standing.revision),
            steps: view.steps.len(),
            summary: summarize(effects),
            console_url: console.map(|c| console_link(c, &view.key, Some(view.standing.revision))),
        }
    }

    /// `plan.applied` or `plan.failed` for an apply of `view`'s key that
    /// ended as `counts`, started on `plan_digest`; its steps are the
    /// view's last apply. `None` when such an apply is not notified
    /// ([`ApplyCounts::event`]).
    pub fn apply_ended(
        view: &KeyPlanView,
        counts: ApplyCounts,
        plan_digest: Option<String>,
        timestamp: String,
        console: Option<&str>,
    ) -> Option<Notice> {
        let event = counts.event()?;
        let failed: Vec<&str> = view
            .steps
            .iter()
            .filter(|s| s.status == crate::StepStatus::Failed)
            .map(|s| s.step.predicted_effect.as_str())
            .collect();
        let summary = if event == NotifyEvent::Failed && !failed.is_empty() {
            format!("failed:\n{}", summarize(failed.into_iter()))
        } else {
            let effects = view
                .last_apply
                .iter()
                .map(|s| s.step.predicted_effect.as_str());
            summarize(effects)
        };
        Some(Notice {
            event,
            timestamp,
            key: Some(view.key.clone()),
            plan_digest,
            revision: Some(view.standing.revision),
            steps: counts.selected(),
            summary,
            console_url: console.map(|c| console_link(c, &view.key, Some(view.standing.revision))),
        })
    }

    /// `step.in_doubt` for `step_id` of `view`'s key, in doubt for `reason`.
    pub fn in_doubt(
        view: &KeyPlanView,
        step_id: &str,
        reason: &str,
        timestamp: String,
        console: Option<&str>,
    ) -> Notice {
        let effect = view
            .steps
            .iter()
            .chain(&view.last_apply)
            .find(|s| s.step.step_id == step_id)
            .map_or_else(|| step_id.to_owned(), |s| s.step.predicted_effect.clone());
        Notice {
            event: NotifyEvent::InDoubt,
            timestamp,
            key: Some(view.key.clone()),
            plan_digest: Some(view.standing.plan_digest.clone()),
            revision: Some(view.standing.revision),
            steps: 1,
            summary: format!(
                "{} (in doubt: {})",
                screen(&effect).marked(),
                screen(reason).marked()
            ),
            console_url: console.map(|c| console_link(c, &view.key, Some(view.standing.revision))),
        }
    }

    /// `tool.quarantined` for `tool` of upstream `server`, held back for
    /// `why` (new, changed).
    pub fn tool_quarantined(
        server: &str,
        tool: &str,
        why: &str,
        timestamp: String,
        console: Option<&str>,
    ) -> Notice {
        Notice {
            event: NotifyEvent::ToolQuarantined,
            timestamp,
            key: None,
            plan_digest: None,
            revision: None,
            steps: 0,
            summary: format!(
                "{}/{}: {}; nothing can call it until a person accepts it",
                screen(server).marked(),
                screen(tool).marked(),
                screen(why).marked()
            ),
            console_url: console.map(|c| c.trim_end_matches('/').to_owned()),
        }
    }

    /// `notify.test`: what `plangate notify test` sends, so a receiver's
    /// set-up (URL, secret, format) can be checked before a plan needs it.
    pub fn test(timestamp: String, console: Option<&str>) -> Notice {
        Notice {
            event: NotifyEvent::Test,
            timestamp,
            key: None,
            plan_digest: None,
            revision: None,
            steps: 0,
            summary: "plangate can reach this receiver and signs what it sends".to_owned(),
            console_url: console.map(|c| c.trim_end_matches('/').to_owned()),
        }
    }

    /// The message's body in `format`, as sent and as signed.
    pub fn body(&self, format: NotifyFormat) -> String {
        match format {
            NotifyFormat::Standard => {
                serde_json::to_string(self).expect("a notice serializes to JSON")
            }
            NotifyFormat::Slack => serde_json::json!({ "text": self.slack_text() }).to_string(),
        }
    }

    /// The message as Slack's incoming webhooks read it: `mrkdwn` with the
    /// facts, every value escaped (`&`, `<`, `>`) so a step's text cannot
    /// make a link or a mention.
    pub fn slack_text(&self) -> String {
        let what = match self.event {
            NotifyEvent::ReviewNeeded => "A plan waits for review",
            NotifyEvent::Applied => "A plan was applied",
            NotifyEvent::Failed => "A plan's apply failed",
            NotifyEvent::InDoubt => "A step is in doubt",
            NotifyEvent::ToolQuarantined => "A tool definition is held for review",
            NotifyEvent::Test => "A test notification",
        };
        let mut text = format!("*plangate: {what}*");
        if let Some(key) = &self.key {
            text.push_str(&format!("\nkey `{}`", slack_escape(key)));
            if self.steps > 0 {
                let s = if self.steps == 1 { "" } else { "s" };
                text.push_str(&format!(", {} step{s}", self.steps));
            }
            if let Some(r) = self.revision {
                text.push_str(&format!(", revision {r}"));
            }
        }
        if let Some(d) = &self.plan_digest {
            text.push_str(&format!("\ndigest `{}`", slack_escape(d)));
        }
        if !self.summary.is_empty() {
            text.push_str(&format!("\n{}", slack_escape(&self.summary)));
        }
        if let Some(url) = &self.console_url {
            text.push_str(&format!("\n<{}|Open in the console>", slack_escape(url)));
        }
        text
    }
}

/// `s` as plain text inside Slack's markup: `&`, `<` and `>` escaped,
/// which is all Slack asks (its control sequences start with `<`).
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// What a receiver's bodies look like (`format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyFormat {
    /// The [`Notice`] as JSON.
    #[default]
    Standard,
    /// A Slack incoming webhook's `{"text": …}`.
    Slack,
}

/// A message's id (`webhook-id`): the same for the same event however
/// many processes notice it, so a receiver de-duplicates by it and a
/// store holds each message once. `parts` say which occurrence it is (a
/// key, a digest and revision, a global seq).
pub fn message_id(event: NotifyEvent, parts: &[&str]) -> String {
    let mut h = Sha256::new();
    h.update(event.as_str().as_bytes());
    for p in parts {
        h.update([0]);
        h.update(p.as_bytes());
    }
    format!("msg_{}", &hex::encode(h.finalize())[..32])
}

/// Why a `[[notify]]` secret is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Missing the `whsec_` prefix.
    #[error(
        "a webhook secret starts with whsec_ followed by base64 (as Standard Webhooks defines)"
    )]
    Prefix,
    /// Not base64 after the prefix.
    #[error("the part after whsec_ is not base64")]
    Base64,
    /// Too short or too long.
    #[error(
        "the secret is {0} bytes: use 24 to 64 random bytes (e.g. whsec_ + `openssl rand -base64 32`)"
    )]
    Length(usize),
}

/// The key bytes of a `whsec_…` secret.
pub fn webhook_key(secret: &str) -> Result<Vec<u8>, SecretError> {
    let b64 = secret.strip_prefix("whsec_").ok_or(SecretError::Prefix)?;
    let key = data_encoding::BASE64
        .decode(b64.as_bytes())
        .map_err(|_| SecretError::Base64)?;
    if !(24..=64).contains(&key.len()) {
        return Err(SecretError::Length(key.len()));
    }
    Ok(key)
}

/// The `webhook-signature` header of message `id` sent at `timestamp`
/// (Unix seconds) with `body`: `v1,` and the base64 HMAC-SHA256 of
/// `id.timestamp.body` under `key`.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC-SHA256 accepts any key");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    format!(
        "v1,{}",
        data_encoding::BASE64.encode(&mac.finalize().into_bytes())
    )
}

/// How long after each failed attempt the next is made: quickly at
/// first, for a receiver that was restarting, then further apart.
const RETRY_AFTER_SECS: [i64; 12] = [
    5, 15, 30, 60, 120, 300, 900, 1800, 3600, 7200, 14_400, 28_800,
];

/// How long a message is retried, counted from when it was made: a day.
pub const RETRY_FOR_MS: i64 = 24 * 3600 * 1000;

/// When to try a message made at `created_ms` again, after its
/// `attempts`-th failed attempt at `now_ms`; `None` once the next attempt
/// would fall past [`RETRY_FOR_MS`] — it is given up, and says so.
pub fn next_attempt(created_ms: i64, attempts: u32, now_ms: i64) -> Option<i64> {
    let i = (attempts.max(1) - 1) as usize;
    let after = RETRY_AFTER_SECS[i.min(RETRY_AFTER_SECS.len() - 1)] * 1000;
    let next = now_ms + after;
    (next - created_ms <= RETRY_FOR_MS).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks reference libraries.
        let key = webhook_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        assert_eq!(
            sign(
                &key,
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                r#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn a_secret_is_whsec_and_base64_of_a_sensible_length() {
        assert_eq!(
            webhook_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Err(SecretError::Prefix)
        );
        assert_eq!(webhook_key("whsec_not base64!"), Err(SecretError::Base64));
        assert_eq!(webhook_key("whsec_AAAA"), Err(SecretError::Length(3)));
    }

    #[test]
    fn one_event_has_one_id_and_another_another() {
        let a = message_id(NotifyEvent::ReviewNeeded, &["key_1", "sha256:ab", "3"]);
        assert_eq!(
            a,
            message_id(NotifyEvent::ReviewNeeded, &["key_1", "sha256:ab", "3"])
        );
        assert_ne!(
            a,
            message_id(NotifyEvent::ReviewNeeded, &["key_1", "sha256:ab", "4"])
        );
        assert_ne!(
            a,
            message_id(NotifyEvent::Applied, &["key_1", "sha256:ab", "3"])
        );
        // Parts are separated: ("a","bc") is not ("ab","c").
        assert_ne!(
            message_id(NotifyEvent::Applied, &["a", "bc"]),
            message_id(NotifyEvent::Applied, &["ab", "c"])
        );
        assert!(a.starts_with("msg_") && a.len() == 36, "{a}");
    }

    #[test]
    fn retries_come_further_apart_and_stop_after_a_day() {
        let t0 = 1_000_000;
        assert_eq!(next_attempt(t0, 1, t0), Some(t0 + 5_000));
        assert_eq!(next_attempt(t0, 2, t0 + 5_000), Some(t0 + 20_000));
        assert_eq!(next_attempt(t0, 4, t0 + 50_000), Some(t0 + 110_000));
        assert_eq!(
            next_attempt(t0, 30, t0 + 1_000),
            Some(t0 + 1_000 + 28_800_000)
        );
        assert_eq!(next_attempt(t0, 12, t0 + RETRY_FOR_MS - 1_000), None);
    }

    #[test]
    fn slack_text_cannot_make_links_or_mentions() {
        let notice = Notice {
            event: NotifyEvent::ReviewNeeded,
            timestamp: "2026-12-07T00:00:00Z".into(),
            key: Some("agent".into()),
            plan_digest: Some("sha256:ab".into()),
            revision: Some(4),
            steps: 2,
            summary: "1. Write <https://evil.example|click> & <!channel>".into(),
            console_url: Some("https://gw.example/console#key=agent&revision=4".into()),
        };
        let text = notice.slack_text();
        assert!(
            text.contains("&lt;https://evil.example|click&gt; &amp; &lt;!channel&gt;"),
            "{text}"
        );
        assert!(
            text.contains(
                "<https://gw.example/console#key=agent&amp;revision=4|Open in the console>"
            ),
            "{text}"
        );
        assert!(text.contains("key `agent`, 2 steps, revision 4"), "{text}");
        let body: serde_json::Value =
            serde_json::from_str(&notice.body(NotifyFormat::Slack)).expect("json");
        assert_eq!(body["text"], text);
    }

    #[test]
    fn a_summary_names_three_steps_screened_and_counts_the_rest() {
        let effects = [
            "Write a",
            "Write b\u{1b}[2J",
            "Write c",
            "Write d",
            "Write e",
        ];
        let s = summarize(effects.iter().copied());
        assert_eq!(
            s,
            "1. Write a\n2. Write b\\e[2J  [contains hidden characters]\n3. Write c\nand 2 more"
        );
    }

    #[test]
    fn a_console_link_names_the_key_and_revision_encoded() {
        assert_eq!(
            console_link("https://gw.example/console/", "team a&b", Some(7)),
            "https://gw.example/console#key=team%20a%26b&revision=7"
        );
    }

    #[test]
    fn what_each_event_means_to_the_notifier() {
        use crate::event::tests::every_kind;
        for kind in every_kind() {
            let t = trigger(&kind);
            match kind.event_type() {
                crate::EventType::ApplyFinished => assert!(matches!(t, Trigger::ApplyEnded { .. })),
                crate::EventType::ApplyStarted => {
                    assert!(matches!(t, Trigger::ApplyStarted { .. }))
                }
                crate::EventType::StepInDoubt => assert!(matches!(t, Trigger::InDoubt { .. })),
                crate::EventType::ToolQuarantined => {
                    assert!(matches!(t, Trigger::Quarantined { .. }))
                }
                crate::EventType::StepPlanned
                | crate::EventType::ReviewRequested
                | crate::EventType::StepAmended
                | crate::EventType::StepRejected => assert_eq!(t, Trigger::PlanChanged, "{kind:?}"),
                crate::EventType::CallRecorded
                | crate::EventType::StepStarted
                | crate::EventType::FactorUsed => assert_eq!(t, Trigger::Nothing, "{kind:?}"),
                _ => {}
            }
        }
    }

    #[test]
    fn an_apply_is_notified_as_failed_applied_or_not_at_all() {
        let c = |applied, failed, in_doubt| ApplyCounts {
            applied,
            failed,
            in_doubt,
            not_run: 0,
        };
        assert_eq!(c(2, 1, 0).event(), Some(NotifyEvent::Failed));
        assert_eq!(c(2, 0, 0).event(), Some(NotifyEvent::Applied));
        assert_eq!(c(1, 0, 1).event(), None);
        assert_eq!(c(0, 0, 0).event(), None);
        assert_eq!(NotifyEvent::parse("plan.failed"), Some(NotifyEvent::Failed));
    }
}
