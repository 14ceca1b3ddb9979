//! Taking a step's preview with the upstream's own tools, as a profile says
//! ([`plangate_config::profiles::PreviewSpec`]): read the target (or run
//! the server's own dry run), hash what was read, and show the person a
//! diff or the state — scrubbed of secrets, cut at `[gateway]
//! max_preview_bytes`. Apply reads the target again the same way and runs
//! the step only if the hash is the one approved ([`still_as_seen`]).
//!
//! plangate never reads a target itself: the server may be remote or
//! sandboxed, and only its own tools see what it sees.

use plangate_config::profiles::{PreviewKind, PreviewSpec, read_arguments, select};
use plangate_core::{Before, Preview, before_digest, unified_diff};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::{CatalogTool, Gateway};

/// What the target was, as its read answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// The read said it does not exist (`missing`).
    Missing,
    /// Its text.
    Text(String),
    /// Its structured state.
    State(Value),
}

impl Seen {
    /// The digest the step binds (see [`plangate_core::before_digest`]).
    pub fn digest(&self) -> String {
        before_digest(&match self {
            Seen::Missing => Before::Missing,
            Seen::Text(t) => Before::Text(t),
            Seen::State(s) => Before::State(s),
        })
    }
}

/// A result's text: the first embedded text resource (a file's contents,
/// as GitHub's server answers), else `structuredContent.content` when it
/// is a string, else its text blocks joined.
fn text_of(result: &CallToolResult) -> String {
    let embedded = result
        .content
        .iter()
        .find_map(|c| match &c.as_resource()?.resource {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => Some(text.clone()),
            _ => None,
        });
    if let Some(text) = embedded {
        return text;
    }
    if let Some(Value::String(s)) = result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("content"))
    {
        return s.clone();
    }
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `tool` on `upstream` with `arguments`.
async fn call(
    gw: &Gateway,
    upstream: &str,
    tool: &str,
    arguments: Map<String, Value>,
) -> Result<CallToolResult, String> {
    let up = gw
        .upstream(upstream)
        .ok_or_else(|| format!("upstream {upstream} is not connected"))?;
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = Some(arguments);
    let never = CancellationToken::new();
    up.call(gw.metrics(), params, None, &never)
        .await
        .map_err(|e| format!("{tool} failed: {e}"))
}

