//! Taking a step's preview with the upstream's own tools, as a profile says
//! ([`plangate_config::profiles::PreviewSpec`]): read the target (or run
//! the server's own dry run), hash what was read, and show the person a
//! diff or the state — scrubbed of secrets, cut at `[gateway]
//! max_preview_bytes`. Apply reads the target again the same way and runs
//! the step only if the hash is the one approved ([`still_as_seen`]).
//!
//! plangate never reads a target itself: the server may be remote or
//! sandboxed, and only its own tools see what it sees.
//!
//! **A preview is a read by the caller** ([`access`]): the read is decided
//! exactly as if the key had made it. A read tool that is disabled,
//! quarantined or not a read is never called (the step says why); when a
//! rule refuses the key that read, the preview is taken for the person
//! only — the step binds its digest, keyed so it is no oracle, and every
//! answer the agent can read says `preview withheld`.

use plangate_config::profiles::{PreviewKind, PreviewSpec, read_arguments, select};
use plangate_core::{Before, Preview, bound_digest, unified_diff};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Map, Value};

use crate::{CatalogTool, Ops};

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
    /// The digest the step binds ([`plangate_core::bound_digest`]): of
    /// what was read, where it is (`at`), keyed under `key` when withheld.
    pub fn digest(&self, bind: &Bind) -> String {
        let before = match self {
            Seen::Missing => Before::Missing,
            Seen::Text(t) => Before::Text(t),
            Seen::State(s) => Before::State(s),
        };
        bound_digest(&before, &bind.at, bind.key.as_ref())
    }
}

impl From<&Seen> for plangate_core::undo::KeptState {
    fn from(seen: &Seen) -> Self {
        use plangate_core::undo::KeptState;
        match seen {
            Seen::Missing => KeptState::Missing,
            Seen::Text(text) => KeptState::Text { text: text.clone() },
            Seen::State(state) => KeptState::State {
                state: state.clone(),
            },
        }
    }
}

/// A target no longer as a step's digest bound it: why, in words, and
/// what the read found now (when it could read).
#[derive(Debug)]
pub struct Moved {
    /// Why, for a `stale_target` failure.
    pub why: String,
    /// The target now.
    pub now: Option<Seen>,
}

/// What a step's before-digest binds besides what was read.
#[derive(Debug, Clone, Default)]
pub struct Bind {
    /// Where the write acts, placed on this machine ([`placed_at`]).
    pub at: Vec<String>,
    /// The signing key, when the preview is withheld from the agent.
    pub key: Option<[u8; 32]>,
}

/// The paths a write acts on, placed where the server will act on them
/// (symlinks followed, Unicode spellings mapped): for a local upstream
/// only, where they name files on this machine; a path that cannot be
/// placed is bound as the reason it cannot. What a step's before-digest
/// binds, so a target swapped for a link to another file is stale.
pub async fn placed_at(gw: Ops<'_>, tool: &CatalogTool, real_args: &Value) -> Vec<String> {
    let config = gw.config();
    if !crate::policy::is_local(&config, &tool.upstream) {
        return Vec::new();
    }
    let paths =
        crate::policy::call_paths(Some(gw), &config, &tool.upstream, &tool.paths, real_args).await;
    paths
        .values
        .iter()
        .map(|v| match paths.resolver.resolve(v) {
            Ok(at) => at,
            Err(why) => format!("unplaced: {why}"),
        })
        .collect()
}

/// Whether the key may read what a preview reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// It may: the agent sees the preview.
    Read,
    /// A rule refuses the key that read (why): the preview is for the
    /// person only.
    Withheld(String),
    /// The read is never made (why): the tool is not offered, disabled,
    /// quarantined or not a read.
    Never(String),
}

/// Whether the key `acting` may make `tool`'s upstream's read `read` with
/// `read_args` in `mode`, decided as dispatch decides its own call of it:
/// the tool offered, enabled, not withheld, a read, and no rule keeping it
/// from the key.
pub async fn access(
    gw: Ops<'_>,
    acting: &crate::acting::Acting,
    mode: &plangate_core::ModeSpec,
    upstream: &str,
    read: &str,
    read_args: &Value,
) -> Access {
    let catalog = gw.catalog();
    let Some(reader) = catalog
        .tools
        .iter()
        .find(|t| t.upstream == upstream && t.original == read)
    else {
        return Access::Never(format!("its read {read} is not offered by {upstream}"));
    };
    if !reader.enabled {
        return Access::Never(format!(
            "its read {} is disabled in plangate's config",
            reader.exposed
        ));
    }
    if let Some(why) = &reader.withheld {
        return Access::Never(format!(
            "its read {} is not offered: {}",
            reader.exposed,
            why.label().trim_start_matches("no (").trim_end_matches(')')
        ));
    }
    if reader.effect > plangate_core::Effect::Read {
        return Access::Never(format!(
            "{} is classed {}, not a read, so it is not called to preview",
            reader.exposed, reader.effect
        ));
    }
    let policy = gw.policy();
    let ruled = !policy.is_empty()
        && policy.may_decide(&plangate_policy::Tool {
            upstream: &reader.upstream,
            tool: &reader.original,
            exposed: &reader.exposed,
            effect: reader.effect,
        });
    if !ruled {
        return Access::Read;
    }
    let config = gw.config();
    let paths =
        crate::policy::call_paths(Some(gw), &config, upstream, &reader.paths, read_args).await;
    let undeclared = plangate_core::undeclared(&reader.tool.input_schema, read_args).allowed;
    let who = crate::policy::Who {
        name: &acting.key.name,
        scope: acting.key.scope.as_str(),
    };
    let matched = crate::policy::judge(
        &policy,
        reader.into(),
        reader.effect,
        who,
        &mode.name,
        read_args,
        &undeclared,
        &paths,
    );
    let decision = plangate_policy::decision(
        matched.as_ref().map(|m| m.outcome),
        reader.effect,
        acting.key.scope,
        mode,
        false,
    );
    match (decision, matched) {
        (plangate_core::Decision::Run, _) => Access::Read,
        (_, Some(m)) => Access::Withheld(format!(
            "the operator's rule {:?} does not let this key read the target with {}",
            m.rule, reader.exposed
        )),
        (_, None) => Access::Withheld(format!(
            "this key may not read the target with {}",
            reader.exposed
        )),
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
    gw: Ops<'_>,
    upstream: &str,
    tool: &str,
    arguments: Map<String, Value>,
) -> Result<CallToolResult, String> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = Some(arguments);
    gw.read(upstream, params)
        .await
        .ok_or_else(|| format!("upstream {upstream} is not connected"))?
        .map_err(|e| format!("{tool} failed: {e}"))
}

