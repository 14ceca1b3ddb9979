//! The data dir and the key material kept in it (docs/design.md §2).
//!
//! One data dir is shared by every plangate process of a user (each stdio
//! client window starts its own), so everything here is safe to run from
//! several processes at once: the key files are written under a temporary
//! name and published with a hard link, which fails instead of replacing,
//! so two processes starting together end up reading the same key.

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use crate::StoreError;
use crate::private_fs::{create_new_private_file, create_private_dir};
use crate::random::random_bytes;

/// The environment variable that supplies the seal key; named in errors.
pub const SEAL_KEY_VAR: &str = "PLANGATE_SEAL_KEY";
/// The environment variable that supplies the signing key; named in errors.
pub const SIGNING_KEY_VAR: &str = "PLANGATE_SIGNING_KEY";
/// The environment variable that supplies the log key's seed (the Ed25519
/// key that signs the event log); named in errors.
pub const LOG_KEY_VAR: &str = "PLANGATE_LOG_KEY";

const SEAL_KEY_FILE: &str = "seal.key";
const SIGNING_KEY_FILE: &str = "signing.key";
const LOG_KEY_FILE: &str = "log.key";
const SQLITE_FILE: &str = "plangate.db";

/// Every other file plangate keeps in the data dir: the database's own
/// files, the key-revocation epoch and the demo site's state.
const STATE_FILES: [&str; 5] = [
    SQLITE_FILE,
    "plangate.db-wal",
    "plangate.db-shm",
    "plangate.db-keys",
    "demo-site.json",
];

/// The directory holding plangate's durable state on one machine: the
/// SQLite database and generated key material. Opening it creates it, so
/// the first start needs no set-up step.
#[derive(Debug, Clone)]
pub struct DataDir {
    path: PathBuf,
}

impl DataDir {
    /// Opens the data dir at `path`, creating it (owner-only, 0700 on unix)
    /// if it does not exist, and checks that nobody else could have
    /// planted, replaced or read what plangate keeps there (unix): the
    /// directory and every file of plangate's in it must belong to this
    /// user and be no link; key files must be owner-only, or they are
    /// refused ([`StoreError::Untrusted`], saying what to do). Anything
    /// else open to other users — the directory, the database — is made
    /// owner-only, with a warning that says so.
    pub fn open(path: impl Into<PathBuf>) -> Result<DataDir, StoreError> {
        let path = path.into();
        // A file where the directory (or one of its parents) should be:
        // say so, not the operating system's "File exists".
        if let Some(file) = path
            .ancestors()
            .find(|a| a.exists())
            .filter(|a| !a.is_dir())
        {
            return Err(StoreError::NotADirectory {
                path: file.to_path_buf(),
            });
        }
        create_private_dir(&path).map_err(|e| StoreError::io(&path, e))?;
        #[cfg(unix)]
        trust::check_dir(&path)?;
        Ok(DataDir { path })
    }

    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the embedded SQLite database lives: `DIR/plangate.db`.
    pub fn sqlite_path(&self) -> PathBuf {
        self.path.join(SQLITE_FILE)
    }

    /// The seal, signing and log keys. A value given (from config or the
    /// environment; base64 or hex of exactly 32 bytes) wins, so replicas can
    /// share keys; otherwise the key is read from `DIR/seal.key` /
    /// `DIR/signing.key` / `DIR/log.key`, generated there (0600) on first
    /// start. Files are never rewritten, so a restart invalidates nothing.
    pub fn key_material(&self, from_env: &KeysFromEnv<'_>) -> Result<KeyMaterial, StoreError> {
        let seal_key = self.one_key(SEAL_KEY_VAR, from_env.seal, SEAL_KEY_FILE)?;
        let signing_key = self.one_key(SIGNING_KEY_VAR, from_env.signing, SIGNING_KEY_FILE)?;
        let log_key = self.one_key(LOG_KEY_VAR, from_env.log, LOG_KEY_FILE)?;
        KeyMaterial::new(seal_key, signing_key, log_key)
    }

