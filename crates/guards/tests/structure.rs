//! The guards that keep plangate's code in shape (docs/architecture.md,
//! "Guards"). Each reads the workspace's sources as text and fails with the
//! places to fix:
//!
//! * no source file over [`MAX_FILE_LINES`] lines before its test module;
//! * no import cycle between the modules of one parent, at any depth of a
//!   crate (a module may use its parent's items; siblings depend one way);
//! * no block of [`DUPLICATE_LINES`] lines standing in two files;
//! * every `crate::path` that docs/architecture.md names exists.
//!
//! Function length is clippy's `too_many_lines` (threshold in clippy.toml),
//! turned on for the workspace in Cargo.toml.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest a source file may be before its tests.
const MAX_FILE_LINES: usize = 700;
/// The shortest repeated block that fails the duplicate guard.
const DUPLICATE_LINES: usize = 12;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists")
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The crates' folders (`crates/*` with a Cargo.toml).
fn crates() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(workspace().join("crates"))
        .expect("crates/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    out.sort();
    out
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

// ---------------------------------------------------------------- size

/// Each line of a source file, and whether it belongs to its test module:
/// a `#[cfg(test)]` at the start of a line followed by `mod name {` up to
/// the `}` that closes it at the start of a line (`#[cfg(test)] mod name;`
/// is one line of code).
fn test_lines(text: &str) -> Vec<(&str, bool)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "#[cfg(test)]" {
            let mut j = i + 1;
            while j < lines.len() && lines[j].starts_with("#[") {
                j += 1;
            }
            if let Some(head) = lines.get(j)
                && (head.starts_with("mod ") || head.starts_with("pub(crate) mod "))
                && head.trim_end().ends_with('{')
            {
                let mut k = j + 1;
                while k < lines.len() && lines[k] != "}" {
                    k += 1;
                }
                let end = (k + 1).min(lines.len());
                out.extend(lines[i..end].iter().map(|l| (*l, true)));
                i = end;
                continue;
            }
        }
        out.push((lines[i], false));
        i += 1;
    }
    out
}

/// The lines of a source file that are not its test module.
fn lines_before_tests(text: &str) -> usize {
    test_lines(text).iter().filter(|(_, test)| !test).count()
}

