//! Environment variables, read through a small trait so that tests pass a
//! map and never depend on (or change) the process environment, and the
//! `${…}` expansion applied to every string value of an upstream.
//!
//! # Syntax
//!
//! * `${VAR}` and `${env:VAR}` — the value of `VAR`. An unset variable is an
//!   error, never an empty string.
//! * `${VAR:-default}` and `${env:VAR:-default}` — `default` when `VAR` is
//!   unset or empty (the form Claude Code writes in `.mcp.json`).
//! * `$${` — a literal `${`. Any other `$` is literal (`$HOME`, `$$`, `a$b`).
//! * `${input:NAME}` (VS Code prompts) and other `${kind:…}` forms are errors:
//!   plangate runs unattended and cannot prompt.
//!
//! Variable names are ASCII letters, digits and `_`, not starting with a
//! digit.

use std::collections::HashMap;

/// Where variables come from. The gateway passes [`ProcessEnv`]; tests pass a
/// `HashMap`, so config loading is a pure function of its inputs.
pub trait Env {
    /// The value of `name`, or `None` when it is unset (or not valid UTF-8,
    /// which plangate treats the same way).
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment, through [`std::env::var`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl Env for HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

impl Env for std::collections::BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// VS Code's own predefined variables: named in the message when one shows up
/// unset, because the user most likely copied a VS Code file.
const VSCODE_VARIABLES: [&str; 7] = [
    "workspaceFolder",
    "workspaceFolderBasename",
    "userHome",
    "pathSeparator",
    "cwd",
    "file",
    "fileDirname",
];

/// Expands every `${…}` in `input`. Returns every problem in the string (as
/// lowercase messages) rather than stopping at the first.
pub(crate) fn expand(input: &str, env: &dyn Env) -> Result<String, Vec<String>> {
    let mut out = String::with_capacity(input.len());
    let mut errors = Vec::new();
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let Some(end) = after.find('}') else {
                errors.push(format!(
                    "unterminated variable {tail:?}: close it with '}}', or write $${{ for a literal ${{"
                ));
                rest = "";
                break;
            };
            let expr = &after[..end];
            match lookup(expr, env) {
                Ok(value) => out.push_str(&value),
                Err(message) => errors.push(message),
            }
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// The value of one `${expr}` (without the braces).
fn lookup(expr: &str, env: &dyn Env) -> Result<String, String> {
    let (head, default) = match expr.split_once(":-") {
        Some((head, default)) => (head, Some(default)),
        None => (expr, None),
    };
    let name = match head.split_once(':') {
        None => head,
        Some(("env", name)) => name,
        Some(("input", name)) => {
            return Err(format!(
                "input variable ${{{expr}}} is not supported: plangate cannot prompt for {name:?}; use ${{env:VAR}} and set VAR in plangate's environment"
            ));
        }
        Some((kind, _)) => {
            return Err(format!(
                "variable ${{{expr}}} is not supported: {kind:?} variables are not expanded; use ${{VAR}} or ${{env:VAR}}"
            ));
        }
    };
    if !is_var_name(name) {
        return Err(format!(
            "variable name {name:?} in ${{{expr}}} is not valid: use ASCII letters, digits and '_', not starting with a digit"
        ));
    }
    match (env.var(name), default) {
        (Some(value), Some(default)) if value.is_empty() => Ok(default.to_owned()),
        (Some(value), _) => Ok(value),
        (None, Some(default)) => Ok(default.to_owned()),
        (None, None) if VSCODE_VARIABLES.contains(&name) => Err(format!(
            "environment variable {name:?} is not set (used as ${{{expr}}}); VS Code's own variables are not expanded, so write the value itself or set {name} in plangate's environment"
        )),
        (None, None) => Err(format!(
            "environment variable {name:?} is not set (used as ${{{expr}}}); set it, give a default with ${{{name}:-default}}, or write $${{ for a literal ${{"
        )),
    }
}

/// The variables `input` uses that are unset and have no default: what
/// makes an upstream *down* rather than the config wrong (a secret not
/// exported in this shell is the user's to set; the other upstreams
/// serve meanwhile).
pub(crate) fn unset_variables(input: &str, env: &dyn Env) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${")
            && let Some(end) = after.find('}')
        {
            let expr = &after[..end];
            let name = expr.strip_prefix("env:").unwrap_or(expr);
            if is_var_name(name) && env.var(name).is_none() && !out.iter().any(|n| n == name) {
                out.push(name.to_owned());
            }
            rest = &after[end + 1..];
        } else {
            rest = &tail[1..];
        }
    }
    out
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> HashMap<String, String> {
        HashMap::from([
            ("TOKEN".to_owned(), "s3cret".to_owned()),
            ("EMPTY".to_owned(), String::new()),
            ("HOME".to_owned(), "/home/u".to_owned()),
        ])
    }

    #[test]
    fn both_forms_expand_anywhere_in_a_string() {
        assert_eq!(
            expand("Bearer ${TOKEN}", &env()),
            Ok("Bearer s3cret".to_owned())
        );
        assert_eq!(
            expand("${env:HOME}/x:${TOKEN}", &env()),
            Ok("/home/u/x:s3cret".to_owned())
        );
    }

    #[test]
    fn an_unset_variable_is_an_error_never_empty() {
        let errs = expand("a ${NOPE} b ${env:ALSO_NOPE}", &env()).unwrap_err();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("\"NOPE\" is not set"), "{errs:?}");
        assert!(errs[1].contains("\"ALSO_NOPE\" is not set"), "{errs:?}");
    }

    #[test]
    fn a_set_but_empty_variable_is_used_as_is() {
        assert_eq!(expand("[${EMPTY}]", &env()), Ok("[]".to_owned()));
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(expand("${NOPE:-x}", &env()), Ok("x".to_owned()));
        assert_eq!(expand("${env:EMPTY:-y}", &env()), Ok("y".to_owned()));
        assert_eq!(expand("${TOKEN:-z}", &env()), Ok("s3cret".to_owned()));
    }

    #[test]
    fn dollar_dollar_brace_is_a_literal_and_other_dollars_stay() {
        assert_eq!(
            expand("$${TOKEN} $HOME $$ a$ ${TOKEN}", &env()),
            Ok("${TOKEN} $HOME $$ a$ s3cret".to_owned())
        );
    }

    #[test]
    fn input_and_other_kinds_are_rejected() {
        let errs = expand("${input:apiKey}", &env()).unwrap_err();
        assert!(errs[0].contains("input variable"), "{errs:?}");
        assert!(errs[0].contains("${env:VAR}"), "{errs:?}");
        let errs = expand("${config:x}", &env()).unwrap_err();
        assert!(errs[0].contains("not supported"), "{errs:?}");
    }

    #[test]
    fn unterminated_and_bad_names_are_rejected() {
        assert!(expand("${TOKEN", &env()).unwrap_err()[0].contains("unterminated"));
        assert!(expand("${1X}", &env()).unwrap_err()[0].contains("not valid"));
        assert!(expand("${}", &env()).unwrap_err()[0].contains("not valid"));
    }

    #[test]
    fn vs_code_variables_get_a_hint() {
        let errs = expand("${workspaceFolder}/x", &env()).unwrap_err();
        assert!(errs[0].contains("VS Code"), "{errs:?}");
    }

    #[test]
    fn process_env_reads_the_real_environment() {
        // PATH is set in every environment the tests run in.
        assert!(ProcessEnv.var("PATH").is_some());
        assert!(ProcessEnv.var("PLANGATE_SURELY_UNSET_VARIABLE_X").is_none());
    }
}
