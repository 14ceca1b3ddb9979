//! The data dir and the key material kept in it (DESIGN §2).
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
use crate::private_fs::{create_new_private_file, create_private_dir, random_bytes};

/// The environment variable that supplies the seal key; named in errors.
pub const SEAL_KEY_VAR: &str = "PLANGATE_SEAL_KEY";
/// The environment variable that supplies the signing key; named in errors.
pub const SIGNING_KEY_VAR: &str = "PLANGATE_SIGNING_KEY";

const SEAL_KEY_FILE: &str = "seal.key";
const SIGNING_KEY_FILE: &str = "signing.key";
const SQLITE_FILE: &str = "plangate.db";

/// The directory holding plangate's durable state on one machine: the
/// SQLite database and generated key material. Opening it creates it, so
/// the first start needs no set-up step.
#[derive(Debug, Clone)]
pub struct DataDir {
    path: PathBuf,
}

impl DataDir {
    /// Opens the data dir at `path`, creating it (owner-only, 0700 on unix)
    /// if it does not exist. An existing directory's mode is left alone:
    /// the operator may have chosen it.
    pub fn open(path: impl Into<PathBuf>) -> Result<DataDir, StoreError> {
        let path = path.into();
        create_private_dir(&path).map_err(|e| StoreError::io(&path, e))?;
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

    /// The seal and signing keys. A value given (from config or the
    /// environment; base64 or hex of exactly 32 bytes) wins, so replicas can
    /// share keys; otherwise the key is read from `DIR/seal.key` /
    /// `DIR/signing.key`, generated there (0600) on first start. Files are
    /// never rewritten, so a restart invalidates nothing.
    pub fn key_material(
        &self,
        seal_from_env: Option<&str>,
        signing_from_env: Option<&str>,
    ) -> Result<KeyMaterial, StoreError> {
        let seal_key = self.one_key(SEAL_KEY_VAR, seal_from_env, SEAL_KEY_FILE)?;
        let signing_key = self.one_key(SIGNING_KEY_VAR, signing_from_env, SIGNING_KEY_FILE)?;
        Ok(KeyMaterial {
            seal_key,
            signing_key,
        })
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

/// The two process-wide secrets: the seal key (AEAD for secrets at rest)
/// and the signing key (request state, HMAC digests of secrets). Its
/// `Debug` prints `[redacted]` so it can sit in a struct that is logged.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial {
    seal_key: [u8; 32],
    signing_key: [u8; 32],
}

impl KeyMaterial {
    /// Key material from raw bytes, for tests and for callers that get keys
    /// from somewhere other than the data dir.
    pub fn new(seal_key: [u8; 32], signing_key: [u8; 32]) -> KeyMaterial {
        KeyMaterial {
            seal_key,
            signing_key,
        }
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
    let text = fs::read_to_string(path).map_err(|e| StoreError::io(path, e))?;
    parse_key(&text).map_err(|reason| StoreError::KeyFileInvalid {
        path: path.to_owned(),
        reason,
    })
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

    #[cfg(unix)]
    #[test]
    fn a_new_data_dir_is_0700_and_key_files_are_0600() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path().join("data")).expect("open");
        assert_eq!(mode(dir.path()), 0o700);
        dir.key_material(None, None).expect("keys");
        assert_eq!(mode(&dir.path().join("seal.key")), 0o600);
        assert_eq!(mode(&dir.path().join("signing.key")), 0o600);
    }

    #[test]
    fn generated_key_material_is_stable_across_reopen() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let first = DataDir::open(tmp.path())
            .expect("open")
            .key_material(None, None)
            .expect("keys");
        let second = DataDir::open(tmp.path())
            .expect("open")
            .key_material(None, None)
            .expect("keys");
        assert_eq!(first, second);
        assert_ne!(first.seal_key(), first.signing_key());
        assert_ne!(first.seal_key(), &[0u8; 32]);
        // No temporary files are left behind.
        let names: Vec<_> = fs::read_dir(tmp.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
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
                            .key_material(None, None)
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
                .key_material(None, None)
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
            .key_material(Some(&hex::encode(seal)), Some(&STANDARD.encode(signing)))
            .expect("keys");
        assert_eq!(keys.seal_key(), &seal);
        assert_eq!(keys.signing_key(), &signing);
        assert!(!dir.path().join("seal.key").exists());
        // URL-safe, unpadded base64 works too.
        let keys = dir
            .key_material(Some(&URL_SAFE_NO_PAD.encode([0xfbu8; 32])), None)
            .expect("keys");
        assert_eq!(keys.seal_key(), &[0xfb; 32]);
    }

    #[test]
    fn bad_key_material_names_the_variable_and_not_the_value() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path()).expect("open");
        let short = STANDARD.encode([1u8; 16]);
        let err = dir.key_material(Some(&short), None).expect_err("short");
        assert_eq!(err.code(), "bad_key_material");
        let msg = err.to_string();
        assert!(msg.contains("PLANGATE_SEAL_KEY"), "{msg}");
        assert!(msg.contains("16 bytes"), "{msg}");
        assert!(!msg.contains(&short), "{msg}");

        let err = dir
            .key_material(None, Some("not a key!"))
            .expect_err("garbage");
        let msg = err.to_string();
        assert!(msg.contains("PLANGATE_SIGNING_KEY"), "{msg}");
        assert!(!msg.contains("not a key!"), "{msg}");

        let err = dir.key_material(Some(""), None).expect_err("empty");
        assert!(err.to_string().contains("PLANGATE_SEAL_KEY"));
    }

    #[test]
    fn a_damaged_key_file_is_an_error_not_a_new_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = DataDir::open(tmp.path()).expect("open");
        fs::write(dir.path().join("seal.key"), "abcd\n").expect("write");
        let err = dir.key_material(None, None).expect_err("damaged");
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
}
