//! Built-in server profiles ([`PROFILES_TOML`]): how plangate describes,
//! targets and previews the writes of servers people use, as data shipped
//! in the binary.
//!
//! A profile is matched by what the upstream *is*, never by what the
//! operator called it: the `serverInfo.name` it gives in `initialize`, and
//! for each tool its name and a schema fingerprint (every property the
//! profile relies on is in the tool's `inputSchema`). An operator's
//! `[upstreams.NAME.tools.TOOL]` settings win over a profile's, field by
//! field ([`crate::ToolOverride`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The built-in profiles, as shipped.
pub const PROFILES_TOML: &str = include_str!("profiles.toml");

/// One server's profile.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The `serverInfo.name` values of the server's `initialize` answer.
    pub server_info: Vec<String>,
    /// Its tools, by the server's own names.
    pub tools: BTreeMap<String, ToolProfile>,
    /// How the server places the paths it is sent (`~`, relative paths):
    /// what plangate's rules need to know where a path lands.
    #[serde(default)]
    pub placement: Option<PlacementSpec>,
}

/// How a server places the paths it is sent, as its profile says. Without
/// it, a `~` or relative path in a call cannot be placed, and rules fail
/// closed on it (docs/config.md, "Paths in rules").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementSpec {
    /// `~` and `~/…` expand to the server process's home directory
    /// (`HOME` in its environment).
    #[serde(default)]
    pub home: bool,
    /// Relative paths resolve against the directories this read tool of
    /// the server lists (one absolute path per line of its text answer),
    /// as server-filesystem resolves them against its allowed
    /// directories: the first that keeps the path inside one of them.
    pub relative_to: Option<String>,
    /// Whether the server's path arguments name files at all; `false` for
    /// a server whose `path` is a path in a repository or an API (GitHub):
    /// its tools' `paths` are then empty unless a tool lists its own.
    #[serde(default = "yes")]
    pub files: bool,
}

fn yes() -> bool {
    true
}

/// How one tool's writes are described and previewed.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolProfile {
    /// Properties the tool's `inputSchema` must have for the profile to
    /// apply (its schema fingerprint).
    pub schema: Vec<String>,
    /// A sentence template ([`plangate_core::render_template`]).
    pub predicted_effect: Option<String>,
    /// A JSON pointer into the arguments: what the write changes.
    pub target: Option<String>,
    /// `live` or `copy`.
    #[serde(default)]
    pub lands_on: Option<String>,
    /// How to see the target before the write.
    pub preview: Option<PreviewSpec>,
    /// JSON pointers to the arguments that are paths (`*` walks a list):
    /// the `paths` rules see. Unset: found by name in the schema
    /// ([`path_pointers`]).
    #[serde(default)]
    pub paths: Option<Vec<String>>,
    /// A JSON pointer to the argument relative paths of this tool resolve
    /// against (a repository's `repo_path`), instead of the server's
    /// `placement`.
    #[serde(default)]
    pub relative_to: Option<String>,
}

/// Whether a preview shows text (a diff) or structured state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PreviewKind {
    /// The target is text: the preview is a unified diff.
    Diff,
    /// The target is structured: the preview is its state.
    State,
}

/// An argument of the preview's read: one pointer, or several whose
/// matches are joined into one list.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ArgSource {
    /// One pointer (`*` walks every item of a list).
    One(String),
    /// Several, their matches joined.
    Many(Vec<String>),
}

