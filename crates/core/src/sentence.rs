//! The predicted effect of a write no template, preview or profile
//! describes (docs/design.md §5; issue "plans a person can read"): one sentence
//! built from the tool's input schema and the (redacted) arguments.
//!
//! A person approving a plan must tell two steps apart. So the sentence
//! always names the **target** — the arguments that say *where* the write
//! lands: by name (`path`, `uri`, `url`, `id`, `name`, `title`, `key`,
//! `branch`, `repo`, …) or by the schema's description of the field (a
//! "path", "file", "URL", "identifier") — with long paths shortened from
//! the left, keeping the file name. Other short values are quoted, long
//! ones shown by their start and size, lists by their items' names or
//! their count. The effect class and where it lands close it:
//!
//! `Call write_file on fs for path …/notes/todo.md with content "buy milk"
//! (destructive, lands live).`
//!
//! The arguments given are already redacted, and every value goes through
//! [`crate::redact()`] again, so a sentence never shows a secret.

use serde_json::{Map, Value};

use crate::{Effect, Where, redact};

/// The facts one sentence is made of.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    /// The upstream's name.
    pub server: &'a str,
    /// The upstream's own tool name.
    pub tool: &'a str,
    /// The tool's effect class.
    pub effect: Effect,
    /// The redacted arguments.
    pub arguments: &'a Value,
    /// The tool's `inputSchema`, when it has one: its field descriptions
    /// help find the target.
    pub schema: Option<&'a Map<String, Value>>,
    /// A target already known (from config's pointer or a preview): named
    /// instead of the one found in the arguments.
    pub target: Option<&'a str>,
    /// Where the write lands.
    pub lands: Where,
}

/// Field names (lowercase, without `_` and `-`) that name where a write
/// lands, most telling first.
const TARGET_NAMES: &[&str] = &[
    "path",
    "filepath",
    "file",
    "filename",
    "source",
    "destination",
    "src",
    "dest",
    "paths",
    "directory",
    "dir",
    "uri",
    "url",
    "owner",
    "repo",
    "repository",
    "branch",
    "ref",
    "issuenumber",
    "pullnumber",
    "id",
    "key",
    "name",
    "title",
    "target",
];

/// Words in a field's schema description that make it a target.
const TARGET_WORDS: &[&str] = &["path", "file", "url", "uri", "identifier"];

/// Fields whose values are paths, shortened from the left: the first
/// [`TARGET_NAMES`], up to `dir`.
const PATH_NAMES: &[&str] = TARGET_NAMES.split_at(11).0;

/// At most this many targets and other fields are named.
const MAX_TARGETS: usize = 4;
const MAX_OTHERS: usize = 5;
/// Strings up to this many characters are quoted whole.
const SHORT: usize = 40;
/// A longer string shows this many characters, then its size.
const START: usize = 24;
/// A list names at most this many items.
const MAX_ITEMS: usize = 3;

fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// How telling `name` is as a target (lower is more), if it is one.
fn target_rank(name: &str, schema: Option<&Map<String, Value>>) -> Option<usize> {
    let n = normalized(name);
    if let Some(i) = TARGET_NAMES.iter().position(|t| *t == n) {
        return Some(i);
    }
    let description = schema?
        .get("properties")?
        .get(name)?
        .get("description")?
        .as_str()?
        .to_lowercase();
    TARGET_WORDS
        .iter()
        .any(|w| description.contains(w))
        .then_some(TARGET_NAMES.len())
}

/// A path shortened from the left to about [`SHORT`] characters, keeping
/// the file name whole: `/home/me/projects/notes/todo.md` → `…/notes/todo.md`.
fn short_path(path: &str) -> String {
    if path.chars().count() <= SHORT {
        return path.to_owned();
    }
    let parts: Vec<&str> = path.split('/').collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut len = 2;
    for part in parts.iter().rev() {
        let more = part.chars().count() + 1;
        if !kept.is_empty() && len + more > SHORT {
            break;
        }
        len += more;
        kept.push(part);
    }
    kept.reverse();
    format!("…/{}", kept.join("/"))
}

/// A string quoted for a sentence: control characters escaped, long ones
/// cut with their size.
fn quoted(s: &str) -> String {
    let escape = |t: &str| -> String {
        t.chars()
            .flat_map(|c| match c {
                '\n' => "\\n".chars().collect::<Vec<_>>(),
                '"' => "\\\"".chars().collect(),
                c if c.is_control() => ' '.to_string().chars().collect(),
                c => vec![c],
            })
            .collect()
    };
    let chars = s.chars().count();
    if chars <= SHORT {
        return format!("\"{}\"", escape(s));
    }
    let start: String = s.chars().take(START).collect();
    let lines = s.lines().count();
    let size = if lines > 1 {
        format!("{lines} lines, {chars} chars")
    } else {
        format!("{chars} chars")
    };
    format!("\"{}…\" ({size})", escape(&start))
}

