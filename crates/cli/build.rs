//! Stamps the binary with the commit it was built from, for `plangate
//! --version`: `PLANGATE_COMMIT` when the builder sets it (a build from a
//! source archive), else `git rev-parse`, else "unknown commit".

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=PLANGATE_COMMIT");
    let commit = std::env::var("PLANGATE_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown commit".to_owned());
    println!("cargo:rustc-env=PLANGATE_COMMIT={commit}");
    // Stamp again when HEAD moves: the files git changes on a commit or a
    // checkout.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = PathBuf::from(dir);
        for file in ["HEAD", "packed-refs"] {
            println!("cargo:rerun-if-changed={}", dir.join(file).display());
        }
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={}", dir.join(head).display());
        }
    }
}
