//! Paths as rules see them: placed where the server will act on them
//! before any comparison, so a rule about `/srv/root/scratch/**` cannot be
//! walked around with `/srv/root/scratch/../secrets`, `//`, `.`, a
//! relative path, `~`, a symlink or another Unicode spelling of a name.
//!
//! Placing a path ([`PathResolver::resolve`]) has three parts:
//!
//! 1. **Where it starts** ([`place`], pure): an absolute path is
//!    normalised lexically — `.` dropped, `..` taking the previous
//!    component away, repeated `/` collapsed, a trailing `/` dropped, as
//!    Node's `path.resolve` and server-filesystem do. `~` and `~/…` expand
//!    to the upstream process's home, and a relative path resolves against
//!    the directories the server says it serves — each only when the
//!    server's profile says it does so ([`Placement`]). Otherwise the path
//!    **cannot be placed**: plangate does not know which file it names.
//! 2. **Where it leads** (the gateway's resolver, for an upstream that is
//!    a process on this machine): symlinks are followed component by
//!    component, through Unicode-equivalent directory entries as
//!    server-filesystem does; two entries that are both equivalent to a
//!    component make the path ambiguous, and it cannot be placed.
//! 3. **How it compares**: in Unicode NFC, the path and the pattern alike.
//!
//! A path that cannot be placed is an evaluation error in the condition
//! that asked for it ([`Unplaced`]): a `refuse` rule that depends on it
//! refuses, and any other rule does not match. Fail closed both ways.
//!
//! Matching is case-sensitive, as on Linux file systems: on a
//! case-insensitive file system, write the pattern in the case the paths
//! come in, or use a rule that does not depend on case.

use unicode_normalization::UnicodeNormalization;

/// Why a path cannot be placed: what a rule decides then is in the module
/// doc. Each says what the path was and what would place it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaced {
    /// An empty string, or one holding a NUL byte: it names no file.
    NotAPath,
    /// A relative path, and it is not known what the server resolves it
    /// against.
    Relative(String),
    /// A `~` path, and the upstream process's home is not known.
    Home(String),
    /// A relative path needs the server's directories, which have not been
    /// listed yet: the caller lists them ([`Placement::bases`]) and asks
    /// again. Never the last word on a path.
    NeedsBases(String),
    /// Two directory entries are both Unicode-equivalent to one of the
    /// path's components: which the server would take cannot be told.
    Ambiguous {
        /// The path.
        path: String,
        /// The component.
        component: String,
    },
    /// Following the path on this machine failed (a loop of links, a
    /// directory that cannot be read).
    Unreadable {
        /// The path.
        path: String,
        /// What failed.
        error: String,
    },
}

impl std::fmt::Display for Unplaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unplaced::NotAPath => write!(f, "an empty path, or one with a NUL byte, names no file"),
            Unplaced::Relative(p) | Unplaced::NeedsBases(p) => write!(
                f,
                "the relative path {p:?} cannot be placed: how this server resolves relative paths is not known; send an absolute path"
            ),
            Unplaced::Home(p) => write!(
                f,
                "the path {p:?} cannot be placed: the home directory of this server's process is not known; send an absolute path"
            ),
            Unplaced::Ambiguous { path, component } => write!(
                f,
                "the path {path:?} cannot be placed: more than one directory entry is a Unicode spelling of {component:?}"
            ),
            Unplaced::Unreadable { path, error } => {
                write!(f, "the path {path:?} cannot be placed: {error}")
            }
        }
    }
}

impl std::error::Error for Unplaced {}

/// How a server places the paths it is sent, as far as plangate knows:
/// from the server's profile, the upstream's configuration, and what the
/// server lists. Everything unknown is `None`, and a path that needs it
/// cannot be placed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Placement {
    /// The home directory `~` expands to, when the server expands `~`
    /// (the upstream process's `HOME`).
    pub home: Option<String>,
    /// The directories relative paths resolve against, in the server's
    /// order (server-filesystem: its allowed directories), once listed.
    pub bases: Option<Vec<String>>,
    /// Whether the server resolves relative paths against [`bases`]
    /// (its profile says so): a relative path is then
    /// [`Unplaced::NeedsBases`] until they are listed.
    ///
    /// [`bases`]: Placement::bases
    pub relative_to_bases: bool,
}

