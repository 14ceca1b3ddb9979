//! What a shell user installs beside the binary: `--version` names the
//! commit, completion scripts load and complete, manual pages render.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;

fn plangate_out(args: &[&str]) -> String {
    let out = Command::new(plangate()).args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let version = plangate_out(&["--version"]);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    assert_eq!(
        version.trim(),
        format!("plangate {} ({})", env!("CARGO_PKG_VERSION"), head.trim())
    );
}

#[test]
fn bash_completion_loads_and_completes_commands_and_flags() {
    let script = plangate_out(&["completions", "bash"]);
    let scratch = Scratch::new();
    let file = scratch.write("plangate.bash", &script);
    // As bash calls it: the command, the word being completed, the one
    // before.
    let complete = |words: &str, cword: usize| {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {file}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE=\"{words}\"; _plangate plangate \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                file = file.display()
            ))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let commands = complete("plangate p", 1);
    assert!(commands.lines().any(|l| l == "plans"), "{commands}");
    assert!(commands.lines().any(|l| l == "policy"), "{commands}");
    let flags = complete("plangate plans apply --d", 3);
    assert!(flags.lines().any(|l| l == "--digest"), "{flags}");
    for shell in ["zsh", "fish", "powershell"] {
        let script = plangate_out(&["completions", shell]);
        assert!(script.contains("plangate"), "{shell}: {script}");
    }
}

#[test]
fn manual_pages_render_for_the_binary_and_each_command() {
    let page = plangate_out(&["man"]);
    assert!(page.contains(".TH plangate 1"), "{page}");
    assert!(page.contains("plangate\\-plans"), "{page}");
    let scratch = Scratch::new();
    let dir = scratch.path().join("man");
    plangate_out(&["man", "--dir", dir.to_str().unwrap()]);
    for page in [
        "plangate.1",
        "plangate-plans-apply.1",
        "plangate-completions.1",
    ] {
        assert!(dir.join(page).exists(), "{page}");
    }
}