/// A source file without its test module (tests may use anything; the
/// import guard judges what ships).
fn without_tests(text: &str) -> String {
    test_lines(text)
        .into_iter()
        .map(|(line, test)| if test { "" } else { line })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Files over the limit, as `path: N lines`.
fn oversized(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter_map(|(name, text)| {
            let n = lines_before_tests(text);
            (n > MAX_FILE_LINES).then(|| format!("{name}: {n} lines before its tests"))
        })
        .collect()
}

/// Each crate's product sources (`src/`), named and read.
fn product_sources() -> Vec<(String, String)> {
    crates()
        .iter()
        .flat_map(|c| rust_files(&c.join("src")))
        .map(|p| (shown(&p), read(&p)))
        .collect()
}

#[test]
fn no_source_file_is_longer_than_700_lines_before_its_tests() {
    let over = oversized(&product_sources());
    assert!(
        over.is_empty(),
        "split these by responsibility (at most {MAX_FILE_LINES} lines before the tests):\n  {}",
        over.join("\n  ")
    );
}

#[test]
fn the_size_guard_counts_code_and_not_the_test_module() {
    let code = "fn a() {}\n".repeat(MAX_FILE_LINES);
    let tests = "#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {}\n}\n";
    assert_eq!(
        lines_before_tests(&format!("{code}{tests}")),
        MAX_FILE_LINES
    );
    let with_tests = vec![("ok.rs".to_owned(), format!("{code}{tests}"))];
    assert!(oversized(&with_tests).is_empty());
    let one_more = vec![("big.rs".to_owned(), format!("{code}fn b() {{}}\n{tests}"))];
    assert_eq!(
        oversized(&one_more),
        vec![format!(
            "big.rs: {} lines before its tests",
            MAX_FILE_LINES + 1
        )]
    );
}

// ---------------------------------------------------------------- text

/// Source with comments and string and char literals blanked to spaces
/// (line breaks kept), so paths are read from code only.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let mut k = j + 1;
            while k < chars.len() && !chars[k..].starts_with(&close) {
                k += 1;
            }
            let end = (k + close.len()).min(chars.len());
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            // an escaped char literal: '\n', '\'', '\u{..}'
            let mut k = i + 2;
            k += 1;
            while k < chars.len() && chars[k] != '\'' {
                k += 1;
            }
            out.extend(std::iter::repeat_n(' ', k + 1 - i));
            i = k + 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

// ---------------------------------------------------------------- imports

/// A crate's module tree: each module's path from the root, and the file
/// that holds it.
struct Tree {
    files: BTreeMap<Vec<String>, PathBuf>,
}

impl Tree {
    fn of(src: &Path) -> Tree {
        let mut files = BTreeMap::new();
        for path in rust_files(src) {
            let rel = path.strip_prefix(src).expect("below src");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().expect("a file name");
            if parts.first().is_some_and(|p| p == "bin") {
                continue;
            }
            match last.as_str() {
                "lib.rs" | "main.rs" if parts.is_empty() => {}
                "mod.rs" => {}
                name => parts.push(name.trim_end_matches(".rs").to_owned()),
            }
            files.insert(parts, path);
        }
        Tree { files }
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.files.contains_key(path)
    }
}

/// The paths a `use` tree names, each as its segments (`a::{b, c::d}` →
/// `a::b`, `a::c::d`; `self` in a group names the group's path).
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn walk(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let s = s.trim();
        if s.is_empty() {
            return;
        }
        if let Some(open) = s.find('{') {
            let head: Vec<String> = split_path(&s[..open]);
            let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
            let base: Vec<String> = prefix.iter().cloned().chain(head).collect();
            let mut depth = 0;
            let mut start = 0;
            for (i, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        walk(&inner[start..i], &base, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            walk(&inner[start..], &base, out);
        } else {
            let path = s.split(" as ").next().unwrap_or(s);
            let mut segs: Vec<String> = prefix.to_vec();
            for seg in split_path(path) {
                if seg != "self" && seg != "*" {
                    segs.push(seg);
                }
            }
            out.push(segs);
        }
    }
    let mut out = Vec::new();
    walk(tree, &[], &mut out);
    out
}

fn split_path(s: &str) -> Vec<String> {
    s.split("::")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// A module path, one segment each.
type ModPath = Vec<String>;

/// The paths a file names, and the names its `use`s bring into scope.
type Named = (Vec<ModPath>, Vec<(String, ModPath)>);

/// The paths a file names: its `use` declarations, expanded, and every
/// `crate::`, `super::` or `self::` path in its code.
fn named_paths(code: &str) -> Named {
    let mut paths = Vec::new();
    let mut uses = Vec::new();
    let bytes = code.as_bytes();
    let word_at = |i: usize, w: &str| {
        code[i..].starts_with(w)
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'))
            && code[i + w.len()..]
                .chars()
                .next()
                .is_some_and(|c| !(c.is_alphanumeric() || c == '_'))
    };
    let mut i = 0;
    while i < code.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        if word_at(i, "use") {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            for path in expand_use(&code[i + 3..end]) {
                let alias = code[i + 3..end]
                    .rsplit(" as ")
                    .next()
                    .filter(|_| code[i + 3..end].contains(" as ") && !code[i..end].contains('{'))
                    .map(|a| a.trim().to_owned());
                let name = alias.or_else(|| path.last().cloned()).unwrap_or_default();
                uses.push((name, path.clone()));
                paths.push(path);
            }
            i = end;
            continue;
        }
        for root in ["crate", "super", "self"] {
            if word_at(i, root) && code[i + root.len()..].starts_with("::") {
                let rest = &code[i..];
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                paths.push(split_path(&rest[..end]));
                i += end;
                break;
            }
        }
        i += 1;
    }
    (paths, uses)
}

/// One crate's modules, the names each brings into scope, and the edges
/// between siblings with a place that shows each.
struct Imports {
    tree: Tree,
    /// module → (name in scope → absolute path)
    scope: HashMap<Vec<String>, HashMap<String, Vec<String>>>,
    /// module → absolute paths it names
    named: BTreeMap<Vec<String>, Vec<Vec<String>>>,
}

impl Imports {
    fn of(src: &Path) -> Imports {
        let tree = Tree::of(src);
        let mut scope = HashMap::new();
        let mut named = BTreeMap::new();
        for (module, file) in &tree.files {
            let (paths, uses) = named_paths(&code_only(&without_tests(&read(file))));
            let absolute = |p: &[String]| {
                absolute(module, p).or_else(|| {
                    // Uniform paths: `use child::Item` names a child module.
                    let mut child = module.clone();
                    child.push(p.first()?.clone());
                    tree.is_module(&child).then(|| {
                        child.extend(p[1..].iter().cloned());
                        child
                    })
                })
            };
            let mut names = HashMap::new();
            for (name, path) in uses {
                if let Some(abs) = absolute(&path) {
                    names.insert(name, abs);
                }
            }
            named.insert(
                module.clone(),
                paths.iter().filter_map(|p| absolute(p)).collect(),
            );
            scope.insert(module.clone(), names);
        }
        Imports { tree, scope, named }
    }

    /// The module a path lands in: its longest prefix that is a module,
    /// following `use` re-exports of the item it names a few times.
    fn target(&self, path: &[String]) -> Vec<String> {
        let mut path = path.to_vec();
        for _ in 0..4 {
            let mut cut = path.len();
            while cut > 0 && !self.tree.is_module(&path[..cut]) {
                cut -= 1;
            }
            let module = path[..cut].to_vec();
            let Some(item) = path.get(cut) else {
                return module;
            };
            match self.scope.get(&module).and_then(|s| s.get(item)) {
                Some(next) if next != &path => {
                    let mut p = next.clone();
                    p.extend(path[cut + 1..].iter().cloned());
                    path = p;
                }
                _ => return module,
            }
        }
        path
    }

    /// Edges between siblings: (parent, from child, to child) → an example
    /// path that makes it.
    fn edges(&self) -> BTreeMap<(Vec<String>, String, String), String> {
        let mut edges = BTreeMap::new();
        for (module, paths) in &self.named {
            for path in paths {
                let target = self.target(path);
                let common = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                if let (Some(from), Some(to)) = (module.get(common), target.get(common)) {
                    edges
                        .entry((module[..common].to_vec(), from.clone(), to.clone()))
                        .or_insert_with(|| {
                            format!("{} names {}", module_name(module), path.join("::"))
                        });
                }
            }
        }
        edges
    }
}

fn module_name(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        format!("crate::{}", module.join("::"))
    }
}

/// A path named in `module`, from the crate root; `None` for an outside
/// crate's path.
fn absolute(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Groups of siblings that import each other in a cycle (strongly
/// connected, more than one module), each with the edges that close it.
fn cycles(edges: &BTreeMap<(Vec<String>, String, String), String>) -> Vec<String> {
    let mut by_parent: BTreeMap<&Vec<String>, BTreeMap<&String, BTreeSet<&String>>> =
        BTreeMap::new();
    for (parent, from, to) in edges.keys() {
        by_parent
            .entry(parent)
            .or_default()
            .entry(from)
            .or_default()
            .insert(to);
    }
    let mut found = Vec::new();
    for (parent, graph) in by_parent {
        for group in strongly_connected(&graph) {
            let members: BTreeSet<&String> = group.iter().copied().collect();
            let how: Vec<String> = edges
                .iter()
                .filter(|((p, f, t), _)| p == parent && members.contains(f) && members.contains(t))
                .map(|((_, f, t), why)| format!("{f} → {t} ({why})"))
                .collect();
            found.push(format!(
                "in {}: {} import each other:\n      {}",
                module_name(parent),
                group
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                how.join("\n      ")
            ));
        }
    }
    found
}

/// Tarjan's strongly connected components of size two or more.
fn strongly_connected<'a>(
    graph: &BTreeMap<&'a String, BTreeSet<&'a String>>,
) -> Vec<Vec<&'a String>> {
    struct State<'a> {
        index: HashMap<&'a String, usize>,
        low: HashMap<&'a String, usize>,
        stack: Vec<&'a String>,
        on_stack: BTreeSet<&'a String>,
        next: usize,
        out: Vec<Vec<&'a String>>,
    }
    fn visit<'a>(
        v: &'a String,
        graph: &BTreeMap<&'a String, BTreeSet<&'a String>>,
        s: &mut State<'a>,
    ) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(w, graph, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.push(w);
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                s.out.push(group);
            }
        }
    }
    let mut s = State {
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for &v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(v, graph, &mut s);
        }
    }
    s.out
}