    fn one_key(
        &self,
        var: &'static str,
        given: Option<&str>,
        file: &str,
    ) -> Result<[u8; 32], StoreError> {
        match given {
            Some(value) => {
                parse_key(value).map_err(|reason| StoreError::BadKeyMaterial { var, reason })
            }
            None => load_or_create_key_file(&self.path.join(file)),
        }
    }
}

/// The keys given from outside the data dir (replicas share them), each
/// `None` when not given: then the data dir's file is used.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeysFromEnv<'a> {
    /// [`SEAL_KEY_VAR`]'s value.
    pub seal: Option<&'a str>,
    /// [`SIGNING_KEY_VAR`]'s value.
    pub signing: Option<&'a str>,
    /// [`LOG_KEY_VAR`]'s value.
    pub log: Option<&'a str>,
}

/// Where plangate keeps its state when nothing says otherwise:
/// `$XDG_DATA_HOME/plangate`, else `$HOME/.local/share/plangate`, else
/// `./.plangate`. (`PLANGATE_DATA_DIR` is the CLI's business, so it can be
/// reported with the other settings.)
pub fn default_data_dir() -> PathBuf {
    default_data_dir_from(std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME"))
}

fn default_data_dir_from(xdg_data_home: Option<OsString>, home: Option<OsString>) -> PathBuf {
    // The XDG spec says a relative XDG_DATA_HOME is invalid and ignored.
    if let Some(xdg) = xdg_data_home.map(PathBuf::from)
        && xdg.is_absolute()
    {
        return xdg.join("plangate");
    }
    if let Some(home) = home.filter(|h| !h.is_empty()) {
        return PathBuf::from(home).join(".local/share/plangate");
    }
    PathBuf::from(".plangate")
}

// === impl KeyMaterial ===

/// The three process-wide secrets: the seal key (AEAD for secrets at
/// rest), the signing key (request state, HMAC digests of secrets) and the
/// log key's seed (Ed25519 signatures over the event log,
/// [`crate::LogKey`]). Its `Debug` prints `[redacted]` so it can sit in a
/// struct that is logged.
#[derive(Clone)]
pub struct KeyMaterial {
    seal_key: [u8; 32],
    signing_key: [u8; 32],
    log_seed: [u8; 32],
    log_key: std::sync::Arc<crate::LogKey>,
}

impl PartialEq for KeyMaterial {
    fn eq(&self, other: &Self) -> bool {
        (self.seal_key, self.signing_key, self.log_seed)
            == (other.seal_key, other.signing_key, other.log_seed)
    }
}

impl Eq for KeyMaterial {}

impl KeyMaterial {
    /// Key material from raw bytes, for tests and for callers that get keys
    /// from somewhere other than the data dir. An error only if the crypto
    /// library refuses the log key's seed.
    pub fn new(
        seal_key: [u8; 32],
        signing_key: [u8; 32],
        log_seed: [u8; 32],
    ) -> Result<KeyMaterial, StoreError> {
        let log_key =
            crate::LogKey::from_seed(&log_seed).map_err(|reason| StoreError::BadKeyMaterial {
                var: LOG_KEY_VAR,
                reason,
            })?;
        Ok(KeyMaterial {
            seal_key,
            signing_key,
            log_seed,
            log_key: std::sync::Arc::new(log_key),
        })
    }

    /// The key that signs the event log ([`crate::LogKey`]).
    pub fn log_key(&self) -> std::sync::Arc<crate::LogKey> {
        self.log_key.clone()
    }

    /// The key that seals secret argument values at rest.
    pub fn seal_key(&self) -> &[u8; 32] {
        &self.seal_key
    }

    /// The key that signs request state and keys HMAC digests of secrets.
    pub fn signing_key(&self) -> &[u8; 32] {
        &self.signing_key
    }
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyMaterial([redacted])")
    }
}

