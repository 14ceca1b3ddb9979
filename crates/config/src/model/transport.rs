//! How to reach an upstream ([`Transport`]), and how it is shown: its
//! env values, headers and secret-looking arguments are never printed or
//! serialized. Apart from the upstream's settings because the redaction
//! is its own concern, with its own tests.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use plangate_core::{REDACTED, is_secret_key};
use serde::Serialize;

/// How to reach an upstream. Env and header values may hold secrets, so
/// `Debug` and `Serialize` show them as `"[redacted]"` (see
/// [`Transport::redacted`]); read the fields to get the real values.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP over stdin/stdout.
    Stdio {
        /// The program; looked up on `PATH` when not a path.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to the child's environment.
        env: BTreeMap<String, String>,
        /// Its working directory, absolute when the config file's path was;
        /// `None`: plangate's own.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint, `http://` or `https://`.
        url: String,
        /// Headers sent with every request (typically `Authorization`).
        headers: BTreeMap<String, String>,
        /// A PEM file of extra CA certificates trusted for this upstream
        /// besides the system's (a self-hosted server with a private CA);
        /// absolute when the config file's path was. Only the path is
        /// checked here: the gateway reads the file when it builds the
        /// upstream's HTTP client.
        ca_file: Option<PathBuf>,
    },
}

impl Transport {
    /// The `trust_annotations` default for this transport (docs/design.md §3): a
    /// local process already runs with the user's permissions, so its
    /// annotations are trusted; a remote server's are not.
    pub fn default_trust_annotations(&self) -> bool {
        matches!(self, Transport::Stdio { .. })
    }

    /// `"stdio"` or `"http"`, for tables and messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }

    /// A copy safe to log or print: every env and header value becomes
    /// `"[redacted]"`, as do URL passwords, URL query values and
    /// `--flag value` / `--flag=value` arguments whose name looks like a
    /// secret (the words of [`plangate_core::is_secret_key`]).
    pub fn redacted(&self) -> Transport {
        let hide = |map: &BTreeMap<String, String>| {
            map.keys()
                .map(|k| (k.clone(), REDACTED.to_owned()))
                .collect()
        };
        match self {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => Transport::Stdio {
                command: command.clone(),
                args: redact_args(args),
                env: hide(env),
                cwd: cwd.clone(),
            },
            Transport::Http {
                url,
                headers,
                ca_file,
            } => Transport::Http {
                url: redact_url(url),
                headers: hide(headers),
                ca_file: ca_file.clone(),
            },
        }
    }
}

/// The shape `Debug` and `Serialize` show; built from [`Transport::redacted`]
/// only, so neither can leak a secret.
#[derive(Debug, Serialize)]
#[serde(tag = "transport", rename_all = "lowercase")]
enum TransportView<'a> {
    Stdio {
        command: &'a str,
        args: &'a [String],
        env: &'a BTreeMap<String, String>,
        cwd: &'a Option<PathBuf>,
    },
    Http {
        url: &'a str,
        headers: &'a BTreeMap<String, String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        ca_file: &'a Option<PathBuf>,
    },
}

impl<'a> From<&'a Transport> for TransportView<'a> {
    fn from(t: &'a Transport) -> Self {
        match t {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => TransportView::Stdio {
                command,
                args,
                env,
                cwd,
            },
            Transport::Http {
                url,
                headers,
                ca_file,
            } => TransportView::Http {
                url,
                headers,
                ca_file,
            },
        }
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = self.redacted();
        let view = TransportView::from(&redacted);
        match view {
            TransportView::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", &command)
                .field("args", &args)
                .field("env", env)
                .field("cwd", cwd)
                .finish(),
            TransportView::Http {
                url,
                headers,
                ca_file,
            } => f
                .debug_struct("Http")
                .field("url", &url)
                .field("headers", headers)
                .field("ca_file", ca_file)
                .finish(),
        }
    }
}

impl Serialize for Transport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let redacted = self.redacted();
        TransportView::from(&redacted).serialize(s)
    }
}

/// `--token X` and `--api-key=X` style arguments with the value hidden.
fn redact_args(args: &[String]) -> Vec<String> {
    let flag_name = |a: &str| {
        a.strip_prefix("--")
            .or_else(|| a.strip_prefix('-'))
            .map(str::to_owned)
    };
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push(REDACTED.to_owned());
            hide_next = false;
            continue;
        }
        match arg.split_once('=') {
            Some((flag, _)) if flag_name(flag).is_some_and(|n| is_secret_key(&n)) => {
                out.push(format!("{flag}={REDACTED}"));
            }
            Some(_) => out.push(arg.clone()),
            None => {
                hide_next = flag_name(arg).is_some_and(|n| is_secret_key(&n));
                out.push(arg.clone());
            }
        }
    }
    out
}

/// The URL with any userinfo password and secret-looking query values hidden.
fn redact_url(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    format!("{scheme}://{user}:{REDACTED}@{host}{path}")
                }
                None => base.to_owned(),
            }
        }
        None => base.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret_key(k) => format!("{k}={REDACTED}"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&pairs.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(args: &[&str]) -> Transport {
        Transport::Stdio {
            command: "node".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::from([("API_TOKEN".into(), "tok-123".into())]),
            cwd: None,
        }
    }

    #[test]
    fn debug_and_json_never_show_env_or_header_values() {
        let t = stdio(&[
            "server.js",
            "--api-key",
            "k-1",
            "--token=t-2",
            "--port",
            "80",
        ]);
        let debug = format!("{t:?}");
        let json = serde_json::to_string(&t).unwrap();
        for shown in [&debug, &json] {
            for secret in ["tok-123", "k-1", "t-2"] {
                assert!(!shown.contains(secret), "{secret} leaked: {shown}");
            }
            assert!(
                shown.contains("API_TOKEN") && shown.contains("80"),
                "{shown}"
            );
        }
        let h = Transport::Http {
            url: "https://u:pw@example.com/mcp?api_key=abc&x=1".into(),
            headers: BTreeMap::from([("Authorization".into(), "Bearer zzz".into())]),
            ca_file: None,
        };
        let json = serde_json::to_string(&h).unwrap();
        for secret in ["zzz", "pw", "abc"] {
            assert!(!json.contains(secret), "{secret} leaked: {json}");
        }
        assert!(json.contains("https://u:[redacted]@example.com/mcp?api_key=[redacted]&x=1"));
        assert!(!format!("{h:?}").contains("zzz"));
    }
}