/// Turns a path an agent sent into the path the server will act on, for a
/// rule to match. Implementations may look at the file system (symlinks);
/// this crate never does itself.
pub trait PathResolver: Send + Sync {
    /// `raw` placed: absolute, normalised, symlinks followed as far as this
    /// resolver can, in NFC.
    fn resolve(&self, raw: &str) -> Result<String, Unplaced>;
}

/// A resolver that follows no symlinks: for upstreams whose paths are not
/// files on this machine (a remote server, a container). Paths are placed
/// ([`place`]) and compared lexically.
#[derive(Debug, Clone, Default)]
pub struct Lexical(pub Placement);

impl PathResolver for Lexical {
    fn resolve(&self, raw: &str) -> Result<String, Unplaced> {
        place(raw, &self.0).map(|p| nfc(&p))
    }
}

/// `raw` in Unicode Normalization Form C: how paths and patterns compare.
pub fn nfc(raw: &str) -> String {
    if raw.is_ascii() {
        return raw.to_owned();
    }
    raw.nfc().collect()
}

/// Where `raw` starts, as the server would take it, normalised lexically
/// (see the module doc): absolute as it is, `~` against
/// [`Placement::home`], relative against [`Placement::bases`] — each only
/// when known.
pub fn place(raw: &str, placement: &Placement) -> Result<String, Unplaced> {
    if raw.is_empty() || raw.contains('\0') {
        return Err(Unplaced::NotAPath);
    }
    if raw.starts_with('/') {
        return Ok(normalize(raw));
    }
    // server-filesystem expands `~` and `~/…` only; `~user` is relative.
    if raw == "~" || raw.starts_with("~/") {
        return match &placement.home {
            Some(home) if home.starts_with('/') => Ok(normalize(&format!("{home}/{}", &raw[1..]))),
            _ => Err(Unplaced::Home(raw.to_owned())),
        };
    }
    if !placement.relative_to_bases {
        return Err(Unplaced::Relative(raw.to_owned()));
    }
    let Some(bases) = placement.bases.as_deref() else {
        return Err(Unplaced::NeedsBases(raw.to_owned()));
    };
    let bases: Vec<String> = bases
        .iter()
        .filter(|b| b.starts_with('/'))
        .map(|b| normalize(b))
        .collect();
    let Some(first) = bases.first() else {
        return Err(Unplaced::Relative(raw.to_owned()));
    };
    // As server-filesystem resolves it: against the first of its
    // directories that keeps the path inside one of them, else the first.
    let within = |p: &str| {
        bases
            .iter()
            .any(|b| p == b || b == "/" || p.starts_with(&format!("{b}/")))
    };
    Ok(bases
        .iter()
        .map(|b| normalize(&format!("{b}/{raw}")))
        .find(|candidate| within(candidate))
        .unwrap_or_else(|| normalize(&format!("{first}/{raw}"))))
}

/// `path` normalised lexically: `.` and empty components dropped, `..`
/// removing the component before it (never above the root of an absolute
/// path; kept at the front of a relative one), no trailing `/` (the root
/// stays `/`).
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if absolute => {}
                _ => parts.push(".."),
            },
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Whether `path` matches the glob `pattern`, both normalised and in NFC
/// first: `*` matches any characters but `/`, `?` one character but `/`,
/// and a whole component `**` any number of components (none included).
/// Everything else matches itself. `/srv/scratch/**` matches
/// `/srv/scratch` and everything under it. A relative path matches only a
/// relative pattern (rules see placed, absolute paths).
pub fn glob(path: &str, pattern: &str) -> bool {
    glob_placed(&nfc(&normalize(path)), pattern)
}