#[test]
fn no_crate_has_an_import_cycle_between_sibling_modules() {
    let mut found = Vec::new();
    for krate in crates() {
        for cycle in cycles(&Imports::of(&krate.join("src")).edges()) {
            found.push(format!("{}: {cycle}", shown(&krate)));
        }
    }
    assert!(
        found.is_empty(),
        "modules that depend on each other (make one side depend on the other, or move what both need below them):\n  {}",
        found.join("\n  ")
    );
}

/// The engine's verbs — planning, previews, rules' paths, apply, amend,
/// revert, retry — in the gateway crate: they take `Ops` (the engine and
/// its edges), never the gateway object (docs/architecture.md, "The
/// engine and its edges").
const ENGINE_VERBS: [&str; 5] = ["apply", "plan", "operator", "preview.rs", "policy.rs"];

/// Whether `code` (comments and literals blanked) names `Gateway` as a
/// whole word.
fn names_the_gateway(code: &str) -> bool {
    code.match_indices("Gateway").any(|(at, _)| {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let before = code[..at].chars().next_back().is_some_and(word);
        let after = code[at + "Gateway".len()..]
            .chars()
            .next()
            .is_some_and(word);
        !before && !after
    })
}

#[test]
fn the_engine_verbs_never_take_the_gateway() {
    let src = workspace().join("crates/gateway/src");
    let mut found = Vec::new();
    for part in ENGINE_VERBS {
        let path = src.join(part);
        let files = if path.is_dir() {
            rust_files(&path)
        } else {
            vec![path]
        };
        for file in files {
            if names_the_gateway(&code_only(&without_tests(&read(&file)))) {
                found.push(shown(&file));
            }
        }
    }
    assert!(
        found.is_empty(),
        "engine verbs that reach for the gateway object (take `Ops` and add what they need to `Edges`):\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_engine_guard_sees_the_gateway_named_in_code_only() {
    assert!(names_the_gateway("fn f(gw: &Gateway) {}"));
    assert!(names_the_gateway("use crate::{Catalog, Gateway};"));
    assert!(!names_the_gateway(
        "fn f(gw: Ops<'_>, g: GatewayHandler) {}"
    ));
    assert!(!names_the_gateway(&code_only(
        "// the Gateway derefs\nfn f() {}"
    )));
}

#[test]
fn the_cycle_guard_sees_a_loop_through_a_re_export_and_not_a_child_using_its_parent() {
    let dir = tempdir("cycles");
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use b::Thing;\n");
    write(
        "a/mod.rs",
        "mod inner;\nuse crate::Thing; // b\nstruct A;\n",
    );
    write("a/inner.rs", "use super::A;\n");
    write(
        "b.rs",
        "pub struct Thing;\nfn f() { crate::c::g(); let _ = \"crate::a::A\"; }\n",
    );
    write("c.rs", "pub fn g() { super::a::h(); }\n");
    let found = cycles(&Imports::of(&dir).edges());
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("in crate: a, b, c import each other"),
        "{found:?}"
    );
    write("c.rs", "pub fn g() {}\n");
    assert!(cycles(&Imports::of(&dir).edges()).is_empty());
    fs::remove_dir_all(dir).expect("clean up");
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plangate-guards-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

// ---------------------------------------------------------------- duplicates

/// A file's lines that carry meaning, with their line numbers: white space
/// folded, blank lines, comments, `use` lines and lone punctuation left out.
fn meaningful_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let folded = line.split_whitespace().collect::<Vec<_>>().join(" ");
            let thin = folded.is_empty()
                || folded.starts_with("//")
                || folded.starts_with("use ")
                || folded.starts_with("pub use ")
                || folded.chars().all(|c| "{}()[];,".contains(c));
            (!thin).then_some((n + 1, folded))
        })
        .collect()
}

