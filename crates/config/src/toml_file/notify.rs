//! `[[notify]]` of a `plangate.toml`: the receivers of signed
//! notifications, each read strictly, its secret's key checked (never
//! shown), its events named from the list plangate sends.

use plangate_core::notify::{NotifyEvent, NotifyFormat, webhook_key};

use crate::check::{Checker, child, index, list};
use crate::model::NotifyTarget;

const NOTIFY_KEYS: [&str; 5] = ["name", "url", "secret", "events", "format"];

/// `[[notify]]`: every receiver read, names unique.
pub(super) fn notify(c: &mut Checker<'_>, node: &toml::Value) -> Option<Vec<NotifyTarget>> {
    let Some(items) = node.as_array() else {
        c.error(
            "notify",
            "notify must be [[notify]] tables, each with name, url and secret",
        );
        return None;
    };
    let mut out = Some(Vec::with_capacity(items.len()));
    for (i, item) in items.iter().enumerate() {
        let target = receiver(c, &index("notify", i), item);
        match (target, out.as_mut()) {
            (Some(t), Some(all)) => {
                if all.iter().any(|o: &NotifyTarget| o.name == t.name) {
                    c.error(
                        &child(&index("notify", i), "name"),
                        format!("a receiver named {:?} is already defined: give each [[notify]] its own name", t.name),
                    );
                    out = None;
                } else {
                    all.push(t);
                }
            }
            (None, _) => out = None,
            (Some(_), None) => {}
        }
    }
    out
}

/// One `[[notify]]` table.
fn receiver(c: &mut Checker<'_>, key: &str, node: &toml::Value) -> Option<NotifyTarget> {
    let entries = c.table(key, node, "a table with name, url and secret")?;
    c.unknown_keys(key, &entries, &NOTIFY_KEYS);
    let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let required = |c: &mut Checker<'_>, k: &str| {
        let v = get(k);
        if v.is_none() {
            c.error(&child(key, k), format!("this receiver has no {k}"));
        }
        v
    };
    let (name, url, secret) = (
        required(c, "name"),
        required(c, "url"),
        required(c, "secret"),
    );
    let name = name.and_then(|v| receiver_name(c, &child(key, "name"), v));
    let url = url.and_then(|v| c.url(&child(key, "url"), v));
    let secret = secret.and_then(|v| {
        let at = child(key, "secret");
        let s = c.string(&at, v)?;
        match webhook_key(&s) {
            Ok(_) => Some(s),
            Err(e) => {
                c.error(&at, e.to_string());
                None
            }
        }
    });
    let events = match get("events") {
        Some(v) => events(c, &child(key, "events"), v),
        None => Some(NotifyEvent::ALL.to_vec()),
    };
    let format = match get("format") {
        Some(v) => format(c, &child(key, "format"), v),
        None => Some(NotifyFormat::Standard),
    };
    Some(NotifyTarget {
        name: name?,
        url: url?,
        secret: secret?,
        events: events?,
        format: format?,
    })
}

/// A receiver's name: 1–64 of `[A-Za-z0-9._-]`, as keys are named.
fn receiver_name(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<String> {
    let name = c.raw_str(key, v)?;
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        c.error(
            key,
            format!("receiver name {name:?} is not allowed: use 1 to 64 letters, digits, '.', '_' or '-'"),
        );
        return None;
    }
    Some(name.to_owned())
}

/// `events`: a non-empty list of the events plangate sends.
fn events(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<Vec<NotifyEvent>> {
    let names = c.string_list(key, v)?;
    let known: Vec<&str> = NotifyEvent::ALL.iter().map(|e| e.as_str()).collect();
    let mut out = Vec::with_capacity(names.len());
    let mut ok = true;
    for (i, n) in names.iter().enumerate() {
        match NotifyEvent::parse(n) {
            Some(e) if !out.contains(&e) => out.push(e),
            Some(_) => {}
            None => {
                c.error(
                    &index(key, i),
                    format!(
                        "event {n:?} is not one plangate sends: use {}",
                        list(&known)
                    ),
                );
                ok = false;
            }
        }
    }
    if ok && out.is_empty() {
        c.error(
            key,
            format!(
                "events is empty: leave it out for every event, or name some of {}",
                list(&known)
            ),
        );
        ok = false;
    }
    ok.then_some(out)
}

/// `format`: `"standard"` or `"slack"`.
fn format(c: &mut Checker<'_>, key: &str, v: &toml::Value) -> Option<NotifyFormat> {
    match c.raw_str(key, v)? {
        "standard" => Some(NotifyFormat::Standard),
        "slack" => Some(NotifyFormat::Slack),
        other => {
            c.error(
                key,
                format!("format {other:?} is not allowed: use \"standard\" (the event as JSON) or \"slack\" (a Slack incoming webhook's text)"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    fn parse(text: &str) -> Result<crate::Config, String> {
        let env: HashMap<String, String> = [(
            "HOOK_SECRET".to_owned(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
        )]
        .into();
        crate::toml_file::parse_toml(
            &format!("[upstreams]\n{text}"),
            Path::new("/etc/plangate.toml"),
            &env,
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_receiver_reads_with_its_defaults_and_hides_its_secret() {
        let config = parse(
            "[[notify]]\nname = \"ops\"\nurl = \"https://hooks.example/plangate\"\nsecret = \"${env:HOOK_SECRET}\"\n",
        )
        .expect("config");
        let t = &config.notify[0];
        assert_eq!(t.name, "ops");
        assert_eq!(t.events.len(), 5);
        assert_eq!(t.format, plangate_core::notify::NotifyFormat::Standard);
        assert_eq!(t.key().len(), 24);
        let shown = format!("{t:?} {}", serde_json::to_string(t).expect("json"));
        assert!(!shown.contains("MfKQ9r8G"), "{shown}");
        // A webhook URL's path can be its secret (Slack's is).
        assert!(!shown.contains("/plangate"), "{shown}");
        assert_eq!(t.shown_url(), "https://hooks.example/…");
    }

    #[test]
    fn every_mistake_in_a_receiver_is_named_at_once() {
        let err = parse(
            "[[notify]]\nname = \"ops team\"\nurl = \"ftp://x\"\nsecret = \"hunter2\"\nevents = [\"plan.reviewed\"]\nformat = \"teams\"\n[[notify]]\nurl = \"https://a.example\"\n",
        )
        .expect_err("invalid");
        for part in [
            "notify[0].name",
            "notify[0].url",
            "notify[0].secret: a webhook secret starts with whsec_",
            "notify[0].events[0]: event \"plan.reviewed\" is not one plangate sends",
            "notify[0].format",
            "notify[1].name: this receiver has no name",
            "notify[1].secret: this receiver has no secret",
        ] {
            assert!(err.contains(part), "{part} in {err}");
        }
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn two_receivers_may_not_share_a_name() {
        let one = "[[notify]]\nname = \"ops\"\nurl = \"https://a.example\"\nsecret = \"${env:HOOK_SECRET}\"\n";
        let err = parse(&format!("{one}{one}")).expect_err("duplicate");
        assert!(
            err.contains("notify[1].name: a receiver named \"ops\" is already defined"),
            "{err}"
        );
    }
}