/// How to see a target with the upstream's own tools (see
/// `profiles.toml` for each field).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewSpec {
    /// Diff or state.
    pub kind: PreviewKind,
    /// The upstream's read tool.
    pub read: String,
    /// The read's arguments, from the call's.
    pub arguments: BTreeMap<String, ArgSource>,
    /// Diff: pointer to the new text in the call's arguments; `"="` for
    /// none (the write removes or empties the target).
    pub text: Option<String>,
    /// Diff: the read's own answer is the diff.
    #[serde(default)]
    pub read_is_diff: bool,
    /// Diff: the tool itself, with these arguments added, answers the diff.
    pub dry_run: Option<Map<String, Value>>,
    /// An error answer containing this means the target does not exist.
    pub missing: Option<String>,
    /// Lines of the read's text starting with these are left out.
    #[serde(default)]
    pub ignore_lines: Vec<String>,
    /// State: pointer to a list in the state read, whose length is
    /// `{count}` in `summary`.
    pub count: Option<String>,
    /// State: the state in a sentence.
    pub summary: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    profiles: BTreeMap<String, Profile>,
}

/// The built-in profiles by name, parsed once.
pub fn builtin_profiles() -> &'static BTreeMap<String, Profile> {
    static PARSED: OnceLock<BTreeMap<String, Profile>> = OnceLock::new();
    PARSED.get_or_init(|| match toml::from_str::<File>(PROFILES_TOML) {
        Ok(file) => file.profiles,
        // A test proves the shipped file parses; should it not, plangate
        // runs without profiles rather than not at all.
        Err(_) => BTreeMap::new(),
    })
}

/// A profile matched to one tool: the profile's name and the tool's
/// settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched {
    /// The profile's name (`server-filesystem`, or the operator's own).
    pub name: String,
    /// How the tool's writes are described and previewed.
    pub tool: ToolProfile,
}

/// The profile of tool `tool` (with `input_schema`) of a server that says
/// it is `server_name`: the operator's own profiles (`[profiles.NAME]` in
/// plangate.toml) first, then the built-in ones.
pub fn profile_for(
    configured: &BTreeMap<String, Profile>,
    server_name: Option<&str>,
    tool: &str,
    input_schema: &Map<String, Value>,
) -> Option<Matched> {
    let server_name = server_name?;
    let properties = input_schema.get("properties").and_then(Value::as_object);
    configured
        .iter()
        .chain(builtin_profiles().iter())
        .find_map(|(name, profile)| {
            if !profile.server_info.iter().any(|s| s == server_name) {
                return None;
            }
            let t = profile.tools.get(tool)?;
            let fits = t
                .schema
                .iter()
                .all(|p| properties.is_some_and(|props| props.contains_key(p)));
            fits.then(|| Matched {
                name: name.clone(),
                tool: t.clone(),
            })
        })
}

/// The profile of a server that says it is `server_name`, whatever the
/// tool: the operator's own first, then the built-in ones.
pub fn server_profile<'p>(
    configured: &'p BTreeMap<String, Profile>,
    server_name: Option<&str>,
) -> Option<(&'p str, &'p Profile)> {
    let server_name = server_name?;
    configured
        .iter()
        .chain(builtin_profiles().iter())
        .find(|(_, p)| p.server_info.iter().any(|s| s == server_name))
        .map(|(name, p)| (name.as_str(), p))
}

/// Top-level argument names taken as paths when nothing says otherwise,
/// compared without case, `_` or `-`: these, and any ending in `path` or
/// `paths` (`repo_path`, `filePath`).
/// A name that is as often a plain word (`file` for its content, `name`)
/// is left out: an argument taken as a path that is not one fails rules
/// closed; set `paths` for such a tool.
pub const PATH_NAMES: [&str; 6] = ["path", "paths", "source", "destination", "dir", "directory"];