/// Blocks of [`DUPLICATE_LINES`] meaningful lines that stand in two files,
/// one line per pair of files with where each run starts.
fn duplicates(files: &[(String, String)]) -> Vec<String> {
    let mut seen: HashMap<Vec<&str>, (usize, usize)> = HashMap::new();
    let mut pairs: BTreeMap<(usize, usize), (usize, usize)> = BTreeMap::new();
    let lines: Vec<Vec<(usize, String)>> = files.iter().map(|(_, t)| meaningful_lines(t)).collect();
    for (f, file_lines) in lines.iter().enumerate() {
        for window in file_lines.windows(DUPLICATE_LINES) {
            let key: Vec<&str> = window.iter().map(|(_, l)| l.as_str()).collect();
            match seen.get(&key) {
                Some(&(g, at)) if g != f => {
                    pairs.entry((g, f)).or_insert((at, window[0].0));
                }
                Some(_) => {}
                None => {
                    seen.insert(key, (f, window[0].0));
                }
            }
        }
    }
    pairs
        .into_iter()
        .map(|((g, f), (a, b))| format!("{}:{a} ~ {}:{b}", files[g].0, files[f].0))
        .collect()
}

#[test]
fn no_block_of_12_lines_stands_in_two_files() {
    let files: Vec<(String, String)> = crates()
        .iter()
        .flat_map(|c| rust_files(c))
        .filter(|p| !p.components().any(|c| c.as_os_str() == "target"))
        .map(|p| (shown(&p), read(&p)))
        .collect();
    let found = duplicates(&files);
    assert!(
        found.is_empty(),
        "the same {DUPLICATE_LINES} lines stand in two files; let one piece of code serve both:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_duplicate_guard_finds_a_copied_block_whatever_its_indentation() {
    let block: String = (0..DUPLICATE_LINES)
        .map(|i| format!("let x{i} = f({i});\n"))
        .collect();
    let indented: String = block
        .lines()
        .map(|l| format!("        {l}\n// note\n"))
        .collect();
    let files = vec![
        ("a.rs".to_owned(), format!("fn a() {{\n{block}}}\n")),
        (
            "b.rs".to_owned(),
            format!("use x;\nfn b() {{\n{indented}}}\n"),
        ),
    ];
    assert_eq!(duplicates(&files), vec!["a.rs:2 ~ b.rs:3".to_owned()]);
    let shorter: String = block.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let files = vec![
        ("a.rs".to_owned(), block.clone()),
        ("b.rs".to_owned(), shorter),
    ];
    assert!(duplicates(&files).is_empty());
}

// ---------------------------------------------------------------- names

/// The `crate::module::item` names docs/architecture.md gives in
/// backticks (`gateway::plan::plan_write`, `core::rules::room_for`).
fn named_in(doc: &str) -> Vec<String> {
    let crates: Vec<String> = crates()
        .iter()
        .map(|c| {
            c.file_name()
                .expect("a name")
                .to_string_lossy()
                .replace('-', "_")
        })
        .collect();
    doc.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.trim_end_matches("()"))
        .filter(|s| {
            s.split_once("::").is_some_and(|(head, rest)| {
                crates.iter().any(|c| c == head)
                    && !rest.is_empty()
                    && rest
                        .chars()
                        .all(|c| c.is_alphanumeric() || c == '_' || c == ':')
            })
        })
        .map(str::to_owned)
        .collect()
}