/// [`glob`] for a `path` already placed (normalised, resolved, NFC): only
/// the pattern is normalised here.
pub(crate) fn glob_placed(path: &str, pattern: &str) -> bool {
    let pattern = nfc(&normalize(pattern));
    if path.starts_with('/') != pattern.starts_with('/') {
        return false;
    }
    components(&split(path), &split(&pattern))
}

fn split(s: &str) -> Vec<&str> {
    s.split('/').filter(|c| !c.is_empty()).collect()
}

/// Matches path components against pattern components (`**` spans any
/// number of them).
fn components(path: &[&str], pattern: &[&str]) -> bool {
    wildcard(path, pattern, |g| *g == "**", |t, g| component(t, g))
}

/// Matches one component against one pattern component (`*`, `?`, and
/// literal characters).
fn component(text: &str, pattern: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return text == pattern;
    }
    if text.is_ascii() && pattern.is_ascii() {
        return wildcard(
            text.as_bytes(),
            pattern.as_bytes(),
            |g| *g == b'*',
            |t, g| *g == b'?' || g == t,
        );
    }
    let t: Vec<char> = text.chars().collect();
    let g: Vec<char> = pattern.chars().collect();
    wildcard(&t, &g, |g| *g == '*', |t, g| *g == '?' || g == t)
}