/// The pointers to a tool's path arguments: the operator's setting
/// (`[upstreams.NAME.tools.TOOL] paths`), else the tool's profile's, else
/// none for a server whose paths are not files (`placement.files =
/// false`), else every top-level property of `input_schema` whose name is a path name
/// ([`PATH_NAMES`]) and whose type is a string or a list (then each item:
/// `/paths/*`).
pub fn path_pointers(
    configured: Option<&[String]>,
    profile: Option<&ToolProfile>,
    server: Option<&PlacementSpec>,
    input_schema: &Map<String, Value>,
) -> Vec<String> {
    if let Some(set) = configured.or(profile.and_then(|p| p.paths.as_deref())) {
        return set.to_vec();
    }
    if server.is_some_and(|s| !s.files) {
        return Vec::new();
    }
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .filter_map(|(name, schema)| {
            let plain: String = name
                .chars()
                .filter(|c| *c != '_' && *c != '-')
                .flat_map(char::to_lowercase)
                .collect();
            let named = PATH_NAMES.contains(&plain.as_str())
                || plain.ends_with("path")
                || plain.ends_with("paths");
            if !named {
                return None;
            }
            let types: Vec<&str> = match schema.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let escaped = name.replace('~', "~0").replace('/', "~1");
            if types.contains(&"array") {
                Some(format!("/{escaped}/*"))
            } else if types.contains(&"string") {
                Some(format!("/{escaped}"))
            } else {
                None
            }
        })
        .collect()
}

/// The strings at `pointers` in `arguments`: the `paths` a rule sees.
pub fn path_values(pointers: &[String], arguments: &Value) -> Vec<String> {
    pointers
        .iter()
        .flat_map(|p| select(arguments, p))
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Checks one profile as a config states it: its templates, `lands_on`
/// values and preview kinds. Each error is the key at fault (below the
/// profile: `tools.TOOL.FIELD`) and what is allowed.
pub fn check_profile(profile: &Profile) -> Vec<(String, String)> {
    let mut errors = Vec::new();
    for (tool, t) in &profile.tools {
        if let Some(template) = &t.predicted_effect
            && let Err(e) = plangate_core::validate_template(template)
        {
            errors.push((format!("tools.{tool}.predicted_effect"), e));
        }
        if let Some(l) = &t.lands_on
            && l != "live"
            && l != "copy"
        {
            errors.push((
                format!("tools.{tool}.lands_on"),
                format!("{l:?} is not allowed: use \"live\" or \"copy\""),
            ));
        }
        if let Some(spec) = &t.preview
            && spec.kind == PreviewKind::Diff
            && spec.text.is_none()
            && spec.dry_run.is_none()
            && !spec.read_is_diff
        {
            errors.push((
                format!("tools.{tool}.preview"),
                "a diff needs `text` (the new text's pointer), `dry_run` or `read_is_diff = true`"
                    .to_owned(),
            ));
        }
    }
    errors
}

/// The values at `pointer` in `value`: a JSON pointer whose `*` segments
/// walk every item of a list (or value of an object). Without `*`, at most
/// one value.
pub fn select<'v>(value: &'v Value, pointer: &str) -> Vec<&'v Value> {
    let mut current = vec![value];
    if pointer.is_empty() {
        return current;
    }
    for raw in pointer.trim_start_matches('/').split('/') {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        current = current
            .into_iter()
            .flat_map(|v| -> Vec<&Value> {
                match (segment.as_str(), v) {
                    ("*", Value::Array(items)) => items.iter().collect(),
                    ("*", Value::Object(map)) => map.values().collect(),
                    (s, Value::Array(items)) => s
                        .parse::<usize>()
                        .ok()
                        .and_then(|i| items.get(i))
                        .into_iter()
                        .collect(),
                    (s, Value::Object(map)) => map.get(s).into_iter().collect(),
                    _ => Vec::new(),
                }
            })
            .collect();
    }
    current
}

