//! A factor for every yes (docs/design.md §12): what only a person holds,
//! checked before an act that widens what runs.
//!
//! On one OS user nothing tells the person from an agent with a shell
//! except something only the person has. plangate keeps, in a log of its
//! own ([`crate::operators::OPERATORS_LOG`]), who may say yes (enrolled operators, each with
//! a TOTP secret sealed under the seal key and the SHA-256 of one-time
//! recovery codes), what the store requires ([`Requirement`], raised
//! freely, lowered only with a factor) and every code used or refused.
//! Pure: the edge unseals the secret and reads the clock; this module
//! holds the arithmetic (RFC 6238 over RFC 4226, SHA-1, 6 digits, 30 s
//! steps, one step of skew either way), the rule that a code is used once,
//! and the rate limit.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha1::Sha1;

/// A TOTP step, in seconds (RFC 6238's default, what every authenticator
/// app assumes).
pub const STEP_SECS: i64 = 30;

/// Digits in a code.
pub const DIGITS: usize = 6;

/// Wrong codes an operator may enter within [`FAILURE_WINDOW_MS`] before
/// the next is refused unread.
pub const MAX_FAILURES: usize = 5;

/// The window over which wrong codes are counted, and the wait after the
/// last of [`MAX_FAILURES`].
pub const FAILURE_WINDOW_MS: i64 = 5 * 60 * 1000;

/// Which factor a yes needs, recorded in the store (never in a config file
/// a caller passes, so `--config` cannot lower it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Requirement {
    /// No factor: whoever can run plangate's operator commands approves
    /// (the default, and the behaviour before factors existed).
    #[default]
    None,
    /// A TOTP code or a passkey.
    TotpOrPasskey,
    /// A TOTP code.
    Totp,
    /// A passkey.
    Passkey,
}

impl Requirement {
    /// Every requirement, in the order the CLI lists them.
    pub const ALL: [Requirement; 4] = [
        Requirement::None,
        Requirement::Totp,
        Requirement::Passkey,
        Requirement::TotpOrPasskey,
    ];

    /// The word the CLI and the log use.
    pub fn as_str(self) -> &'static str {
        match self {
            Requirement::None => "none",
            Requirement::Totp => "totp",
            Requirement::Passkey => "passkey",
            Requirement::TotpOrPasskey => "totp_or_passkey",
        }
    }

    /// The requirement a word names.
    pub fn parse(s: &str) -> Option<Requirement> {
        Requirement::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether `factor` satisfies this requirement.
    pub fn accepts(self, factor: FactorKind) -> bool {
        match self {
            Requirement::None | Requirement::TotpOrPasskey => true,
            Requirement::Totp => matches!(factor, FactorKind::Totp | FactorKind::Recovery),
            Requirement::Passkey => matches!(factor, FactorKind::Passkey | FactorKind::Recovery),
        }
    }

    /// Whether moving from `self` to `to` lowers what a yes needs (so the
    /// move itself needs a factor): anything to `none`, or a single factor
    /// to the choice of either.
    pub fn is_lowered_by(self, to: Requirement) -> bool {
        match (self, to) {
            (Requirement::None, _) => false,
            (_, Requirement::None) => true,
            (Requirement::Totp | Requirement::Passkey, Requirement::TotpOrPasskey) => true,
            (Requirement::Totp, Requirement::Passkey)
            | (Requirement::Passkey, Requirement::Totp) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for Requirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a person proved a yes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FactorKind {
    /// A TOTP code from an authenticator app.
    Totp,
    /// A WebAuthn passkey with user verification.
    Passkey,
    /// One of the recovery codes printed at enrolment (each once).
    Recovery,
}

impl FactorKind {
    /// The word the log and the answers use.
    pub fn as_str(self) -> &'static str {
        match self {
            FactorKind::Totp => "totp",
            FactorKind::Passkey => "passkey",
            FactorKind::Recovery => "recovery",
        }
    }
}

/// The RFC 4226 code of `secret` at `counter`: HMAC-SHA-1, dynamic
/// truncation, the last [`DIGITS`] decimal digits.
pub fn hotp(secret: &[u8], counter: u64) -> u32 {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(secret) else {
        return u32::MAX;
    };
    mac.update(&counter.to_be_bytes());
    let digest = mac.finalize().into_bytes();
    let offset = usize::from(digest[19] & 0x0f);
    let binary = u32::from_be_bytes([
        digest[offset] & 0x7f,
        digest[offset + 1],
        digest[offset + 2],
        digest[offset + 3],
    ]);
    binary % 10u32.pow(DIGITS as u32)
}

/// The TOTP step `now_ms` falls in.
pub fn step_at(now_ms: i64) -> u64 {
    u64::try_from(now_ms.div_euclid(1000).div_euclid(STEP_SECS)).unwrap_or(0)
}

/// Why a code was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeRefused {
    /// Not six digits.
    #[error("a code is {DIGITS} digits")]
    Malformed,
    /// No step within the skew gives this code.
    #[error("the code is not the one the authenticator shows now")]
    Wrong,
    /// It was right, but a code of that step or a later one was used
    /// already: each code is used once.
    #[error("that code was used already; wait for the next one")]
    Reused,
}

/// The step whose code `code` is, within one step either side of `now_ms`,
/// and newer than `last_used` (a code is used once, and never one older
/// than the last used).
pub fn totp_step(
    secret: &[u8],
    code: &str,
    now_ms: i64,
    last_used: Option<u64>,
) -> Result<u64, CodeRefused> {
    let code = code.trim();
    if code.len() != DIGITS || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CodeRefused::Malformed);
    }
    let wanted: u32 = code.parse().map_err(|_| CodeRefused::Malformed)?;
    let now = step_at(now_ms);
    let mut matched = None;
    for step in [now.saturating_sub(1), now, now + 1] {
        if hotp(secret, step) == wanted {
            matched = Some(step);
            if last_used.is_none_or(|used| step > used) {
                return Ok(step);
            }
        }
    }
    match matched {
        Some(_) => Err(CodeRefused::Reused),
        None => Err(CodeRefused::Wrong),
    }
}