/// Reads the target of a call with `real_args` as `spec` says.
pub async fn read(
    gw: Ops<'_>,
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

/// Why a call is not planned: the server's own dry run of it answered an
/// error (an edit whose text is not in the file) — the server's words,
/// scrubbed. A step that cannot succeed is no question for a person.
#[derive(Debug, Clone)]
pub struct DryRunFailed(pub String);

/// The preview of a call of `tool` with `real_args` (secrets in the
/// clear: the upstream needs them), shown with `secrets` scrubbed.
/// `target` names what changes. A preview that cannot be taken says why;
/// the one failure is the server's dry run refusing the call
/// ([`DryRunFailed`]).
pub async fn take(
    gw: Ops<'_>,
    tool: &CatalogTool,
    spec: &PreviewSpec,
    real_args: &Value,
    secrets: &[(String, Value)],
    target: Option<String>,
    bind: &Bind,
) -> Result<Preview, DryRunFailed> {
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
        Err(reason) => return Ok(unavailable(reason)),
    };
    let before_digest = seen.digest(bind);
    match spec.kind {
        PreviewKind::Diff => {
            let before = match &seen {
                Seen::Missing => None,
                Seen::Text(t) => Some(t.as_str()),
                Seen::State(_) => return Ok(unavailable("the read answered no text".to_owned())),
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
                return Ok(server_diff(before.unwrap_or(""), false));
            }
            if let Some(extra) = &spec.dry_run {
                // The server's own dry run: the tool itself, told not to
                // write, answers the diff.
                let mut args = real_args.as_object().cloned().unwrap_or_default();
                args.extend(extra.clone());
                let result = match call(gw, &tool.upstream, &tool.original, args).await {
                    Ok(r) if r.is_error != Some(true) => r,
                    Ok(r) => return Err(DryRunFailed(scrub(&text_of(&r)))),
                    Err(e) => return Ok(unavailable(e)),
                };
                return Ok(server_diff(&text_of(&result), before.is_none()));
            }
            let after = match spec.text.as_deref() {
                Some("=") => Some(""),
                Some(p) => select(real_args, p).first().and_then(|v| v.as_str()),
                None => None,
            };
            let Some(after) = after else {
                return Ok(unavailable(
                    "the call carries no new text to compare".to_owned(),
                ));
            };
            let (diff, added, removed, truncated) = unified_diff(before, after, &label, usize::MAX);
            let (diff, cut) = plangate_core::preview::cut(scrub(&diff), cap);
            Ok(Preview::Diff {
                target: label,
                before_digest,
                diff,
                creates: before.is_none(),
                added,
                removed,
                truncated: truncated || cut,
            })
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
            Ok(Preview::State {
                target: label,
                before_digest,
                summary,
                state,
            })
        }
    }
}

/// Whether the target of a step is still as its preview saw it — the same
/// content, at the same place: `Ok` with what was read and what its digest
/// bound (the state the step is about to replace, for an undo) when the
/// digest matches, else why not, for a `stale_target` failure. A digest
/// keyed when planned (a withheld preview) is taken keyed again.
pub async fn still_as_seen(
    gw: Ops<'_>,
    tool: &CatalogTool,
    spec: &PreviewSpec,
    real_args: &Value,
    planned: &str,
) -> Result<(Seen, Bind), Moved> {
    let seen = read(gw, &tool.upstream, spec, real_args)
        .await
        .map_err(|e| Moved {
            why: format!("the target could not be read to check it ({e})"),
            now: None,
        })?;
    let bind = Bind {
        at: placed_at(gw, tool, real_args).await,
        key: planned
            .starts_with(plangate_core::HMAC_PREFIX)
            .then(|| *gw.material().signing_key()),
    };
    let now = seen.digest(&bind);
    if now == planned {
        return Ok((seen, bind));
    }
    let why = match seen {
        Seen::Missing => "the target no longer exists".to_owned(),
        _ => format!(
            "the target changed since the plan was reviewed (digest {} then, {} now)",
            plangate_core::preview::short_digest(planned),
            plangate_core::preview::short_digest(&now)
        ),
    };
    Err(Moved {
        why,
        now: Some(seen),
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
pub fn spec_of<'t>(gw: Ops<'_>, tool: &'t CatalogTool) -> Option<&'t PreviewSpec> {
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