/// The read's arguments for a call with `arguments`: each source's match
/// (one pointer without `*`: the value itself; otherwise a list; `=VALUE`:
/// the string VALUE).
pub fn read_arguments(spec: &PreviewSpec, arguments: &Value) -> Map<String, Value> {
    spec.arguments
        .iter()
        .filter_map(|(name, source)| {
            let value = match source {
                ArgSource::One(p) if p.starts_with('=') => Value::String(p[1..].to_owned()),
                ArgSource::One(p) if !p.contains('*') => {
                    select(arguments, p).first().cloned()?.clone()
                }
                ArgSource::One(p) => {
                    Value::Array(select(arguments, p).into_iter().cloned().collect())
                }
                ArgSource::Many(ps) => Value::Array(
                    ps.iter()
                        .flat_map(|p| select(arguments, p))
                        .cloned()
                        .collect(),
                ),
            };
            Some((name.clone(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn the_shipped_profiles_parse_and_name_their_tools() {
        let file: File = toml::from_str(PROFILES_TOML).unwrap();
        assert!(file.profiles.contains_key("server-filesystem"));
        assert!(file.profiles.contains_key("server-memory"));
        assert!(file.profiles.contains_key("git"));
        assert!(file.profiles.contains_key("github"));
        assert_eq!(builtin_profiles().len(), file.profiles.len());
        for (name, p) in &file.profiles {
            for (tool, t) in &p.tools {
                if let Some(template) = &t.predicted_effect {
                    plangate_core::validate_template(template)
                        .unwrap_or_else(|e| panic!("{name}.{tool}: {e}"));
                }
                if let Some(spec) = &t.preview {
                    match spec.kind {
                        PreviewKind::Diff => assert!(
                            spec.text.is_some() || spec.dry_run.is_some() || spec.read_is_diff,
                            "{name}.{tool}: a diff needs text, dry_run or read_is_diff"
                        ),
                        PreviewKind::State => {}
                    }
                }
            }
        }
    }

    #[test]
    fn a_profile_matches_by_server_identity_and_schema_never_by_name_alone() {
        let schema = json!({"type": "object", "properties": {"path": {}, "content": {}}});
        let schema = schema.as_object().unwrap();
        let none = BTreeMap::new();
        let m = profile_for(
            &none,
            Some("secure-filesystem-server"),
            "write_file",
            schema,
        )
        .unwrap();
        assert_eq!(m.name, "server-filesystem");
        assert_eq!(m.tool.target.as_deref(), Some("/path"));
        // Another server with a tool of the same name: no profile.
        assert!(profile_for(&none, Some("my-files"), "write_file", schema).is_none());
        assert!(profile_for(&none, None, "write_file", schema).is_none());
        // The same server, a tool whose schema lacks what the profile uses.
        let other = json!({"properties": {"file": {}}});
        let other = other.as_object().unwrap();
        assert!(
            profile_for(&none, Some("secure-filesystem-server"), "write_file", other).is_none()
        );
        // An operator's profile comes first, and may name another server.
        let mine: Profile = toml::from_str(
            "server_info = [\"my-files\"]\n[tools.write_file]\nschema = [\"path\"]\ntarget = \"/path\"\npredicted_effect = \"Save {path}\"\n",
        )
        .unwrap();
        assert!(check_profile(&mine).is_empty());
        let configured = BTreeMap::from([("my-files".to_owned(), mine)]);
        let m = profile_for(&configured, Some("my-files"), "write_file", schema).unwrap();
        assert_eq!(m.name, "my-files");
        assert_eq!(m.tool.predicted_effect.as_deref(), Some("Save {path}"));
    }

    #[test]
    fn pointers_walk_lists_with_a_star() {
        let args = json!({"entities": [{"name": "a"}, {"name": "b"}], "path": "/x"});
        assert_eq!(
            select(&args, "/entities/*/name"),
            [&json!("a"), &json!("b")]
        );
        assert_eq!(select(&args, "/path"), [&json!("/x")]);
        assert!(select(&args, "/nope").is_empty());
        let spec: PreviewSpec = toml::from_str(
            "kind = \"state\"\nread = \"open_nodes\"\narguments = { names = \"/entities/*/name\", at = \"/path\", both = [\"/path\", \"/entities/0/name\"], kind = \"=local\" }",
        )
        .unwrap();
        let read = read_arguments(&spec, &args);
        assert_eq!(
            Value::Object(read),
            json!({"names": ["a", "b"], "at": "/x", "both": ["/x", "a"], "kind": "local"})
        );
    }
}
