//! RFC 8785 (JSON Canonicalization Scheme) for `serde_json` values.
//!
//! Digests and fingerprints must not depend on how a client happened to
//! order keys or spell numbers, so everything hashed goes through one
//! canonical form: object keys sorted by their UTF-16 code units, no
//! whitespace, strings escaped as ECMAScript's `JSON.stringify` does, and
//! numbers written as ECMAScript's `Number.prototype.toString` writes them.
//!
//! JCS numbers are IEEE 754 doubles. An integer beyond ±(2^53−1) has no
//! faithful double, so it cannot be canonicalised: [`canonical_json`]
//! refuses it (docs/design.md §4: such a call is refused, not planned), naming where
//! it is but never what it is.

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// The largest integer a double holds exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// An integer beyond ±(2^53−1). `path` is its RFC 6901 JSON pointer.
    /// The message never contains the number: it may be a secret.
    #[error(
        "the integer at {} is beyond ±(2^53−1) and cannot be canonicalised; send it as a string",
        describe_pointer(.path)
    )]
    UnsafeInteger {
        /// The RFC 6901 JSON pointer of the integer (`""` is the whole value).
        path: String,
    },
}

fn describe_pointer(path: &str) -> String {
    if path.is_empty() {
        "the top level".to_owned()
    } else {
        format!("JSON pointer {path:?}")
    }
}

/// Appends one RFC 6901 reference token (`~` ⇒ `~0`, `/` ⇒ `~1`) to a
/// JSON pointer.
pub(crate) fn push_pointer_token(path: &mut String, token: &str) {
    path.push('/');
    for c in token.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

fn is_safe(n: &Number) -> bool {
    if let Some(u) = n.as_u64() {
        u <= MAX_SAFE_INTEGER
    } else if let Some(i) = n.as_i64() {
        i.unsigned_abs() <= MAX_SAFE_INTEGER
    } else {
        true // a double is what JCS expects
    }
}

/// Checks that every integer in `v` lies within ±(2^53−1), so `v` can be
/// canonicalised faithfully. The first offender, depth-first, is named by
/// its JSON pointer.
pub fn check_safe_integers(v: &Value) -> Result<(), CanonicalError> {
    let mut path = String::new();
    check_at(v, &mut path)
}

fn check_at(v: &Value, path: &mut String) -> Result<(), CanonicalError> {
    match v {
        Value::Number(n) if !is_safe(n) => {
            Err(CanonicalError::UnsafeInteger { path: path.clone() })
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                push_pointer_token(path, &i.to_string());
                check_at(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = path.len();
                push_pointer_token(path, k);
                check_at(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The RFC 8785 canonical JSON text of `v`, or an error when it holds an
/// integer that a double cannot represent.
pub fn canonical_json(v: &Value) -> Result<String, CanonicalError> {
    check_safe_integers(v)?;
    Ok(canonical_lossless(v))
}

/// The canonical text of `v` without the safe-integer check: an unsafe
/// integer is written with all its digits. Identical to [`canonical_json`]
/// for every value that passes [`check_safe_integers`]; used where failing
/// is not an option (a digest over records that were checked when made) and
/// a distinct, deterministic text is all that matters.
pub(crate) fn canonical_lossless(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

pub(crate) fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, k);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = n.as_f64() {
        // serde_json numbers are always finite; `format` would spell NaN
        // and infinities as ECMAScript does, should one ever appear.
        out.push_str(ryu_js::Buffer::new().format(f));
    }
}

pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{08}' => out.push_str("\\b"),
            '\u{09}' => out.push_str("\\t"),
            '\u{0A}' => out.push_str("\\n"),
            '\u{0C}' => out.push_str("\\f"),
            '\u{0D}' => out.push_str("\\r"),
            c if c < '\u{20}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn canon(text: &str) -> String {
        canonical_json(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        assert_eq!(
            canon(input),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn rfc8785_section_3_2_3_keys_sort_by_utf16_code_units() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        assert_eq!(
            canon(input),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    #[test]
    fn rfc8785_appendix_b_numbers() {
        let cases: [(u64, &str); 24] = [
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, want) in cases {
            let v = Value::from(f64::from_bits(bits));
            assert_eq!(canonical_json(&v).unwrap(), want, "{bits:#018x}");
        }
    }

    #[test]
    fn numbers_are_written_as_ecmascript_writes_them() {
        for (text, want) in [
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("-0.0", "0"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("1.0", "1"),
            ("-12", "-12"),
            ("333333333.33333329", "333333333.3333333"),
        ] {
            assert_eq!(canon(text), want, "{text}");
        }
    }

    #[test]
    fn strings_escape_only_what_jcs_escapes() {
        let v = json!("tab\there \u{1} \u{7f} \u{2028} é \"q\" \\ /");
        assert_eq!(
            canonical_json(&v).unwrap(),
            "\"tab\\there \\u0001 \u{7f} \u{2028} é \\\"q\\\" \\\\ /\""
        );
    }

    #[test]
    fn nested_values_have_no_whitespace_and_sorted_keys_at_every_depth() {
        let v = json!({"b": [1, {"z": null, "a": true}], "a": {}, "c": []});
        assert_eq!(
            canonical_json(&v).unwrap(),
            r#"{"a":{},"b":[1,{"a":true,"z":null}],"c":[]}"#
        );
    }

    #[test]
    fn integers_beyond_two_to_the_53_are_refused_by_path_without_their_value() {
        assert_eq!(check_safe_integers(&json!(MAX_SAFE_INTEGER)), Ok(()));
        assert_eq!(
            check_safe_integers(&json!(-(MAX_SAFE_INTEGER as i64))),
            Ok(())
        );
        let v = json!({"a": [1, {"x/y~": 9007199254740993u64}]});
        let err = canonical_json(&v).unwrap_err();
        assert_eq!(
            err,
            CanonicalError::UnsafeInteger {
                path: "/a/1/x~1y~0".into()
            }
        );
        assert_eq!(v.pointer("/a/1/x~1y~0"), Some(&json!(9007199254740993u64)));
        let secret = json!({"api_key": -9007199254740993i64});
        let msg = canonical_json(&secret).unwrap_err().to_string();
        assert!(msg.contains("\"/api_key\""), "{msg}");
        assert!(!msg.contains("9007199254740993"), "{msg}");
        assert!(
            canonical_json(&json!(u64::MAX))
                .unwrap_err()
                .to_string()
                .contains("the top level")
        );
    }

    #[test]
    fn the_lossless_form_equals_the_canonical_form_for_safe_values() {
        let v = json!({"n": [1, -2, 3.5], "s": "x"});
        assert_eq!(canonical_lossless(&v), canonical_json(&v).unwrap());
        assert_eq!(canonical_lossless(&json!(u64::MAX)), u64::MAX.to_string());
    }
}
