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
//! A mark also names its file by device and inode. SQLite removes the
//! file when the last connection anywhere closes and makes a new one with
//! the next, whose header may well repeat an old one; the inode tells them
//! apart, since a file opened here is never closed (below), so its inode
//! number is never reused while this process runs, and a file found
//! unlinked is let go of. A file re-initialised in place (after every
//! process on it crashed) is rebuilt from the log itself: a header equal
//! to one before — frame count, salts and the last frame's checksum — is
//! then the same log, so the same data. Anything unexpected
//! — a short file, torn or uninitialised copies, another format version,
//! an I/O error — is "no mark", and the caller asks the database.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::LogMark;

/// `iVersion` of the WAL-index format SQLite has written since 3.7.0.
const WAL_INDEX_VERSION: u32 = 3_007_000;

/// The size of one copy of the WAL-index header.
const HEADER: usize = 48;

/// A file by (device, inode).
type FileId = (u64, u64);

/// Every `-shm` file this process opened, by (device, inode), open until
/// the process ends. SQLite locks the file with POSIX record locks, which
/// belong to the process: closing *any* descriptor of the file would drop
/// the locks SQLite's own connections hold on it. So a descriptor opened
/// here is never closed, and a file is opened once. (An open descriptor
/// also keeps the file's inode number from being reused, which is what
/// lets a mark name its file.)
fn opened() -> &'static Mutex<HashMap<FileId, Arc<File>>> {
    static OPENED: OnceLock<Mutex<HashMap<FileId, Arc<File>>>> = OnceLock::new();
    OPENED.get_or_init(Mutex::default)
}

/// The `-shm` file of one database, as it is now.
#[derive(Debug)]
pub(crate) struct WalMark {
    path: PathBuf,
    /// The file last read, with its (device, inode).
    current: Mutex<Option<(FileId, Arc<File>)>>,
}

impl WalMark {
    /// The mark of the database at `database`: its `-shm` file is opened
    /// when first read (it appears with the first connection in WAL mode).
    pub(crate) fn new(database: &Path) -> WalMark {
        let mut path = database.as_os_str().to_owned();
        path.push("-shm");
        WalMark {
            path: PathBuf::from(path),
            current: Mutex::new(None),
        }
    }

    /// The header as it stands, if both copies agree and it is one this
    /// code knows how to read.
    #[cfg(unix)]
    pub(crate) fn read(&self) -> Option<LogMark> {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let (file, shm) = self.file()?;
        let mut both = [0u8; 2 * HEADER];
        shm.read_exact_at(&mut both, 0).ok()?;
        let (first, second) = both.split_at(HEADER);
        let header = parse(first, second)?;
        // Checked after the read: a file unlinked since was still the
        // database's when read; one unlinked before (the last connection
        // anywhere closed, and a new one made a new file) is let go of,
        // and the next read opens the new one.
        if shm.metadata().ok()?.nlink() == 0 {
            *self.current.lock().ok()? = None;
            return None;
        }
        Some(LogMark { file, header })
    }

    /// Off unix there is no positioned read here: no mark.
    #[cfg(not(unix))]
    pub(crate) fn read(&self) -> Option<LogMark> {
        None
    }

    /// The `-shm` file now at the path, opened once per process.
    #[cfg(unix)]
    fn file(&self) -> Option<(FileId, Arc<File>)> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let mut current = self.current.lock().ok()?;
        if let Some(known) = current.as_ref() {
            return Some(known.clone());
        }
        // Looked up by path first, so a file this process already holds
        // is never opened (and so never closed) a second time.
        let meta = std::fs::symlink_metadata(&self.path).ok()?;
        let id = (meta.dev(), meta.ino());
        let mut opened = opened().lock().ok()?;
        let shm = match opened.get(&id) {
            Some(shm) => shm.clone(),
            None => {
                let shm = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&self.path)
                    .map_err(
                        |e| tracing::debug!(path = %self.path.display(), "no WAL change mark: {e}"),
                    )
                    .ok()?;
                let meta = shm.metadata().ok()?;
                let id_now = (meta.dev(), meta.ino());
                let shm = Arc::new(shm);
                // Replaced between the look-up and the open: kept under
                // the file it is (an entry already there is kept too, and
                // this descriptor with it — never closed).
                let kept = opened.entry(id_now).or_insert_with(|| shm.clone()).clone();
                if !Arc::ptr_eq(&kept, &shm) {
                    std::mem::forget(shm);
                }
                if id_now != id {
                    return None;
                }
                kept
            }
        };
        *current = Some((id, shm.clone()));
        Some((id, shm))
    }
}

/// The mark the two header copies make, if they agree, the index is
/// initialised and its version is the one known here.
fn parse(first: &[u8], second: &[u8]) -> Option<[u8; HEADER]> {
    let header: [u8; HEADER] = first.try_into().ok()?;
    if first != second {
        // A commit is writing the header: the caller asks the database.
        return None;
    }
    let version = u32::from_ne_bytes(header[0..4].try_into().ok()?);
    let initialised = header[12] == 1;
    (version == WAL_INDEX_VERSION && initialised).then_some(header)
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
        assert_eq!(parse(&h, &h), Some(h));
        assert_eq!(parse(&h, &header(8)), None, "copies disagree mid-commit");
        let mut uninit = h;
        uninit[12] = 0;
        assert_eq!(parse(&uninit, &uninit), None);
        let mut other = h;
        other[0..4].copy_from_slice(&3_007_001u32.to_ne_bytes());
        assert_eq!(parse(&other, &other), None);
        assert_ne!(parse(&h, &h), parse(&header(8), &header(8)));
    }

    #[cfg(unix)]
    #[test]
    fn a_file_made_anew_with_the_same_header_is_a_different_mark() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("plangate.db");
        let shm = dir.path().join("plangate.db-shm");
        let mut bytes = header(3).to_vec();
        bytes.extend_from_slice(&header(3));
        std::fs::write(&shm, &bytes).expect("write");
        let wal = WalMark::new(&db);
        let first = wal.read().expect("a mark");
        assert_eq!(wal.read(), Some(first), "nothing changed");

        // The last connection closed (file removed), a new one made a new
        // file that says exactly the same.
        std::fs::remove_file(&shm).expect("remove");
        std::fs::write(&shm, &bytes).expect("write again");
        assert_eq!(wal.read(), None, "the file it held is gone");
        let second = wal.read().expect("a mark of the new file");
        assert_ne!(first, second);
        assert_eq!(wal.read(), Some(second));
        // A second mark of the same database shares the open file.
        assert_eq!(WalMark::new(&db).read(), Some(second));
    }
}
