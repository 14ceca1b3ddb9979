//! Syntax checks for the per-tool planning settings: `predicted_effect`
//! templates and JSON pointers. Only the syntax is checked here — whether an
//! argument or a result field exists is known only when a call is planned or
//! applied, so a pointer that finds nothing then yields nothing.

/// The placeholder names of a `predicted_effect` template, in order, or what
/// is wrong with it (a lowercase message).
///
/// `{name}` is a placeholder for the top-level argument `name`; `{{` and
/// `}}` are literal braces. A `{` never closed, a `}` never opened, a `{`
/// inside a placeholder and an empty `{}` are errors.
pub(crate) fn template_placeholders(template: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(pos) = rest.find(['{', '}']) {
        let brace = &rest[pos..];
        if let Some(after) = brace
            .strip_prefix("{{")
            .or_else(|| brace.strip_prefix("}}"))
        {
            rest = after;
        } else if brace.starts_with('}') {
            return Err("has a '}' with no '{' before it: write }} for a literal brace".to_owned());
        } else {
            let inner = &brace[1..];
            let Some(end) = inner
                .find(['{', '}'])
                .filter(|&e| inner[e..].starts_with('}'))
            else {
                return Err(format!(
                    "has an unclosed '{{' at {:?}: close the placeholder with '}}', or write {{{{ for a literal brace",
                    brace.chars().take(16).collect::<String>()
                ));
            };
            let name = &inner[..end];
            if name.is_empty() {
                return Err(
                    "has an empty placeholder {}: name a top-level argument, like {id}".to_owned(),
                );
            }
            names.push(name);
            rest = &inner[end + 1..];
        }
    }
    Ok(names)
}

/// What is wrong with `pointer` as an RFC 6901 JSON pointer, if anything:
/// it is empty (the whole document) or starts with `/`, and every `~` is
/// `~0` (a literal `~`) or `~1` (a literal `/`).
pub(crate) fn pointer_problem(pointer: &str) -> Option<String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Some(format!(
            "{pointer:?} is not a json pointer: it must start with '/', like \"/{pointer}\""
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Some(format!(
                "{pointer:?} is not a json pointer: '~' must be followed by 0 (for '~') or 1 (for '/')"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_named_and_double_braces_are_literal() {
        assert_eq!(
            template_placeholders("Update page {id}: {title}."),
            Ok(vec!["id", "title"])
        );
        assert_eq!(
            template_placeholders("Set {{literal}} and }} then {x}{y}"),
            Ok(vec!["x", "y"])
        );
        assert_eq!(template_placeholders("No placeholders."), Ok(vec![]));
        assert_eq!(template_placeholders("{{{id}}}"), Ok(vec!["id"]));
    }

    #[test]
    fn unbalanced_or_empty_braces_are_errors() {
        for (bad, says) in [
            ("Update page {id", "unclosed"),
            ("Update {page {id}", "unclosed"),
            ("Update page id}", "no '{' before it"),
            ("Update {}", "empty placeholder"),
            ("{", "unclosed"),
            ("}", "no '{' before it"),
        ] {
            let m = template_placeholders(bad).unwrap_err();
            assert!(m.contains(says), "{bad:?}: {m}");
        }
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        for ok in ["", "/", "/id", "/a/0/b", "/a~0b/c~1d"] {
            assert_eq!(pointer_problem(ok), None, "{ok:?}");
        }
        assert!(pointer_problem("id").unwrap().contains("\"/id\""));
        assert!(pointer_problem("/a~2").unwrap().contains("'~'"));
        assert!(pointer_problem("/a~").unwrap().contains("'~'"));
    }
}
