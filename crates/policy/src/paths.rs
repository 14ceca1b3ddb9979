//! Paths as rules see them: normalised before any comparison, so a rule
//! about `/srv/root/scratch/**` cannot be walked around with
//! `/srv/root/scratch/../secrets`, `//`, `.` or a symlink.
//!
//! Normalisation is lexical here — `.` dropped, `..` taking the previous
//! component away, repeated `/` collapsed, a trailing `/` dropped — and
//! symlinks are the [`PathResolver`]'s business: the gateway passes one
//! that resolves them on this machine when the upstream is a local process
//! (the path means a file here), and none otherwise. Matching is
//! case-sensitive and byte-exact, as on Linux file systems: on a
//! case-insensitive file system, write the pattern in the case the paths
//! come in, or use a rule that does not depend on case.

/// Turns a path an agent sent into the path it names, for a rule to match.
/// Implementations may look at the file system (symlinks); this crate never
/// does itself.
pub trait PathResolver: Send + Sync {
    /// `path`, already normalised lexically and absolute, with symlinks
    /// resolved as far as this resolver can. Return it unchanged when there
    /// is nothing to resolve.
    fn resolve(&self, path: String) -> String;
}

/// A resolver that resolves nothing: for upstreams whose paths are not
/// files on this machine.
pub struct Lexical;

impl PathResolver for Lexical {
    fn resolve(&self, path: String) -> String {
        path
    }
}

/// `path` normalised lexically: `.` and empty components dropped, `..`
/// removing the component before it (never above the root of an absolute
/// path; kept at the front of a relative one), no trailing `/` (the root
/// stays `/`). A relative path stays relative: it matches no absolute
/// pattern, so a rule about `/srv/**` never lets a relative path through.
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

/// Whether `path` matches the glob `pattern`, both normalised first: `*`
/// matches any characters but `/`, `?` one character but `/`, and a whole
/// component `**` any number of components (none included). Everything
/// else matches itself. `/srv/scratch/**` matches `/srv/scratch` and
/// everything under it.
pub fn glob(path: &str, pattern: &str) -> bool {
    glob_normalized(&normalize(path), pattern)
}

/// [`glob`] for a `path` already normalised (and resolved): only the
/// pattern is normalised here.
pub(crate) fn glob_normalized(path: &str, pattern: &str) -> bool {
    let pattern = normalize(pattern);
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
    }
}