/// Reads the target of a call with `real_args` as `spec` says.
pub async fn read(
    gw: &Gateway,
    upstream: &str,
    spec: &PreviewSpec,
    real_args: &Value,
) -> Result<Seen, String> {
    let result = call(gw, upstream, &spec.read, read_arguments(spec, real_args)).await?;
    if result.is_error == Some(true) {
        let text = text_of(&result);
        return match &spec.missing {
            Some(m) if text.contains(m.as_str()) => Ok(Seen::Missing),
            _ => Err(format!("{} answered an error: {text}", spec.read)),
        };
    }
    let keep = |text: String| -> String {
        if spec.ignore_lines.is_empty() {
            return text;
        }
        text.lines()
            .filter(|l| !spec.ignore_lines.iter().any(|p| l.starts_with(p.as_str())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match spec.kind {
        PreviewKind::Diff => Seen::Text(keep(text_of(&result))),
        PreviewKind::State => match (&result.structured_content, spec.ignore_lines.is_empty()) {
            (Some(state), true) => Seen::State(state.clone()),
            _ => Seen::State(Value::String(keep(text_of(&result)))),
        },
    })
}

/// The preview of a call of `tool` with `real_args` (secrets in the
/// clear: the upstream needs them), shown with `secrets` scrubbed.
/// `target` names what changes. Never fails: a preview that cannot be
/// taken says why.
pub async fn take(
    gw: &Gateway,
    tool: &CatalogTool,
    spec: &PreviewSpec,
    real_args: &Value,
    secrets: &[(String, Value)],
    target: Option<String>,
) -> Preview {
    let redactor = gw.redactor();
    let scrub = |t: &str| redactor.scrub_text(t, secrets);
    let cap = gw.config().gateway.max_preview_bytes;
    let label = target.clone().unwrap_or_else(|| tool.original.clone());
    let unavailable = |reason: String| Preview::Unavailable {
        target: target.clone(),
        reason: scrub(&reason),
    };
    let seen = match read(gw, &tool.upstream, spec, real_args).await {
        Ok(seen) => seen,
        Err(reason) => return unavailable(reason),
    };
    let before_digest = seen.digest();
    match spec.kind {
        PreviewKind::Diff => {
            let before = match &seen {
                Seen::Missing => None,
                Seen::Text(t) => Some(t.as_str()),
                Seen::State(_) => return unavailable("the read answered no text".to_owned()),
            };
            // A diff the server wrote itself, counted and cut here.
            let server_diff = |text: &str, creates: bool| {
                let diff = strip_fences(text);
                let added = count_lines(&diff, '+');
                let removed = count_lines(&diff, '-');
                let (diff, truncated) = plangate_core::preview::cut(scrub(&diff), cap);
                Preview::Diff {
                    target: label.clone(),
                    before_digest: before_digest.clone(),
                    diff,
                    creates,
                    added,
                    removed,
                    truncated,
                }
            };
            if spec.read_is_diff {
                // The read itself shows what the write would do.
                return server_diff(before.unwrap_or(""), false);
            }
            if let Some(extra) = &spec.dry_run {
                // The server's own dry run: the tool itself, told not to
                // write, answers the diff.
                let mut args = real_args.as_object().cloned().unwrap_or_default();
                args.extend(extra.clone());
                let result = match call(gw, &tool.upstream, &tool.original, args).await {
                    Ok(r) if r.is_error != Some(true) => r,
                    Ok(r) => {
                        return unavailable(format!(
                            "its dry run answered an error: {}",
                            text_of(&r)
                        ));
                    }
                    Err(e) => return unavailable(e),
                };
                return server_diff(&text_of(&result), before.is_none());
            }
            let after = match spec.text.as_deref() {
                Some("=") => Some(""),
                Some(p) => select(real_args, p).first().and_then(|v| v.as_str()),
                None => None,
            };
            let Some(after) = after else {
                return unavailable("the call carries no new text to compare".to_owned());
            };
            let (diff, added, removed, truncated) = unified_diff(before, after, &label, usize::MAX);
            let (diff, cut) = plangate_core::preview::cut(scrub(&diff), cap);
            Preview::Diff {
                target: label,
                before_digest,
                diff,
                creates: before.is_none(),
                added,
                removed,
                truncated: truncated || cut,
            }
        }
        PreviewKind::State => {
            let (summary, state) = match &seen {
                Seen::Missing => ("does not exist yet".to_owned(), Value::Null),
                Seen::Text(t) => ("exists".to_owned(), Value::String(t.clone())),
                Seen::State(s) => {
                    let summary = match (&spec.count, &spec.summary) {
                        (Some(p), Some(template)) => {
                            let n = select(s, p)
                                .first()
                                .and_then(|v| v.as_array())
                                .map_or(0, Vec::len);
                            template.replace("{count}", &n.to_string())
                        }
                        _ => "exists".to_owned(),
                    };
                    (summary, s.clone())
                }
            };
            let state = match state {
                Value::String(t) => Value::String(scrub(&t)),
                other => redactor.split(&other).0,
            };
            let (state, summary) = if state.to_string().len() > cap {
                (
                    Value::Null,
                    format!("{summary} (its state is over max_preview_bytes, not shown)"),
                )
            } else {
                (state, summary)
            };
            Preview::State {
                target: label,
                before_digest,
                summary,
                state,
            }
        }
    }
}

/// Whether the target of a step is still as its preview saw it: `Ok` when
/// the digest matches, else why not, for a `stale_target` failure.
pub async fn still_as_seen(
    gw: &Gateway,
    upstream: &str,
    spec: &PreviewSpec,
    real_args: &Value,
    planned: &str,
) -> Result<(), String> {
    let seen = read(gw, upstream, spec, real_args)
        .await
        .map_err(|e| format!("the target could not be read to check it ({e})"))?;
    let now = seen.digest();
    if now == planned {
        return Ok(());
    }
    Err(match seen {
        Seen::Missing => "the target no longer exists".to_owned(),
        _ => format!(
            "the target changed since the plan was reviewed (digest {} then, {} now)",
            plangate_core::preview::short_digest(planned),
            plangate_core::preview::short_digest(&now)
        ),
    })
}

/// A diff without the Markdown fences a server may wrap it in.
fn strip_fences(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .trim_end()
        .to_owned()
        + "\n"
}

/// Lines of a unified diff starting with `sign` (not its `---`/`+++`
/// header).
fn count_lines(diff: &str, sign: char) -> u32 {
    let header = format!("{sign}{sign}{sign}");
    diff.lines()
        .filter(|l| l.starts_with(sign) && !l.starts_with(&header))
        .count()
        .try_into()
        .unwrap_or(u32::MAX)
}

/// The profile's preview of `tool`, unless the operator configured a
/// preview tool of their own for it (theirs wins).
pub fn spec_of<'t>(gw: &Gateway, tool: &'t CatalogTool) -> Option<&'t PreviewSpec> {
    let configured = gw
        .config()
        .tool_settings(&tool.upstream, &tool.original)
        .is_some_and(|s| s.preview.is_some());
    if configured {
        return None;
    }
    tool.profile
        .as_deref()
        .and_then(|m| m.tool.preview.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_diff_is_unwrapped_and_counted() {
        let text = "```diff\nIndex: a\n===\n--- a\toriginal\n+++ a\tmodified\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n```\n\n";
        let diff = strip_fences(text);
        assert!(diff.starts_with("Index: a\n"), "{diff}");
        assert!(!diff.contains("```"));
        assert_eq!((count_lines(&diff, '+'), count_lines(&diff, '-')), (1, 1));
    }
}
