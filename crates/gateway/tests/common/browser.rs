//! Headless Chromium for the browser tests (Debian's `chromium`;
//! `scripts/install-browser` installs it when missing): where it is, the
//! flags every run starts with, how its process group ends, and where the
//! screenshots go.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The flags every headless run here starts with: no sandbox, GPU,
/// background network or first-run screens.
pub const HEADLESS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
];

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/artifacts`, where the screenshots are kept for people.
pub fn artifacts_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("artifacts")
}

/// `/usr/bin/chromium`, installed by `scripts/install-browser` if missing.
pub fn chromium() -> &'static str {
    if !Path::new(CHROMIUM).exists() {
        let script = workspace_root().join("scripts/install-browser");
        let status = Command::new(&script)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(status.success(), "scripts/install-browser failed");
    }
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is missing");
    CHROMIUM
}

/// Kills the whole process group `pgid` (renderers, zygote), so that no
/// Chromium outlives its test. The `--` is essential: procps
/// `kill -KILL -1234` reads `-1234` as `-2`.
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}