/// Whether `name` (`crate::module::…::item[::method]`) is a module, or an
/// item defined in the module's files.
fn exists(name: &str) -> bool {
    let mut segs = name.split("::");
    let krate = segs.next().expect("a crate").replace('_', "-");
    let mut dir = workspace().join("crates").join(krate).join("src");
    // An item at the crate root may be re-exported from anywhere in it.
    let mut files = rust_files(&dir);
    let rest: Vec<&str> = segs.collect();
    let mut i = 0;
    while i < rest.len() {
        let file = dir.join(format!("{}.rs", rest[i]));
        let sub = dir.join(rest[i]);
        if !(file.is_file() || sub.join("mod.rs").is_file()) {
            break;
        }
        files = if sub.is_dir() {
            rust_files(&sub)
        } else {
            Vec::new()
        };
        if file.is_file() {
            files.push(file);
        }
        dir = sub;
        i += 1;
    }
    let code: Vec<String> = files.iter().map(|f| code_only(&read(f))).collect();
    let defined = |item: &str| {
        code.iter().any(|code| {
            KINDS.iter().any(|kw| {
                code.match_indices(&format!("{kw} {item}")).any(|(at, m)| {
                    code[at + m.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| !(c.is_alphanumeric() || c == '_'))
                })
            })
        })
    };
    rest[i..].iter().all(|item| defined(item))
}

/// The keywords that define a named item.
const KINDS: [&str; 9] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union",
];

#[test]
fn every_name_the_architecture_gives_exists() {
    let doc = read(&workspace().join("docs/architecture.md"));
    let names = named_in(&doc);
    assert!(
        names.len() >= 10,
        "the architecture names the code it walks through: {names:?}"
    );
    let missing: Vec<&String> = names.iter().filter(|n| !exists(n)).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what the code does not have (rename it there, or in the code):\n  {}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}