/// Whether `text` matches `pattern`, where a pattern item that `is_star`
/// matches any run of items (none included) and any other must `matches`
/// one item. Iterative, with one backtrack point (the last star seen), so
/// the cost is at most the product of the lengths — no exponential
/// blow-up on hostile patterns.
fn wildcard<T, P>(
    text: &[T],
    pattern: &[P],
    is_star: impl Fn(&P) -> bool,
    matches: impl Fn(&T, &P) -> bool,
) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < text.len() {
        if j < pattern.len() && is_star(&pattern[j]) {
            star = Some((j, i));
            j += 1;
        } else if j < pattern.len() && matches(&text[i], &pattern[j]) {
            i += 1;
            j += 1;
        } else if let Some((sj, si)) = star {
            star = Some((sj, si + 1));
            i = si + 1;
            j = sj + 1;
        } else {
            return false;
        }
    }
    pattern[j..].iter().all(is_star)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn dot_dot_and_doubled_slashes_cannot_walk_out_of_a_directory() {
        assert_eq!(
            normalize("/srv/root/scratch/../secrets/a"),
            "/srv/root/secrets/a"
        );
        assert_eq!(normalize("/srv//root/./scratch/"), "/srv/root/scratch");
        assert_eq!(normalize("/../../etc/passwd"), "/etc/passwd");
        assert_eq!(normalize("scratch/../../x"), "../x");
        assert_eq!(normalize(""), ".");
        assert_eq!(normalize("/"), "/");
        let scratch = "/srv/root/scratch/**";
        assert!(glob("/srv/root/scratch/a.txt", scratch));
        assert!(glob("/srv/root/scratch", scratch));
        assert!(glob("/srv/root/scratch/deep/er/b", scratch));
        for hostile in [
            "/srv/root/scratch/../secrets/a",
            "/srv/root/scratch/../../root/secrets",
            "/srv/root/scratchy/a",
            "/srv/root/scratch/..",
            "scratch/a.txt",
            "/srv/root/./scratch/../x",
            "/srv/root/scratch/a/../../x",
        ] {
            assert!(!glob(hostile, scratch), "{hostile} matched {scratch}");
        }
    }

    #[test]
    fn stars_stay_within_a_component_and_globstars_span_them() {
        assert!(glob("/a/b/.env", "/**/.env"));
        assert!(glob("/a/b/prod.env", "/**/*.env"));
        assert!(glob("/prod.env", "/**/*.env"));
        assert!(!glob("/a/b/env", "/**/*.env"));
        assert!(glob("/a/x.txt", "/a/*.txt"));
        assert!(!glob("/a/b/x.txt", "/a/*.txt"));
        assert!(glob("/a/b/x.txt", "/a/**/*.txt"));
        assert!(glob("/a/x1.txt", "/a/x?.txt"));
        assert!(!glob("/a/x12.txt", "/a/x?.txt"));
        assert!(!glob("/A/x.txt", "/a/*.txt"), "case-sensitive");
    }

    #[test]
    fn relative_and_home_paths_are_placed_only_when_the_server_says_how() {
        let nothing = Placement::default();
        assert_eq!(
            place(".git/config", &nothing),
            Err(Unplaced::Relative(".git/config".into()))
        );
        assert_eq!(
            place("~/.git/hooks-x", &nothing),
            Err(Unplaced::Home("~/.git/hooks-x".into()))
        );
        assert_eq!(place("", &nothing), Err(Unplaced::NotAPath));
        assert_eq!(place("/a\0b", &nothing), Err(Unplaced::NotAPath));
        let fs = Placement {
            home: Some("/home/agent".into()),
            bases: None,
            relative_to_bases: true,
        };
        assert_eq!(
            place("~/.git/hooks-x", &fs).unwrap(),
            "/home/agent/.git/hooks-x"
        );
        assert_eq!(place("~", &fs).unwrap(), "/home/agent");
        assert_eq!(
            place("~other/x", &fs),
            Err(Unplaced::NeedsBases("~other/x".into())),
            "~user is not expanded by server-filesystem: it is relative"
        );
        let listed = Placement {
            bases: Some(vec!["/srv/ws".into(), "/srv/other".into()]),
            ..fs
        };
        assert_eq!(
            place(".git/config", &listed).unwrap(),
            "/srv/ws/.git/config"
        );
        assert_eq!(
            place("../other/x", &listed).unwrap(),
            "/srv/other/x",
            "against the first directory that keeps it inside one of them"
        );
        assert_eq!(
            place("../../etc/passwd", &listed).unwrap(),
            "/etc/passwd",
            "none keeps it inside: the first directory, as the server does"
        );
    }

    #[test]
    fn paths_and_patterns_compare_in_nfc() {
        let nfd = "/srv/scratch/cafe\u{301}/x";
        let nfc_pattern = "/srv/scratch/caf\u{e9}/**";
        assert!(glob(nfd, nfc_pattern));
        assert!(glob(
            "/srv/scratch/caf\u{e9}/x",
            "/srv/scratch/cafe\u{301}/**"
        ));
        assert_eq!(
            Lexical(Placement::default()).resolve(nfd).unwrap(),
            "/srv/scratch/caf\u{e9}/x"
        );
    }

    proptest! {
        /// Normalising is idempotent, and no path with `..` in it matches a
        /// pattern it escapes after normalising.
        #[test]
        fn normalising_twice_changes_nothing(parts in prop::collection::vec(prop::sample::select(vec!["a", "b", "..", ".", "", "scratch"]), 0..8)) {
            let path = format!("/{}", parts.join("/"));
            let once = normalize(&path);
            prop_assert_eq!(normalize(&once), once.clone());
            prop_assert_eq!(glob(&path, "/scratch/**"), once == "/scratch" || once.starts_with("/scratch/"));
        }

        /// A relative path placed against directories is always absolute
        /// and normal, whatever `..` it holds.
        #[test]
        fn a_placed_path_is_absolute_and_normal(parts in prop::collection::vec(prop::sample::select(vec!["a", "..", ".", "", "~", "x y"]), 1..8)) {
            let raw = parts.join("/");
            let placement = Placement {
                home: Some("/home/u".into()),
                bases: Some(vec!["/srv/ws".into()]),
                relative_to_bases: true,
            };
            if let Ok(placed) = place(&raw, &placement) {
                prop_assert!(placed.starts_with('/'));
                prop_assert_eq!(normalize(&placed), placed);
            }
        }
    }
}