/// The name an item of a list goes by (`name`, `title`, `id`, …), if any.
fn item_name(item: &Value) -> Option<String> {
    let object = item.as_object()?;
    for key in ["name", "title", "id", "key", "path", "uri", "url", "from"] {
        if let Some(v) = object.get(key) {
            return Some(match v {
                Value::String(s) => quoted(s),
                other => other.to_string(),
            });
        }
    }
    None
}

/// How one value reads; `path` shortens strings as paths.
fn value_text(value: &Value, path: bool) -> String {
    match value {
        Value::String(s) if path => short_path(s),
        Value::String(s) => quoted(s),
        Value::Array(items) if items.is_empty() => "(none)".to_owned(),
        Value::Array(items) => {
            let named: Vec<String> = items
                .iter()
                .take(MAX_ITEMS)
                .map(|item| match item {
                    Value::String(s) if path => Some(short_path(s)),
                    Value::String(s) => Some(quoted(s)),
                    Value::Number(_) | Value::Bool(_) => Some(item.to_string()),
                    other => item_name(other),
                })
                .collect::<Option<_>>()
                .unwrap_or_default();
            if named.is_empty() {
                format!("({} item{})", items.len(), plural(items.len()))
            } else if items.len() > named.len() {
                format!(
                    "{} and {} more",
                    named.join(", "),
                    items.len() - named.len()
                )
            } else {
                named.join(", ")
            }
        }
        Value::Object(map) => match item_name(value) {
            Some(name) => name,
            None => format!("({} field{})", map.len(), plural(map.len())),
        },
        other => other.to_string(),
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The sentence: `Call TOOL on SERVER for TARGETS with OTHERS (EFFECT,
/// lands WHERE).` See the module's note.
pub fn generic_effect(facts: &CallFacts<'_>) -> String {
    let mut out = format!("Call {} on {}", facts.tool, facts.server);
    let lands = match facts.lands {
        Where::Live => "lands live",
        Where::Copy => "lands on a copy",
    };
    let tail = format!(" ({}, {lands}).", facts.effect);
    let args = redact(facts.arguments);
    let map = match &args {
        Value::Object(map) if !map.is_empty() => map,
        Value::Object(_) | Value::Null => {
            if let Some(t) = facts.target {
                out.push_str(&format!(" for {t}"));
            }
            out.push_str(" with no arguments");
            out.push_str(&tail);
            return out;
        }
        _ => {
            out.push_str(" with arguments that are not an object");
            out.push_str(&tail);
            return out;
        }
    };
    let mut targets: Vec<(usize, &str)> = map
        .keys()
        .filter_map(|k| target_rank(k, facts.schema).map(|r| (r, k.as_str())))
        .collect();
    targets.sort();
    targets.truncate(MAX_TARGETS);
    let shown = |k: &str| value_text(&map[k], PATH_NAMES.contains(&normalized(k).as_str()));
    let target_texts: Vec<String> = match facts.target {
        Some(t) => vec![t.to_owned()],
        None => targets
            .iter()
            .map(|(_, k)| format!("{k} {}", shown(k)))
            .collect(),
    };
    if !target_texts.is_empty() {
        out.push_str(" for ");
        out.push_str(&join_and(&target_texts));
    }
    let is_target = |k: &str| facts.target.is_none() && targets.iter().any(|(_, t)| *t == k);
    let others: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !is_target(k))
        .collect();
    if !others.is_empty() {
        let listed: Vec<String> = others
            .iter()
            .take(MAX_OTHERS)
            .map(|k| format!("{k} {}", shown(k)))
            .collect();
        out.push_str(" with ");
        out.push_str(&listed.join(", "));
        if others.len() > listed.len() {
            out.push_str(&format!(" and {} more", others.len() - listed.len()));
        }
    }
    out.push_str(&tail);
    out
}

fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn facts<'a>(tool: &'a str, effect: Effect, arguments: &'a Value) -> CallFacts<'a> {
        CallFacts {
            server: "fs",
            tool,
            effect,
            arguments,
            schema: None,
            target: None,
            lands: Where::Live,
        }
    }

    #[test]
    fn a_file_write_names_its_path_shortened_and_quotes_short_content() {
        let new =
            json!({"path": "/home/me/projects/plangate-trial/notes/notes.md", "content": "hello"});
        let old = json!({"path": "/home/me/projects/plangate-trial/notes/existing.txt", "content": "overwritten"});
        let a = generic_effect(&facts("write_file", Effect::Destructive, &new));
        let b = generic_effect(&facts("write_file", Effect::Destructive, &old));
        assert_eq!(
            a,
            "Call write_file on fs for path …/plangate-trial/notes/notes.md with content \"hello\" (destructive, lands live)."
        );
        assert_eq!(
            b,
            "Call write_file on fs for path …/plangate-trial/notes/existing.txt with content \"overwritten\" (destructive, lands live)."
        );
        assert_ne!(a, b);
    }

    #[test]
    fn long_values_show_their_start_and_size_and_lists_their_names() {
        let text = "line one of a long file\nline two\nline three\nline four of it all";
        let args = json!({"path": "a.md", "content": text, "edits": [{"oldText": "a", "newText": "b"}, {"oldText": "c", "newText": "d"}]});
        let s = generic_effect(&facts("edit_file", Effect::Destructive, &args));
        assert_eq!(
            s,
            "Call edit_file on fs for path a.md with content \"line one of a long file\\n…\" (4 lines, 63 chars), edits (2 items) (destructive, lands live)."
        );
        let entities = json!({"entities": [
            {"name": "Alice", "entityType": "person", "observations": []},
            {"name": "Bob", "entityType": "person", "observations": []},
        ]});
        let mut f = facts("create_entities", Effect::Write, &entities);
        f.server = "memory";
        assert_eq!(
            generic_effect(&f),
            "Call create_entities on memory with entities \"Alice\", \"Bob\" (write, lands live)."
        );
        let many = json!({"entityNames": ["a", "b", "c", "d", "e"]});
        let mut f = facts("delete_entities", Effect::Destructive, &many);
        f.server = "memory";
        assert!(
            generic_effect(&f).contains("entityNames \"a\", \"b\", \"c\" and 2 more"),
            "{}",
            generic_effect(&f)
        );
    }

    #[test]
    fn targets_come_first_by_name_or_by_the_schemas_description() {
        let args = json!({"destination": "/x/b.txt", "source": "/x/a.txt"});
        assert_eq!(
            generic_effect(&facts("move_file", Effect::Destructive, &args)),
            "Call move_file on fs for source /x/a.txt and destination /x/b.txt (destructive, lands live)."
        );
        let schema = json!({"properties": {"where_to": {"type": "string", "description": "The file to write"}}});
        let args = json!({"where_to": "/tmp/a", "mode": 420});
        let mut f = facts("put", Effect::Write, &args);
        f.schema = schema.as_object();
        f.lands = Where::Copy;
        assert_eq!(
            generic_effect(&f),
            "Call put on fs for where_to \"/tmp/a\" with mode 420 (write, lands on a copy)."
        );
        // A target known from config names it instead.
        let args = json!({"id": 42, "title": "x"});
        let mut f = facts("update_page", Effect::Write, &args);
        f.server = "site";
        f.target = Some("42");
        assert_eq!(
            generic_effect(&f),
            "Call update_page on site for 42 with id 42, title \"x\" (write, lands live)."
        );
    }

    #[test]
    fn no_arguments_other_shapes_and_secrets() {
        assert_eq!(
            generic_effect(&facts("wipe", Effect::Destructive, &json!({}))),
            "Call wipe on fs with no arguments (destructive, lands live)."
        );
        assert_eq!(
            generic_effect(&facts("wipe", Effect::Destructive, &json!([1]))),
            "Call wipe on fs with arguments that are not an object (destructive, lands live)."
        );
        let s = generic_effect(&facts(
            "login",
            Effect::Write,
            &json!({"password": "hunter2", "user": "bob", "conn": {"token": "t"}}),
        ));
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("password \"[redacted]\""), "{s}");
        assert!(s.contains("user \"bob\""), "{s}");
        let many: Value = (0..10)
            .map(|i| (format!("f{i}"), json!(i)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        let s = generic_effect(&facts("t", Effect::Write, &many));
        assert!(s.contains("f4 4 and 5 more"), "{s}");
    }

    #[test]
    fn long_paths_keep_the_file_name_whole() {
        assert_eq!(short_path("/a/b.txt"), "/a/b.txt");
        let long = format!("/{}/{}", "d".repeat(30), "f".repeat(50));
        assert_eq!(short_path(&long), format!("…/{}", "f".repeat(50)));
    }
}
