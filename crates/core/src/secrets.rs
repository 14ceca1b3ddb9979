//! Splitting a call's arguments into what may be shown and what must be
//! sealed (docs/design.md §5, "Redaction").
//!
//! A planned step keeps its redacted arguments in the clear, for every
//! answer, view and export, and its secret values apart, so the edge can
//! seal them at rest (AEAD) and unseal them only to replay the call. The
//! secrets are addressed by RFC 6901 JSON pointers into the arguments, so
//! putting them back needs nothing but the redacted copy.

use serde_json::Value;

/// [`crate::Redactor::split`] by the built-in rules: the redacted copy of
/// `args` (exactly [`crate::redact()`]'s) and every secret value with its
/// JSON pointer.
pub fn split_secrets(args: &Value) -> (Value, Vec<(String, Value)>) {
    crate::Redactor::builtin().split(args)
}

/// Puts secrets taken by [`split_secrets`] back into a redacted copy.
/// `restore_secrets(&r, &s) == args` when `(r, s) = split_secrets(&args)`.
/// A pointer that leads nowhere in `redacted` is skipped: restoring never
/// invents structure.
pub fn restore_secrets(redacted: &Value, secrets: &[(String, Value)]) -> Value {
    let mut out = redacted.clone();
    for (path, value) in secrets {
        if let Some(slot) = out.pointer_mut(path) {
            *slot = value.clone();
        }
    }
    out
}

/// A person's new arguments for an amended step, with every `"[redacted]"`
/// in them standing for the value sealed at the same place in the step
/// before (`old`, as [`split_secrets`] took it): "keep the secret as it
/// is", without anyone seeing it. `Err` names the first place (a JSON
/// pointer) where `"[redacted]"` has no sealed value to stand for.
pub fn keep_sealed(new: &Value, old: &[(String, Value)]) -> Result<Value, String> {
    fn walk(v: &mut Value, path: &mut String, old: &[(String, Value)]) -> Result<(), String> {
        match v {
            Value::String(s) if s == crate::REDACTED => match old.iter().find(|(p, _)| p == path) {
                Some((_, sealed)) => *v = sealed.clone(),
                None => return Err(path.clone()),
            },
            Value::Object(m) => {
                for (k, child) in m.iter_mut() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    walk(child, path, old)?;
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter_mut().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("/{i}"));
                    walk(child, path, old)?;
                    path.truncate(len);
                }
            }
            _ => {}
        }
        Ok(())
    }
    let mut out = new.clone();
    walk(&mut out, &mut String::new(), old)?;
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::{is_secret_key, redact};

    #[test]
    fn redacted_in_new_arguments_keeps_the_sealed_value_at_that_place() {
        let old =
            json!({"id": 1, "conn": {"token": "s3cret", "host": "a"}, "list": [{"password": "p"}]});
        let (_, sealed) = split_secrets(&old);
        let new = json!({"id": 2, "conn": {"token": "[redacted]", "host": "b"}, "list": [{"password": "[redacted]"}]});
        assert_eq!(
            keep_sealed(&new, &sealed),
            Ok(
                json!({"id": 2, "conn": {"token": "s3cret", "host": "b"}, "list": [{"password": "p"}]})
            )
        );
        // A new secret is taken as given; "[redacted]" where nothing was
        // sealed is refused by its place.
        let fresh = json!({"conn": {"token": "new"}});
        assert_eq!(keep_sealed(&fresh, &sealed), Ok(fresh.clone()));
        assert_eq!(
            keep_sealed(&json!({"conn": {"api_key": "[redacted]"}}), &sealed),
            Err("/conn/api_key".to_owned())
        );
    }

    #[test]
    fn secrets_come_out_with_their_pointers_and_go_back_in() {
        let args = json!({
            "id": 42,
            "conn": {"API_KEY": "k1", "a/b~token": {"x": [1, 2]}},
            "items": [{"password": "p"}, {"title": "t"}]
        });
        let (redacted, secrets) = split_secrets(&args);
        assert_eq!(redacted, redact(&args));
        assert_eq!(
            secrets,
            vec![
                ("/conn/API_KEY".to_owned(), json!("k1")),
                ("/conn/a~1b~0token".to_owned(), json!({"x": [1, 2]})),
                ("/items/0/password".to_owned(), json!("p")),
            ]
        );
        assert_eq!(restore_secrets(&redacted, &secrets), args);
    }

    #[test]
    fn arguments_without_secrets_split_into_themselves() {
        for v in [json!(null), json!("token"), json!([1, {"a": 2}])] {
            assert_eq!(split_secrets(&v), (v.clone(), vec![]));
        }
    }

    #[test]
    fn a_pointer_that_leads_nowhere_is_skipped() {
        let restored = restore_secrets(&json!({"a": 1}), &[("/b/c".into(), json!("s"))]);
        assert_eq!(restored, json!({"a": 1}));
    }

    /// Keys that mix secret words, pointer escapes and plain names.
    pub(crate) fn any_key() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "id",
            "title",
            "",
            "a/b",
            "x~y",
            "ünï",
            "api_key",
            "API-KEY",
            "sessionToken",
            "db_password",
            "Authorization",
            "cookie~/",
            "client_secret",
            "nested",
        ])
        .prop_map(str::to_owned)
    }

    /// Arbitrary JSON whose string leaves never contain `SECRET`.
    pub(crate) fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-1_000_000i64..1_000_000).prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z ]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(any_key(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Replaces every scalar under a secret key by a distinct `SECRET-n`
    /// marker, so a leak shows up as text.
    pub(crate) fn mark_secrets(v: &mut Value, under_secret: bool, n: &mut u32) {
        match v {
            Value::Object(map) => {
                for (k, item) in map.iter_mut() {
                    mark_secrets(item, under_secret || is_secret_key(k), n);
                }
            }
            Value::Array(items) => {
                for item in items {
                    mark_secrets(item, under_secret, n);
                }
            }
            scalar if under_secret => {
                *n += 1;
                *scalar = Value::String(format!("SECRET-{n}"));
            }
            _ => {}
        }
    }

    proptest! {
        #[test]
        fn restoring_a_split_gives_back_the_arguments_and_the_redacted_part_leaks_nothing(
            mut args in any_json()
        ) {
            let mut n = 0;
            mark_secrets(&mut args, false, &mut n);
            let (redacted, secrets) = split_secrets(&args);
            prop_assert_eq!(restore_secrets(&redacted, &secrets), args.clone());
            prop_assert_eq!(&redacted, &redact(&args));
            let text = serde_json::to_string(&redacted).unwrap();
            prop_assert!(!text.contains("SECRET"), "{}", text);
            // Every marker went into the secrets.
            let taken = serde_json::to_string(&secrets).unwrap();
            for i in 1..=n {
                let marker = format!("\"SECRET-{i}\"");
                prop_assert!(taken.contains(&marker), "{} missing", marker);
            }
        }
    }
}
