//! `predicted_effect` sentences (docs/design.md §5): one sentence telling the
//! person what a planned step would do.
//!
//! An operator may configure a template per tool, such as
//! `"Update page {id}: {title}."`; `{name}` is the top-level argument
//! `name` and `{{` / `}}` are literal braces. Without one, a generic
//! sentence names tool, target and values ([`crate::sentence`]). Templates are only ever given
//! redacted arguments, and rendering redacts again, so a sentence never
//! shows a secret.

use serde_json::Value;

use crate::{REDACTED, is_secret_key, redact};

enum Piece<'a> {
    Text(&'a str),
    Field(&'a str),
}

/// Splits a template into literal text and `{name}` fields. Errors name
/// the byte offset of the fault.
fn parse(template: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(i) = rest.find(['{', '}']) {
        if i > 0 {
            pieces.push(Piece::Text(&rest[..i]));
        }
        let brace = &rest[i..i + 1];
        let after = &rest[i + 1..];
        if after.starts_with(brace) {
            pieces.push(Piece::Text(brace));
            rest = &after[1..];
            offset += i + 2;
            continue;
        }
        if brace == "}" {
            return Err(format!(
                "unmatched '}}' at byte {}: write '}}}}' for a literal brace",
                offset + i
            ));
        }
        let Some(end) = after
            .find(['{', '}'])
            .filter(|&e| after.as_bytes()[e] == b'}')
        else {
            return Err(format!(
                "unclosed '{{' at byte {}: close it with '}}' or write '{{{{' for a literal brace",
                offset + i
            ));
        };
        if end == 0 {
            return Err(format!(
                "empty field '{{}}' at byte {}: name an argument, as in '{{id}}'",
                offset + i
            ));
        }
        pieces.push(Piece::Field(&after[..end]));
        rest = &after[end + 1..];
        offset += i + end + 2;
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// Checks a configured template: braces balanced (`{{`/`}}` for literal
/// ones) and no empty `{}`. For config validation, so a bad template fails
/// at load with a message naming where.
pub fn validate_template(template: &str) -> Result<(), String> {
    parse(template).map(|_| ())
}

/// How one argument reads inside a sentence: strings as they are, other
/// values as compact JSON, with any secret inside redacted.
fn show(value: &Value) -> String {
    match redact(value) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// Renders a template against a step's redacted arguments: `{name}` is the
/// top-level argument `name` (a string without quotes, anything else as
/// compact JSON, `?` when missing), `{{` and `}}` are literal braces.
///
/// Never fails: a template that [`validate_template`] would refuse renders
/// its faulty braces as they are.
pub fn render_template(template: &str, redacted_args: &Value) -> String {
    let Ok(pieces) = parse(template) else {
        return template.to_owned();
    };
    let mut out = String::with_capacity(template.len());
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Field(name) if is_secret_key(name) => out.push_str(REDACTED),
            Piece::Field(name) => match redacted_args.get(name) {
                Some(v) => out.push_str(&show(v)),
                None => out.push('?'),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fields_are_filled_from_top_level_arguments() {
        let args = json!({"id": 42, "title": "Our story", "tags": ["a", "b"], "draft": false});
        assert_eq!(
            render_template("Update page {id}: {title} {tags} {draft} {missing}.", &args),
            "Update page 42: Our story [\"a\",\"b\"] false ?."
        );
    }

    #[test]
    fn doubled_braces_are_literal() {
        assert_eq!(
            render_template("{{id}} is {id}, }} {{", &json!({"id": 1})),
            "{id} is 1, } {"
        );
        assert_eq!(validate_template("{{id}} is {id}, }} {{"), Ok(()));
    }

    #[test]
    fn a_template_never_shows_a_secret_even_if_given_one() {
        let args = json!({"api_key": "k1", "conn": {"token": "t1"}});
        let out = render_template("{api_key} {conn}", &args);
        assert_eq!(out, "[redacted] {\"token\":\"[redacted]\"}");
        let redacted = redact(&args);
        assert_eq!(render_template("{api_key}", &redacted), "[redacted]");
    }

    #[test]
    fn bad_templates_are_refused_with_where_and_rendered_as_they_are() {
        for (bad, says) in [
            ("Update {id", "unclosed '{' at byte 7"),
            ("Update id}", "unmatched '}' at byte 9"),
            ("Update {}", "empty field '{}' at byte 7"),
            ("Update {a{b}", "unclosed '{' at byte 7"),
        ] {
            let err = validate_template(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
            assert_eq!(render_template(bad, &json!({"id": 1})), bad);
        }
        assert_eq!(validate_template(""), Ok(()));
        assert_eq!(validate_template("no fields"), Ok(()));
    }
}
