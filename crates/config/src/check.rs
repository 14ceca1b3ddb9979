//! The validating walk shared by both file formats: a [`Node`] trait over
//! `toml::Value` and `serde_json::Value`, and a [`Checker`] that records
//! every mistake with its key path and carries on.
//!
//! Each helper returns `Option`: `None` means "an error was recorded, skip
//! what depends on this value", so one bad value never hides another.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::env::{Env, expand};
use crate::error::{ConfigError, ConfigErrors};
use crate::model::Transport;

// === Node ===

/// What the walk needs from a parsed value, whatever the format.
pub(crate) trait Node: Sized {
    /// "a string", "an integer", … for messages.
    fn kind(&self) -> &'static str;
    fn as_str(&self) -> Option<&str>;
    fn as_bool(&self) -> Option<bool>;
    fn as_integer(&self) -> Option<i64>;
    fn as_array(&self) -> Option<Vec<&Self>>;
    fn as_table(&self) -> Option<Vec<(&str, &Self)>>;
}

impl Node for toml::Value {
    fn kind(&self) -> &'static str {
        match self {
            toml::Value::String(_) => "a string",
            toml::Value::Integer(_) => "an integer",
            toml::Value::Float(_) => "a float",
            toml::Value::Boolean(_) => "a boolean",
            toml::Value::Datetime(_) => "a datetime",
            toml::Value::Array(_) => "an array",
            toml::Value::Table(_) => "a table",
        }
    }
    fn as_str(&self) -> Option<&str> {
        self.as_str()
    }
    fn as_bool(&self) -> Option<bool> {
        self.as_bool()
    }
    fn as_integer(&self) -> Option<i64> {
        self.as_integer()
    }
    fn as_array(&self) -> Option<Vec<&Self>> {
        self.as_array().map(|a| a.iter().collect())
    }
    fn as_table(&self) -> Option<Vec<(&str, &Self)>> {
        self.as_table()
            .map(|t| t.iter().map(|(k, v)| (k.as_str(), v)).collect())
    }
}

impl Node for serde_json::Value {
    fn kind(&self) -> &'static str {
        match self {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::Object(_) => "an object",
        }
    }
    fn as_str(&self) -> Option<&str> {
        self.as_str()
    }
    fn as_bool(&self) -> Option<bool> {
        self.as_bool()
    }
    fn as_integer(&self) -> Option<i64> {
        self.as_i64()
    }
    fn as_array(&self) -> Option<Vec<&Self>> {
        self.as_array().map(|a| a.iter().collect())
    }
    fn as_table(&self) -> Option<Vec<(&str, &Self)>> {
        self.as_object()
            .map(|t| t.iter().map(|(k, v)| (k.as_str(), v)).collect())
    }
}

// === key paths ===