/// When an operator may next enter a code: `None` if now, else the time,
/// when [`MAX_FAILURES`] wrong codes fell within the window before `now_ms`
/// (the wait runs from the last of them).
pub fn locked_until(failures: &[i64], now_ms: i64) -> Option<i64> {
    let recent: Vec<i64> = failures
        .iter()
        .copied()
        .filter(|at| now_ms - at < FAILURE_WINDOW_MS)
        .collect();
    if recent.len() < MAX_FAILURES {
        return None;
    }
    recent.iter().max().map(|last| last + FAILURE_WINDOW_MS)
}

/// An `otpauth://totp/` URI an authenticator app reads (by QR code or by
/// hand): issuer `plangate`, the account `name`, the secret in base32.
pub fn otpauth_uri(name: &str, secret: &[u8]) -> String {
    let label: String = format!("plangate:{name}")
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b':' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect();
    format!(
        "otpauth://totp/{label}?secret={}&issuer=plangate&algorithm=SHA1&digits={DIGITS}&period={STEP_SECS}",
        base32(secret)
    )
}

/// RFC 4648 base32 without padding, as authenticator apps take secrets.
pub fn base32(bytes: &[u8]) -> String {
    data_encoding::BASE32_NOPAD.encode(bytes)
}

/// A secret typed back from its base32 form (upper case, no padding), as
/// an authenticator app reads it; `None` if it is not base32.
pub fn from_base32(text: &str) -> Option<Vec<u8>> {
    data_encoding::BASE32_NOPAD
        .decode(text.trim().as_bytes())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6238 appendix B's SHA-1 secret and vectors (the last 6 of the
    /// 8 digits given there).
    const RFC_SECRET: &[u8] = b"12345678901234567890";

    #[test]
    fn codes_are_rfc_6238s() {
        for (secs, code) in [
            (59_i64, 94_287_082_u32),
            (1_111_111_109, 7_081_804),
            (1_111_111_111, 14_050_471),
            (1_234_567_890, 89_005_924),
            (2_000_000_000, 69_279_037),
        ] {
            assert_eq!(
                hotp(RFC_SECRET, step_at(secs * 1000)),
                code % 1_000_000,
                "{secs}"
            );
        }
    }

    #[test]
    fn a_code_is_taken_one_step_either_side_and_only_once() {
        let now = 1_234_567_890_000;
        let code = |step: u64| format!("{:06}", hotp(RFC_SECRET, step));
        let step = step_at(now);
        assert_eq!(totp_step(RFC_SECRET, &code(step), now, None), Ok(step));
        assert_eq!(
            totp_step(RFC_SECRET, &code(step - 1), now, None),
            Ok(step - 1)
        );
        assert_eq!(
            totp_step(RFC_SECRET, &code(step + 1), now, None),
            Ok(step + 1)
        );
        assert_eq!(
            totp_step(RFC_SECRET, &code(step + 2), now, None),
            Err(CodeRefused::Wrong)
        );
        assert_eq!(
            totp_step(RFC_SECRET, &code(step), now, Some(step)),
            Err(CodeRefused::Reused)
        );
        assert_eq!(
            totp_step(RFC_SECRET, &code(step - 1), now, Some(step)),
            Err(CodeRefused::Reused)
        );
        assert_eq!(
            totp_step(RFC_SECRET, "12345", now, None),
            Err(CodeRefused::Malformed)
        );
    }

    #[test]
    fn five_wrong_codes_in_five_minutes_lock_for_five_minutes_and_one_does_not() {
        let t = 1_000_000;
        assert_eq!(locked_until(&[t], t + 1), None);
        let five: Vec<i64> = (0..5).map(|i| t + i * 1000).collect();
        assert_eq!(
            locked_until(&five, t + 5000),
            Some(t + 4000 + FAILURE_WINDOW_MS)
        );
        assert_eq!(locked_until(&five, t + 4000 + FAILURE_WINDOW_MS), None);
    }

    #[test]
    fn lowering_the_requirement_is_told_apart_from_raising_it() {
        use Requirement::*;
        assert!(!None.is_lowered_by(Totp));
        assert!(Totp.is_lowered_by(None));
        assert!(Totp.is_lowered_by(TotpOrPasskey));
        assert!(!TotpOrPasskey.is_lowered_by(Totp));
        assert!(Passkey.is_lowered_by(Totp));
        assert!(!Totp.is_lowered_by(Totp));
    }

    #[test]
    fn the_uri_is_what_authenticator_apps_read() {
        let uri = otpauth_uri("alice smith", RFC_SECRET);
        assert!(
            uri.starts_with("otpauth://totp/plangate:alice%20smith?secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ&issuer=plangate"),
            "{uri}"
        );
    }
}
