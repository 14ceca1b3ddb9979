//! Owner-only files and directories: where every secret the store makes is
//! kept.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

use crate::random::random_bytes;

/// Creates `path` only if it does not exist, readable and writable by the
/// owner alone (0600 on unix). Fails with `AlreadyExists` otherwise, which
/// is what makes racing creators safe.
pub(crate) fn create_new_private_file(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

/// Replaces `path` with a file holding `bytes`, owner-only: written under a
/// fresh random name beside it (created exclusively, so a file or symlink
/// planted there is an error, never written through), synced, then renamed
/// over `path` (a rename replaces a link at `path` itself, never its
/// target).
pub(crate) fn replace_private_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    let suffix: [u8; 8] = random_bytes().map_err(io::Error::other)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", hex::encode(suffix)));
    let tmp = std::path::PathBuf::from(tmp);
    let written = create_new_private_file(&tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    let renamed = written.and_then(|()| fs::rename(&tmp, path));
    if renamed.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    renamed
}

/// Creates `path` (and its parents) if missing; a directory this call
/// creates is owner-only (0700 on unix) whatever the umask.
pub(crate) fn create_private_dir(path: &Path) -> io::Result<()> {
    if path.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}
