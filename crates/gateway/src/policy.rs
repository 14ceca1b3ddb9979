//! The operator's rules (`[[rules]]`, [`plangate_policy`]) at the gateway's
//! edge: compiled once per config, and the one thing a rule's path check
//! needs from the world — where a symlink on this machine leads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use plangate_config::{Config, Transport};
use plangate_policy::{Lexical, PathResolver, Policy};

/// Resolves symlinks on this machine: for an upstream that is a local
/// process, a path in its arguments names a file here, and a rule about
/// `/srv/root/scratch/**` must not be walked around through a link in
/// `scratch` that points elsewhere. The longest part of the path that
/// exists is resolved (`realpath`); the rest, not there yet (a file about
/// to be written), is appended as it is.
pub struct LocalFs;

impl PathResolver for LocalFs {
    fn resolve(&self, path: String) -> String {
        if !path.starts_with('/') {
            return path;
        }
        let mut existing: &Path = Path::new(&path);
        let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
        loop {
            if let Ok(real) = std::fs::canonicalize(existing) {
                let mut out: PathBuf = real;
                for part in rest.iter().rev() {
                    out.push(part);
                }
                return out.to_string_lossy().into_owned();
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name);
                    existing = parent;
                }
                _ => return path,
            }
        }
    }
}

/// The rules of `config`, compiled. A loaded config's rules were checked
/// when it was read, so this cannot fail for one; should rules built in
/// code be wrong, every call is refused by a rule saying so (fail closed)
/// rather than served without the rules the operator wrote.
pub fn compile(config: &Config) -> Arc<Policy> {
    if config.rules.is_empty() {
        return Arc::new(Policy::empty());
    }
    let modes: Vec<String> = config.modes.names();
    match Policy::compile(&config.rules, &modes) {
        Ok(policy) => Arc::new(policy),
        Err(errors) => {
            let said: Vec<String> = errors
                .iter()
                .map(|e| format!("rules[{}].{}: {}", e.index, e.field, e.message))
                .collect();
            tracing::error!(
                "the rules cannot be compiled, so every call is refused: {}",
                said.join("; ")
            );
            let refuse_all = plangate_policy::RuleSpec {
                name: "rules-broken".to_owned(),
                when: "true".to_owned(),
                outcome: "refuse".to_owned(),
                message: Some(format!(
                    "plangate's rules cannot be compiled ({}); an operator must fix them",
                    said.join("; ")
                )),
                ..plangate_policy::RuleSpec::default()
            };
            Arc::new(Policy::compile(&[refuse_all], &modes).unwrap_or_else(|_| Policy::empty()))
        }
    }
}

/// How paths in `upstream`'s arguments are resolved: on this machine for
/// a local process, lexically for a remote server (its files are not
/// here).
pub fn resolver_for(config: &Config, upstream: &str) -> Arc<dyn PathResolver> {
    // Made once: a call with rules clones a pointer, allocates nothing.
    static LOCAL: LazyLock<Arc<dyn PathResolver>> = LazyLock::new(|| Arc::new(LocalFs));
    static LEXICAL: LazyLock<Arc<dyn PathResolver>> = LazyLock::new(|| Arc::new(Lexical));
    match config.upstreams.get(upstream).map(|u| &u.transport) {
        Some(Transport::Stdio { .. }) => LOCAL.clone(),
        _ => LEXICAL.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_symlink_is_followed_and_what_does_not_exist_yet_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::os::unix::fs::symlink(root.join("secrets"), root.join("scratch/link")).unwrap();
        let r = |p: &str| LocalFs.resolve(format!("{}{p}", root.display()));
        assert_eq!(
            r("/scratch/new.txt"),
            format!("{}/scratch/new.txt", root.display())
        );
        assert_eq!(
            r("/scratch/link/key.pem"),
            format!("{}/secrets/key.pem", root.display())
        );
        assert_eq!(
            r("/scratch/link/deeper/not/there"),
            format!("{}/secrets/deeper/not/there", root.display())
        );
        assert_eq!(LocalFs.resolve("relative/x".into()), "relative/x");
    }
}