/// Parses 32 bytes given as hex (64 digits) or base64 (standard or URL-safe,
/// padded or not). The error describes the value without repeating it.
fn parse_key(value: &str) -> Result<[u8; 32], String> {
    let value = value.trim();
    if value.is_empty() {
        return Err("it is set but empty; expected 32 bytes as base64 or hex".to_owned());
    }
    let bytes = if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(value).map_err(|e| format!("bad hex: {e}"))?
    } else {
        [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
            .iter()
            .find_map(|engine| engine.decode(value).ok())
            .ok_or_else(|| {
                format!(
                    "its {} characters are neither 64 hex digits nor base64; expected 32 bytes as base64 or hex",
                    value.chars().count()
                )
            })?
    };
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| {
        format!(
            "it decodes to {} bytes; expected exactly 32 (e.g. `openssl rand -base64 32`)",
            bytes.len()
        )
    })
}

/// Reads the key in `path`, or creates it with fresh random bytes if it does
/// not exist yet. Creation is atomic: the key is written and synced under a
/// unique temporary name, then hard-linked into place, which fails if
/// another process got there first — in which case its key is read instead.
fn load_or_create_key_file(path: &Path) -> Result<[u8; 32], StoreError> {
    match read_key_file(path) {
        Ok(key) => return Ok(key),
        Err(StoreError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }

    let key: [u8; 32] = random_bytes()?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        hex::encode(random_bytes::<8>()?)
    ));

    let written = (|| {
        let mut file = create_new_private_file(&tmp)?;
        file.write_all(format!("{}\n", hex::encode(key)).as_bytes())?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(StoreError::io(&tmp, e));
    }

    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => {
            sync_dir(dir);
            tracing::info!(path = %path.display(), "generated new key file");
            Ok(key)
        }
        // Another process published its key first: use that one.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_key_file(path),
        Err(e) => Err(StoreError::io(path, e)),
    }
}

fn read_key_file(path: &Path) -> Result<[u8; 32], StoreError> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    // A link is never followed, and what was opened is checked, not the
    // name: nothing can be swapped in between.
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    let mut file = match options.open(path) {
        Ok(file) => file,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(StoreError::Untrusted {
                path: path.to_owned(),
                reason: trust::LINK.to_owned(),
            });
        }
        Err(e) => return Err(StoreError::io(path, e)),
    };
    #[cfg(unix)]
    {
        let meta = file.metadata().map_err(|e| StoreError::io(path, e))?;
        trust::check_file(path, &meta, trust::Kind::Key)?;
    }
    let mut text = String::new();
    io::Read::read_to_string(&mut file, &mut text).map_err(|e| StoreError::io(path, e))?;
    parse_key(&text).map_err(|reason| StoreError::KeyFileInvalid {
        path: path.to_owned(),
        reason,
    })
}

/// Who may have touched the data dir (unix): ownership and modes.
#[cfg(unix)]
mod trust {
    use std::fs::{self, Metadata, Permissions};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    use super::{LOG_KEY_FILE, SEAL_KEY_FILE, SIGNING_KEY_FILE, STATE_FILES};
    use crate::StoreError;

    /// Why a link in the data dir is refused.
    pub(super) const LINK: &str = "it is a symbolic link, and plangate follows no link inside its data dir (one could point its reads and writes anywhere); replace it with the file itself";

    /// What a file holds, which decides what a loose mode means.
    #[derive(Clone, Copy)]
    pub(super) enum Kind {
        /// Key material: open to others means possibly known to them.
        Key,
        /// State (database, epoch, demo site): made owner-only.
        State,
    }

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn untrusted(path: &Path, reason: String) -> StoreError {
        StoreError::Untrusted {
            path: path.to_owned(),
            reason,
        }
    }