/// `parent.key`, quoting `key` when it is not a bare word, so the path can be
/// read back unambiguously (`upstreams."my.server".command`).
pub(crate) fn child(parent: &str, key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let key = if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    };
    if parent.is_empty() {
        key
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[i]`.
pub(crate) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// `a, b and c` for messages listing what is allowed.
pub(crate) fn list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

// === Checker ===

/// Collects every mistake in one file.
pub(crate) struct Checker<'a> {
    file: PathBuf,
    /// Directory relative `cwd`s resolve against.
    base_dir: PathBuf,
    env: &'a dyn Env,
    errors: Vec<ConfigError>,
    /// While an upstream is read: the unset variables it uses.
    unset: Option<Vec<String>>,
    /// Upstreams that are down for want of variables: name → why.
    pub(crate) down: BTreeMap<String, String>,
}

impl<'a> Checker<'a> {
    pub(crate) fn new(origin: &Path, env: &'a dyn Env) -> Self {
        Checker {
            file: origin.to_path_buf(),
            base_dir: origin.parent().map(Path::to_path_buf).unwrap_or_default(),
            env,
            errors: Vec::new(),
            unset: None,
            down: BTreeMap::new(),
        }
    }

    /// Reads upstream `name` with `read`. When it uses variables that are
    /// unset (no default), it is *down*, not a mistake: what `read` found
    /// wrong is dropped (it read values that are not there), the upstream
    /// is recorded in [`Checker::down`] with the variables, and the answer
    /// is `Some(None)`; the other upstreams load and serve. Otherwise
    /// `read`'s answer, `None` when it found mistakes.
    pub(crate) fn upstream_or_down<T>(
        &mut self,
        name: &str,
        read: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        let before = self.errors.len();
        self.unset = Some(Vec::new());
        let read = read(self);
        let unset = self.unset.take().unwrap_or_default();
        if unset.is_empty() {
            return read.map(Some);
        }
        self.errors.truncate(before);
        self.down.insert(
            name.to_owned(),
            format!(
                "environment variable{} {} not set in plangate's environment (set {}, then reload or restart)",
                if unset.len() == 1 { "" } else { "s" },
                unset.join(", "),
                if unset.len() == 1 { "it" } else { "them" }
            ),
        );
        Some(None)
    }

    /// Records a mistake at `key`.
    pub(crate) fn error(&mut self, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.clone(),
            key: key.to_owned(),
            message: message.into(),
        });
    }

    /// Adds where each unknown key or table is in the file (`line_of` its
    /// key): a misspelt name is found by its line, not only its path.
    pub(crate) fn with_lines(&mut self, line_of: impl Fn(&str) -> Option<usize>) {
        for e in &mut self.errors {
            if e.message.starts_with("unknown ")
                && !e.message.contains("(line ")
                && let Some(line) = line_of(&e.key)
            {
                e.message.push_str(&format!(" (line {line})"));
            }
        }
    }

    /// `Ok(value)` if nothing was recorded, else every mistake.
    pub(crate) fn finish<T>(self, value: Option<T>) -> Result<T, ConfigErrors> {
        match value {
            Some(v) if self.errors.is_empty() => Ok(v),
            _ => {
                let mut errors = self.errors;
                if errors.is_empty() {
                    // A `None` without a recorded reason would be a bug in
                    // the walk; still never return an empty error list.
                    errors.push(ConfigError {
                        file: self.file,
                        key: String::new(),
                        message: "configuration is not valid".to_owned(),
                    });
                }
                Err(ConfigErrors(errors))
            }
        }
    }

    fn wrong_type<N: Node>(&mut self, key: &str, want: &str, node: &N) {
        self.error(key, format!("must be {want}, not {}", node.kind()));
    }

    /// The entries of a table (TOML) or object (JSON).
    pub(crate) fn table<'n, N: Node>(
        &mut self,
        key: &str,
        node: &'n N,
        want: &str,
    ) -> Option<Vec<(&'n str, &'n N)>> {
        let t = node.as_table();
        if t.is_none() {
            self.wrong_type(key, want, node);
        }
        t
    }

    /// Records every key of `entries` not in `allowed`, with the allowed
    /// key it was probably meant to be.
    pub(crate) fn unknown_keys<N>(&mut self, key: &str, entries: &[(&str, &N)], allowed: &[&str]) {
        for (k, _) in entries {
            if !allowed.contains(k) {
                let hint = did_you_mean(k, allowed)
                    .map(|m| format!("did you mean {m:?}? "))
                    .unwrap_or_default();
                self.error(
                    &child(key, k),
                    format!(
                        "unknown key {k:?}: {hint}allowed keys are {}",
                        list(allowed)
                    ),
                );
            }
        }
    }

    /// A string taken as written (for enumerated values and names).
    pub(crate) fn raw_str<'n, N: Node>(&mut self, key: &str, node: &'n N) -> Option<&'n str> {
        let s = node.as_str();
        if s.is_none() {
            self.wrong_type(key, "a string", node);
        }
        s
    }

    /// A string with every `${…}` expanded.
    pub(crate) fn string<N: Node>(&mut self, key: &str, node: &N) -> Option<String> {
        let raw = self.raw_str(key, node)?;
        if let Some(unset) = self.unset.as_mut() {
            for name in crate::env::unset_variables(raw, self.env) {
                if !unset.contains(&name) {
                    unset.push(name);
                }
            }
        }
        match expand(raw, self.env) {
            Ok(s) => Some(s),
            Err(messages) => {
                for m in messages {
                    self.error(key, m);
                }
                None
            }
        }
    }

    /// A non-empty expanded string.
    pub(crate) fn non_empty_string<N: Node>(&mut self, key: &str, node: &N) -> Option<String> {
        let s = self.string(key, node)?;
        if s.trim().is_empty() {
            self.error(key, "must not be empty");
            return None;
        }
        Some(s)
    }

    pub(crate) fn bool<N: Node>(&mut self, key: &str, node: &N) -> Option<bool> {
        let b = node.as_bool();
        if b.is_none() {
            self.wrong_type(key, "true or false", node);
        }
        b
    }

    /// An integer in `range`; `what` names it in the message.
    pub(crate) fn integer_in<N: Node>(
        &mut self,
        key: &str,
        node: &N,
        what: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Option<i64> {
        let Some(n) = node.as_integer() else {
            self.wrong_type(key, "an integer", node);
            return None;
        };
        if !range.contains(&n) {
            self.error(
                key,
                format!(
                    "{what} {n} is not allowed: use an integer from {} to {}",
                    range.start(),
                    range.end()
                ),
            );
            return None;
        }
        Some(n)
    }

    /// A list of strings, each checked by `item` (given the checker, the
    /// item's key path and the item); every bad item is reported.
    pub(crate) fn list_of<N: Node, T>(
        &mut self,
        key: &str,
        node: &N,
        item: impl Fn(&mut Self, &str, &N) -> Option<T>,
    ) -> Option<Vec<T>> {
        let Some(items) = node.as_array() else {
            self.wrong_type(key, "a list of strings", node);
            return None;
        };
        let mut out = Some(Vec::with_capacity(items.len()));
        for (i, n) in items.into_iter().enumerate() {
            let t = item(self, &index(key, i), n);
            out = out.zip(t).map(|(mut v, t)| {
                v.push(t);
                v
            });
        }
        out
    }

    /// A list of expanded strings; every bad item is reported.
    pub(crate) fn string_list<N: Node>(&mut self, key: &str, node: &N) -> Option<Vec<String>> {
        self.list_of(key, node, |c, k, n| c.string(k, n))
    }

    /// A table of expanded string values, every name checked by `name_ok`
    /// (which returns what is wrong with a bad name).
    pub(crate) fn string_map<N: Node>(
        &mut self,
        key: &str,
        node: &N,
        name_ok: fn(&str) -> Result<(), String>,
    ) -> Option<BTreeMap<String, String>> {
        let entries = self.table(key, node, "a table of strings")?;
        let mut out = Some(BTreeMap::new());
        for (name, value) in entries {
            let item_key = child(key, name);
            if let Err(m) = name_ok(name) {
                self.error(&item_key, m);
                out = None;
            }
            let s = self.string(&item_key, value);
            out = out.zip(s).map(|(mut m, s)| {
                m.insert(name.to_owned(), s);
                m
            });
        }
        out
    }

    /// A working directory; relative paths resolve against the config
    /// file's directory so the file means the same from anywhere.
    pub(crate) fn cwd<N: Node>(&mut self, key: &str, node: &N) -> Option<PathBuf> {
        let s = self.non_empty_string(key, node)?;
        Some(self.resolve(s))
    }

    /// The path of a PEM file of CA certificates (`ca_file`), resolved like
    /// [`Checker::cwd`]. Only its form is checked: the gateway reads it.
    pub(crate) fn ca_file<N: Node>(&mut self, key: &str, node: &N) -> Option<PathBuf> {
        let s = self.non_empty_string(key, node)?;
        if s.contains("-----BEGIN") || s.contains(['\n', '\r', '\0']) {
            self.error(
                key,
                "ca_file must be the path of a PEM file, not the certificate itself: save the certificate to a file and give its path",
            );
            return None;
        }
        if s.contains("://") {
            self.error(
                key,
                format!("ca_file {s:?} is not a path: give the path of a PEM file on this machine"),
            );
            return None;
        }
        if s.ends_with(['/', std::path::MAIN_SEPARATOR]) {
            self.error(
                key,
                format!("ca_file {s:?} names a directory: give the path of a PEM file"),
            );
            return None;
        }
        Some(self.resolve(s))
    }

    /// A path from the config, relative to the config file's directory
    /// unless absolute, so the file means the same from anywhere.
    fn resolve(&self, s: String) -> PathBuf {
        let path = PathBuf::from(s);
        if path.is_absolute() {
            path
        } else {
            self.base_dir.join(path)
        }
    }

    /// An `http://` or `https://` URL with a host.
    pub(crate) fn url<N: Node>(&mut self, key: &str, node: &N) -> Option<String> {
        let url = self.non_empty_string(key, node)?;
        let lower = url.to_ascii_lowercase();
        let rest = lower
            .strip_prefix("http://")
            .or_else(|| lower.strip_prefix("https://"));
        let Some(rest) = rest else {
            self.error(
                key,
                format!("url {url:?} is not supported: use an http:// or https:// Streamable HTTP endpoint"),
            );
            return None;
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        if host.is_empty() || url.chars().any(char::is_whitespace) {
            self.error(
                key,
                format!("url {url:?} is not valid: it needs a host and no spaces"),
            );
            return None;
        }
        Some(url)
    }
}

// === upstream transport, shared by both formats ===

/// The keys of a server entry that every format names alike: how its
/// process starts or where it listens.
pub(crate) const TRANSPORT_KEYS: [&str; 6] = ["command", "args", "env", "cwd", "url", "headers"];

/// [`TRANSPORT_KEYS`] followed by a format's own keys `own`; `M` is the
/// sum of the lengths (checked when the constant is built).
pub(crate) const fn transport_keys_and<const N: usize, const M: usize>(
    own: [&'static str; N],
) -> [&'static str; M] {
    assert!(M == N + TRANSPORT_KEYS.len());
    let mut all = [""; M];
    let mut i = 0;
    while i < TRANSPORT_KEYS.len() {
        all[i] = TRANSPORT_KEYS[i];
        i += 1;
    }
    let mut j = 0;
    while j < N {
        all[i + j] = own[j];
        j += 1;
    }
    all
}

/// The transport-related values of one upstream entry ([`TransportFields::of`]);
/// each format decides for itself which transport the entry asks for.
pub(crate) struct TransportFields<'n, N> {
    pub(crate) command: Option<&'n N>,
    pub(crate) args: Option<&'n N>,
    pub(crate) env: Option<&'n N>,
    pub(crate) cwd: Option<&'n N>,
    pub(crate) url: Option<&'n N>,
    pub(crate) headers: Option<&'n N>,
    pub(crate) ca_file: Option<&'n N>,
}

impl<'n, N> TransportFields<'n, N> {
    /// The fields of an entry's `(name, value)` pairs, named alike in
    /// both formats, so each reads them here.
    pub(crate) fn of(entries: &[(&str, &'n N)]) -> Self {
        let get = |k: &str| entries.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        TransportFields {
            command: get("command"),
            args: get("args"),
            env: get("env"),
            cwd: get("cwd"),
            url: get("url"),
            headers: get("headers"),
            ca_file: get("ca_file"),
        }
    }
}

/// Which transport an entry asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Stdio,
    Http,
}

/// Builds the transport of the upstream at `key`. `strict` (plangate.toml)
/// makes fields of the other transport errors; the JSON formats of other
/// tools get them ignored, as those tools do.
pub(crate) fn transport<N: Node>(
    c: &mut Checker<'_>,
    key: &str,
    kind: Kind,
    f: &TransportFields<'_, N>,
    strict: bool,
) -> Option<Transport> {
    if strict {
        let (others, names): (&[Option<&N>], &[&str]) = match kind {
            Kind::Stdio => (&[f.headers, f.ca_file], &["headers", "ca_file"]),
            Kind::Http => (&[f.args, f.env, f.cwd], &["args", "env", "cwd"]),
        };
        let mut ok = true;
        for (field, name) in others.iter().zip(names) {
            if field.is_some() {
                let msg = match kind {
                    Kind::Stdio => {
                        format!("{name} only applies to url upstreams; this one has a command")
                    }
                    Kind::Http => format!(
                        "{name} only applies to command (stdio) upstreams; this one has a url"
                    ),
                };
                c.error(&child(key, name), msg);
                ok = false;
            }
        }
        if !ok {
            return None;
        }
    }
    match kind {
        Kind::Stdio => {
            let command = match f.command {
                Some(n) => c.non_empty_string(&child(key, "command"), n),
                None => {
                    c.error(key, "a stdio upstream needs a command");
                    None
                }
            };
            let args = f
                .args
                .map_or(Some(Vec::new()), |n| c.string_list(&child(key, "args"), n));
            let env = f.env.map_or(Some(BTreeMap::new()), |n| {
                c.string_map(&child(key, "env"), n, env_name_ok)
            });
            let cwd = match f.cwd {
                Some(n) => c.cwd(&child(key, "cwd"), n).map(Some),
                None => Some(None),
            };
            Some(Transport::Stdio {
                command: command?,
                args: args?,
                env: env?,
                cwd: cwd?,
            })
        }
        Kind::Http => {
            let url = match f.url {
                Some(n) => c.url(&child(key, "url"), n),
                None => {
                    c.error(key, "an http upstream needs a url");
                    None
                }
            };
            let headers = f.headers.map_or(Some(BTreeMap::new()), |n| {
                c.string_map(&child(key, "headers"), n, header_name_ok)
            });
            let headers = headers.and_then(|h| {
                for (name, value) in &h {
                    if value.contains(['\r', '\n', '\0']) {
                        c.error(
                            &child(&child(key, "headers"), name),
                            "header value must not contain line breaks or NUL",
                        );
                        return None;
                    }
                }
                Some(h)
            });
            let ca_file = match f.ca_file {
                Some(n) => c.ca_file(&child(key, "ca_file"), n).map(Some),
                None => Some(None),
            };
            Some(Transport::Http {
                url: url?,
                headers: headers?,
                ca_file: ca_file?,
            })
        }
    }
}

fn env_name_ok(name: &str) -> Result<(), String> {
    if name.is_empty() || name.contains(['=', '\0']) {
        Err(format!(
            "environment variable name {name:?} is not valid: it must be non-empty without '=' or NUL"
        ))
    } else {
        Ok(())
    }
}

fn header_name_ok(name: &str) -> Result<(), String> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !name.is_empty() && name.chars().all(tchar) {
        Ok(())
    } else {
        Err(format!(
            "header name {name:?} is not valid: use letters, digits and !#$%&'*+-.^_`|~"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_paths_quote_keys_that_are_not_bare_words() {
        assert_eq!(child("", "upstreams"), "upstreams");
        assert_eq!(child("upstreams", "site"), "upstreams.site");
        assert_eq!(child("upstreams", "my.server"), "upstreams.\"my.server\"");
        assert_eq!(index("upstreams.site.args", 2), "upstreams.site.args[2]");
        assert_eq!(list(&["a", "b", "c"]), "a, b and c");
    }
}

/// The word of `known` that `word` most likely misspells: the same but for
/// case, or at most two edits away (one for short words) — insertions,
/// deletions, substitutions, or two letters swapped.
pub(crate) fn did_you_mean<'k>(word: &str, known: &[&'k str]) -> Option<&'k str> {
    let lower = word.to_ascii_lowercase();
    let limit = if word.chars().count() <= 4 { 1 } else { 2 };
    known
        .iter()
        .map(|k| (k, edit_distance(&lower, &k.to_ascii_lowercase())))
        .filter(|(_, d)| *d <= limit)
        .min_by_key(|(_, d)| *d)
        .map(|(k, _)| *k)
}

/// Optimal string alignment distance: Levenshtein plus adjacent swaps.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod spelling_tests {
    use super::did_you_mean;

    #[test]
    fn a_misspelt_key_is_matched_to_the_one_meant() {
        let known = ["command", "args", "env", "cwd", "url", "headers"];
        assert_eq!(did_you_mean("comand", &known), Some("command"));
        assert_eq!(did_you_mean("Command", &known), Some("command"));
        assert_eq!(did_you_mean("agrs", &known), Some("args"));
        assert_eq!(did_you_mean("header", &known), Some("headers"));
        assert_eq!(did_you_mean("autoApprove", &known), None);
        assert_eq!(did_you_mean("timeout", &known), None);
        assert_eq!(did_you_mean("type", &known), None);
    }
}
