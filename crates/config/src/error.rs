//! Config errors: every mistake in a file, each with the file, the key path
//! and a message naming the value at fault and what is allowed.

use std::fmt;
use std::path::PathBuf;

/// One mistake in a config file.
///
/// Kept as plain data (not an enum) because callers only ever show it, and a
/// `--json` check wants the same three fields for every kind of mistake.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    /// The file the mistake is in, as it was given.
    pub file: PathBuf,
    /// Dotted key path to the value at fault, like `upstreams.site.command`
    /// or `mcpServers.fs.args[1]`; empty when the whole file is at fault
    /// (a syntax error).
    pub key: String,
    /// Lowercase, one line: the value at fault and what is allowed.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// Every mistake found in a config file, so an operator fixes them all in
/// one pass instead of one per restart. Never empty when returned as an
/// error.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The number of mistakes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (never true for a returned error).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mistakes, in the order they were found.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// A single mistake that stops the whole file, such as a file that cannot
    /// be read or parsed.
    pub(crate) fn single(
        file: PathBuf,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigErrors(vec![ConfigError {
            file,
            key: key.into(),
            message: message.into(),
        }])
    }
}

impl fmt::Display for ConfigErrors {
    /// One line per mistake, then the count:
    ///
    /// ```text
    /// plangate.toml: gateway.anonymous: anonymous "public" is not allowed: use "none" or "read"
    /// plangate.toml: upstreams.site.comand: unknown key "comand": allowed keys are ...
    /// 2 errors in configuration
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.0 {
            writeln!(f, "{e}")?;
        }
        let n = self.0.len();
        write!(
            f,
            "{n} {} in configuration",
            if n == 1 { "error" } else { "errors" }
        )
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