    /// Checks the directory, then every file of plangate's in it.
    pub(super) fn check_dir(dir: &Path) -> Result<(), StoreError> {
        let meta = fs::metadata(dir).map_err(|e| StoreError::io(dir, e))?;
        if meta.uid() != me() {
            return Err(untrusted(
                dir,
                format!(
                    "the data dir is owned by uid {}, not by this user (uid {}), so its owner can read or replace plangate's keys and database; use a data dir of your own (--data-dir or PLANGATE_DATA_DIR) or chown this one",
                    meta.uid(),
                    me()
                ),
            ));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            fs::set_permissions(dir, Permissions::from_mode(0o700))
                .map_err(|e| StoreError::io(dir, e))?;
            let open = if mode & 0o022 != 0 {
                "writable by other users, who could have planted files in it"
            } else {
                "readable by other users"
            };
            tracing::warn!(
                path = %dir.display(),
                "the data dir was {open} (mode {mode:03o}); plangate made it owner-only (0700). Every file of plangate's in it must be this user's own, or it is refused"
            );
        }
        let files = STATE_FILES.iter().map(|f| (*f, Kind::State)).chain([
            (SEAL_KEY_FILE, Kind::Key),
            (SIGNING_KEY_FILE, Kind::Key),
            (LOG_KEY_FILE, Kind::Key),
        ]);
        for (name, kind) in files {
            let path = dir.join(name);
            match fs::symlink_metadata(&path) {
                Ok(meta) => check_file(&path, &meta, kind)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&path, e)),
            }
        }
        Ok(())
    }

    /// Checks one file by the metadata of what is (or will be) opened.
    pub(super) fn check_file(path: &Path, meta: &Metadata, kind: Kind) -> Result<(), StoreError> {
        if meta.file_type().is_symlink() {
            return Err(untrusted(path, LINK.to_owned()));
        }
        let remove_it = match kind {
            Kind::Key => {
                "plangate then generates a new key; what the old one sealed or signed can no longer be opened"
            }
            Kind::State => "plangate then starts it afresh",
        };
        if !meta.is_file() {
            return Err(untrusted(
                path,
                format!("it is not a regular file; remove it ({remove_it})"),
            ));
        }
        if meta.uid() != me() {
            return Err(untrusted(
                path,
                format!(
                    "it is owned by uid {}, not by this user (uid {}), so another user may have planted it; remove it unless you know where it came from ({remove_it})",
                    meta.uid(),
                    me()
                ),
            ));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            match kind {
                Kind::Key => {
                    return Err(untrusted(
                        path,
                        format!(
                            "it is open to other users (mode {mode:03o}), so the key may be known to them; if you are sure it was not exposed, `chmod 600 {}`; otherwise remove it ({remove_it})",
                            path.display()
                        ),
                    ));
                }
                Kind::State => {
                    fs::set_permissions(path, Permissions::from_mode(0o600))
                        .map_err(|e| StoreError::io(path, e))?;
                    tracing::warn!(
                        path = %path.display(),
                        "this file was open to other users (mode {mode:03o}); plangate made it owner-only (0600)"
                    );
                }
            }
        }
        Ok(())
    }
}

