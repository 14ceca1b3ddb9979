//! Writing files so that a failure leaves no half-written file and no
//! wider access than meant: a replaced file through a temporary file and a
//! rename, a new one owner-only from its first byte. Apart from the wrap
//! and unwrap flows, which both write this way (README, "Already have
//! servers…").

use std::path::Path;

use anyhow::{Context, Result, anyhow};

/// Who may read a file [`write_atomically`] writes.
#[derive(Clone, Copy)]
pub(super) enum Access<'a> {
    /// Its owner only (0600): the file holds a key, or what someone's
    /// file held.
    Owner,
    /// As `path` is now (the file it replaces; owner-only when it is gone).
    Like(&'a Path),
    /// These unix permission bits (a file put back as it was).
    Mode(u32),
}

/// A file's unix permission bits, when the system has them.
pub(super) fn mode_of(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path)
            .ok()
            .map(|m| m.permissions().mode() & 0o7777)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename, the
/// new file readable as `access` says from its first byte (the temporary
/// file is created owner-only and widened, if at all, before the rename).
pub(super) fn write_atomically(path: &Path, bytes: &[u8], access: Access<'_>) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.as_file().sync_all()?;
    let permissions = match access {
        Access::Owner => private_permissions(),
        Access::Like(like) => std::fs::metadata(like)
            .map(|m| m.permissions())
            .ok()
            .or_else(private_permissions),
        Access::Mode(mode) => mode_permissions(mode),
    };
    if let Some(permissions) = permissions {
        std::fs::set_permissions(tmp.path(), permissions)?;
    }
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}

/// Owner-only permissions (0600), where the system has them.
fn private_permissions() -> Option<std::fs::Permissions> {
    mode_permissions(0o600)
}

/// These unix permission bits, where the system has them.
pub(super) fn mode_permissions(mode: u32) -> Option<std::fs::Permissions> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        Some(std::fs::Permissions::from_mode(mode))
    }
    #[cfg(not(unix))]
    {
        let _ = mode;
        None
    }
}

/// Writes a new file readable by its owner only.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    if let Some(dir) = path.parent()
        && !dir.is_dir()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.sync_all()?;
    Ok(())
}

/// A unified diff of `old` and `new`, headed `from` and `to`.
pub(super) fn diff(old: &str, new: &str, from: &str, to: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}
