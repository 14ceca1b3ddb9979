//! The SQLite log's change mark ([`crate::EventLog::log_mark`]), read from
//! the write-ahead log's index without a database connection.
//!
//! In WAL mode every process on a database shares its `-shm` file, whose
//! first 96 bytes are the WAL-index header, twice (a documented file
//! format: <https://www.sqlite.org/walformat.html>). A writer rewrites both
//! copies on every commit — second copy, barrier, first copy — with a
//! counter (`iChange`) bumped by every transaction, the number of frames
//! in the log, the log's salts and checksums; a reader (SQLite's own, and
//! this one) takes the header only when both copies agree. Equal headers
//! therefore mean no commit in between, by any process, which lets the
//! gateway answer a key's state from memory instead of asking the
//! database's connection thread for the key's new events (a round trip
//! that is most of a `get_plan`).
//!
//! Two things could make an old header look current: the file deleted and
//! re-created (SQLite removes it when the last connection anywhere closes),
//! or re-initialised in place (by the first connection of a new run). The
//! store holds a connection of its own open for as long as it lives, which
//! rules out both for every process sharing the file, and the mark is also
//! refused when the file it reads is no longer linked. Anything unexpected
//! — a short file, torn or uninitialised copies, another format version,
//! an I/O error — is "no mark", and the caller asks the database.

use std::fs::File;
use std::path::Path;

use crate::LogMark;

/// `iVersion` of the WAL-index format SQLite has written since 3.7.0.
const WAL_INDEX_VERSION: u32 = 3_007_000;

/// The size of one copy of the WAL-index header.
const HEADER: usize = 48;

/// The open `-shm` file of one database.
#[derive(Debug)]
pub(crate) struct WalMark {
    shm: File,
}

impl WalMark {
    /// Opens `<database>-shm` read-only (never through a symlink). `None`
    /// if it cannot be opened: the database is then asked every time.
    pub(crate) fn open(database: &Path) -> Option<WalMark> {
        let mut path = database.as_os_str().to_owned();
        path.push("-shm");
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NOFOLLOW);
        }
        match options.open(&path) {
            Ok(shm) => Some(WalMark { shm }),
            Err(e) => {
                tracing::debug!(path = %std::path::PathBuf::from(path).display(), "no WAL change mark: {e}");
                None
            }
        }
    }

    /// The header as it stands, if both copies agree and it is one this
    /// code knows how to read.
    #[cfg(unix)]
    pub(crate) fn read(&self) -> Option<LogMark> {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let mut both = [0u8; 2 * HEADER];
        self.shm.read_exact_at(&mut both, 0).ok()?;
        let (first, second) = both.split_at(HEADER);
        let header = parse(first, second)?;
        // Read after the header: a file unlinked since was still live when
        // the header was read, and one unlinked before is refused here.
        if self.shm.metadata().ok()?.nlink() == 0 {
            return None;
        }
        Some(header)
    }

    /// Off unix there is no positioned read here: no mark.
    #[cfg(not(unix))]
    pub(crate) fn read(&self) -> Option<LogMark> {
        None
    }
}

/// The mark the two header copies make, if they agree, the index is
/// initialised and its version is the one known here.
fn parse(first: &[u8], second: &[u8]) -> Option<LogMark> {
    let header: [u8; HEADER] = first.try_into().ok()?;
    if first != second {
        // A commit is writing the header: the caller asks the database.
        return None;
    }
    let version = u32::from_ne_bytes(header[0..4].try_into().ok()?);
    let initialised = header[12] == 1;
    (version == WAL_INDEX_VERSION && initialised).then_some(LogMark(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(change: u32) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&WAL_INDEX_VERSION.to_ne_bytes());
        h[8..12].copy_from_slice(&change.to_ne_bytes());
        h[12] = 1;
        h
    }

    #[test]
    fn only_agreeing_initialised_headers_of_the_known_version_are_marks() {
        let h = header(7);
        assert_eq!(parse(&h, &h), Some(LogMark(h)));
        assert_eq!(parse(&h, &header(8)), None, "copies disagree mid-commit");
        let mut uninit = h;
        uninit[12] = 0;
        assert_eq!(parse(&uninit, &uninit), None);
        let mut other = h;
        other[0..4].copy_from_slice(&3_007_001u32.to_ne_bytes());
        assert_eq!(parse(&other, &other), None);
        assert_ne!(parse(&h, &h), parse(&header(8), &header(8)));
    }
}