/// Makes a new directory entry durable; best effort, as not every platform
/// can open a directory.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).expect("metadata").permissions().mode() & 0o777
    }

    #[test]
    fn open_creates_the_dir_and_names_the_database() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path().join("a/b")).expect("open");
        assert!(dir.path().is_dir());
        assert_eq!(dir.sqlite_path(), tmp.path().join("a/b/plangate.db"));
    }

    #[test]
    fn a_file_where_the_data_dir_should_be_is_named_as_such() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let file = tmp.path().join("f");
        fs::write(&file, "x").expect("write");
        for path in [file.clone(), file.join("below")] {
            let err = DataDir::open(&path).expect_err("a file is no data dir");
            assert_eq!(err.code(), "data_dir_not_a_directory");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("{} is a file", file.display())),
                "{text}"
            );
            assert!(!text.contains("os error"), "{text}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_new_data_dir_is_0700_and_key_files_are_0600() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path().join("data")).expect("open");
        assert_eq!(mode(dir.path()), 0o700);
        dir.key_material(&KeysFromEnv::default()).expect("keys");
        assert_eq!(mode(&dir.path().join("seal.key")), 0o600);
        assert_eq!(mode(&dir.path().join("signing.key")), 0o600);
    }

    #[test]
    fn generated_key_material_is_stable_across_reopen() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let first = DataDir::open(tmp.path())
            .expect("open")
            .key_material(&KeysFromEnv::default())
            .expect("keys");
        let second = DataDir::open(tmp.path())
            .expect("open")
            .key_material(&KeysFromEnv::default())
            .expect("keys");
        assert_eq!(first, second);
        assert_ne!(first.seal_key(), first.signing_key());
        assert_ne!(first.seal_key(), &[0u8; 32]);
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(tmp.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
    }

    #[test]
    fn concurrent_first_starts_agree_on_one_key() {
        for _ in 0..20 {
            let tmp = tempfile::tempdir().expect("tempdir");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let path = tmp.path().to_owned();
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        DataDir::open(path)
                            .expect("open")
                            .key_material(&KeysFromEnv::default())
                            .expect("keys")
                    })
                })
                .collect();
            let keys: Vec<KeyMaterial> = handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect();
            assert!(keys.windows(2).all(|w| w[0] == w[1]));
            let on_disk = DataDir::open(tmp.path())
                .expect("open")
                .key_material(&KeysFromEnv::default())
                .expect("keys");
            assert_eq!(keys[0], on_disk);
        }
    }

    #[test]
    fn key_material_from_the_environment_wins() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path()).expect("open");
        let seal = [7u8; 32];
        let signing = [9u8; 32];
        let keys = dir
            .key_material(&KeysFromEnv {
                seal: Some(&hex::encode(seal)),
                signing: Some(&STANDARD.encode(signing)),
                log: None,
            })
            .expect("keys");
        assert_eq!(keys.seal_key(), &seal);
        assert_eq!(keys.signing_key(), &signing);
        assert!(!dir.path().join("seal.key").exists());
        // URL-safe, unpadded base64 works too.
        let keys = dir
            .key_material(&KeysFromEnv {
                seal: Some(&URL_SAFE_NO_PAD.encode([0xfbu8; 32])),
                ..KeysFromEnv::default()
            })
            .expect("keys");
        assert_eq!(keys.seal_key(), &[0xfb; 32]);
    }

    #[test]
    fn bad_key_material_names_the_variable_and_not_the_value() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path()).expect("open");
        let short = STANDARD.encode([1u8; 16]);
        let err = dir
            .key_material(&KeysFromEnv {
                seal: Some(&short),
                ..KeysFromEnv::default()
            })
            .expect_err("short");
        assert_eq!(err.code(), "bad_key_material");
        let msg = err.to_string();
        assert!(msg.contains("PLANGATE_SEAL_KEY"), "{msg}");
        assert!(msg.contains("16 bytes"), "{msg}");
        assert!(!msg.contains(&short), "{msg}");

        let err = dir
            .key_material(&KeysFromEnv {
                signing: Some("not a key!"),
                ..KeysFromEnv::default()
            })
            .expect_err("garbage");
        let msg = err.to_string();
        assert!(msg.contains("PLANGATE_SIGNING_KEY"), "{msg}");
        assert!(!msg.contains("not a key!"), "{msg}");

        let err = dir
            .key_material(&KeysFromEnv {
                seal: Some(""),
                ..KeysFromEnv::default()
            })
            .expect_err("empty");
        assert!(err.to_string().contains("PLANGATE_SEAL_KEY"));
    }

    #[test]
    fn a_damaged_key_file_is_an_error_not_a_new_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path()).expect("open");
        fs::write(dir.path().join("seal.key"), "abcd\n").expect("write");
        // Owner-only, as plangate writes it: only the contents are damaged.
        #[cfg(unix)]
        chmod(&dir.path().join("seal.key"), 0o600);
        let err = dir
            .key_material(&KeysFromEnv::default())
            .expect_err("damaged");
        assert_eq!(err.code(), "key_file_invalid");
        assert_eq!(
            fs::read_to_string(dir.path().join("seal.key")).expect("read"),
            "abcd\n"
        );
    }

    #[test]
    fn default_data_dir_follows_xdg_then_home() {
        assert_eq!(
            default_data_dir_from(Some("/x/data".into()), Some("/home/u".into())),
            PathBuf::from("/x/data/plangate")
        );
        assert_eq!(
            default_data_dir_from(Some("relative".into()), Some("/home/u".into())),
            PathBuf::from("/home/u/.local/share/plangate")
        );
        assert_eq!(
            default_data_dir_from(None, None),
            PathBuf::from(".plangate")
        );
    }

    #[cfg(unix)]
    fn chmod(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_open_to_others_is_refused_not_used() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path()).expect("open");
        // A planted key another user can read (and so forge with).
        let planted = dir.path().join("signing.key");
        fs::write(&planted, format!("{}\n", hex::encode([1u8; 32]))).expect("plant");
        chmod(&planted, 0o644);
        let err = DataDir::open(tmp.path()).expect_err("refused at open");
        assert_eq!(err.code(), "untrusted_data_dir");
        let text = err.to_string();
        assert!(
            text.contains("signing.key") && text.contains("mode 644"),
            "{text}"
        );
        assert!(text.contains("chmod 600"), "{text}");
        // Refused when read, too (planted after the directory was opened).
        let err = dir
            .key_material(&KeysFromEnv::default())
            .expect_err("refused at read");
        assert_eq!(err.code(), "untrusted_data_dir");
        chmod(&planted, 0o600);
        let keys = dir
            .key_material(&KeysFromEnv::default())
            .expect("owner-only is fine");
        assert_eq!(keys.signing_key(), &[1u8; 32]);
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_that_is_a_link_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path().join("data")).expect("open");
        let elsewhere = tmp.path().join("elsewhere.key");
        fs::write(&elsewhere, hex::encode([2u8; 32])).expect("key");
        chmod(&elsewhere, 0o600);
        std::os::unix::fs::symlink(&elsewhere, dir.path().join("seal.key")).expect("link");
        let err = dir
            .key_material(&KeysFromEnv::default())
            .expect_err("link refused");
        assert_eq!(err.code(), "untrusted_data_dir");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        let err = DataDir::open(dir.path()).expect_err("link refused at open");
        assert!(err.to_string().contains("seal.key"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_data_dir_open_to_others_is_made_owner_only_and_so_are_its_state_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("data");
        fs::create_dir(&path).expect("mkdir");
        chmod(&path, 0o777);
        let db = path.join("plangate.db");
        fs::write(&db, b"").expect("db");
        chmod(&db, 0o644);
        let dir = DataDir::open(&path).expect("repaired, not refused");
        assert_eq!(mode(dir.path()), 0o700);
        assert_eq!(mode(&db), 0o600);
    }

    #[cfg(unix)]
    #[test]
    fn files_of_another_user_are_refused() {
        // Only root can give a file away; elsewhere this is shown by the
        // uid check's own message in the tests above.
        if rustix::process::geteuid().as_raw() != 0 {
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let planted = tmp.path().join("plangate.db");
        fs::write(&planted, b"").expect("db");
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).expect("chown");
        let err = DataDir::open(tmp.path()).expect_err("refused");
        assert!(err.to_string().contains("owned by uid 65534"), "{err}");
        fs::remove_file(&planted).expect("rm");
        std::os::unix::fs::chown(tmp.path(), Some(65534), Some(65534)).expect("chown");
        let err = DataDir::open(tmp.path()).expect_err("refused");
        assert!(
            err.to_string()
                .contains("the data dir is owned by uid 65534"),
            "{err}"
        );
    }
}
