//! A check shared by the tests of the pages plangate serves (the web
//! console's and the MCP App's plan view): each is one self-contained
//! document that renders text only — no remote resource, inline handler,
//! HTML injection or code from strings — so its CSP can pin exactly what
//! it runs. Test-only; apart so both pages' tests hold the same list.

/// What no page plangate serves may contain (compared lowercased).
const FORBIDDEN: [&str; 15] = [
    "http://",
    "https://",
    "src=",
    "style=\"",
    " onclick",
    " onload",
    " onerror",
    "innerhtml",
    "outerhtml",
    "insertadjacenthtml",
    "document.write",
    "eval(",
    "new function",
    "@import",
    "url(",
];

/// Asserts that `doc` (called `name` when an assertion fails) is an HTML
/// document containing none of [`FORBIDDEN`], nor any of `more` (what a
/// page must not do besides, lowercased).
pub(crate) fn assert_text_only(name: &str, doc: &str, more: &[&str]) {
    let lower = doc.to_lowercase();
    assert!(lower.starts_with("<!doctype html>"), "{name}");
    for forbidden in FORBIDDEN.iter().chain(more) {
        assert!(!lower.contains(forbidden), "{name} contains {forbidden:?}");
    }
}
