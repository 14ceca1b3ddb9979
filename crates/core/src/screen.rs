//! What a person reads: text that came from an agent or an upstream,
//! neutralised so that the screen shows exactly what runs.
//!
//! A terminal interprets control characters and escape sequences: a
//! carriage return and `ESC [2K` erase what was printed before them, so
//! `admins: [root, mallory]\r\e[2K admins: [root]` reads as an unchanged
//! line, and `ESC ] 52 ; c ; … BEL` writes the clipboard in terminals that
//! allow it. A browser or a client's dialog does not interpret those, but
//! it does obey the Unicode bidirectional controls (U+202E turns
//! `txt.exe` into what reads as `exe.txt`) and draws nothing for the
//! zero-width and other format characters, so two different texts look
//! the same. Every place where a person reads such text — the CLI, the
//! web console, the question in the agent's client, the MCP Apps view —
//! shows it through this one rule (the two pages carry the same rule in
//! their JavaScript; docs/architecture.md, "Where each rule lives"; the
//! README's "Hidden characters" for the person):
//!
//! * **Hidden characters**: every C0 control but TAB (U+0000–U+001F, so
//!   also LF and CR), DEL (U+007F), every C1 control (U+0080–U+009F), the
//!   line and paragraph separators U+2028 and U+2029, and every character
//!   of the Unicode general category `Cf` (format) — which holds every
//!   bidirectional control (U+061C, U+200E–U+200F, U+202A–U+202E,
//!   U+2066–U+2069), the zero-width characters (U+200B–U+200D, U+2060,
//!   U+FEFF), the soft hyphen U+00AD, the invisible operators
//!   (U+2061–U+2064) and the tag characters (U+E0001, U+E0020–U+E007F,
//!   which can spell hidden text). The one exception is U+200D ZERO WIDTH
//!   JOINER between two pictographs (emoji blocks: U+2300–U+23FF,
//!   U+2600–U+27BF, U+2B00–U+2BFF, U+1F000–U+1FAFF, a U+FE0F or a skin tone
//!   after the first allowed), where it joins an emoji (woman, joiner, laptop: a
//!   woman technologist) and hides nothing.
//! * **How they show**: as escapes a person can read — `\n`, `\r`, `\e`
//!   (ESC), else `\u{…}` with the code point in lowercase hex (`\u{7}`,
//!   `\u{9b}`, `\u{202e}`). Everything else — letters of any script
//!   (`café`, `東京`), emoji, TAB — is shown as it is.
//! * **The mark**: a text in which anything was shown as an escape is
//!   marked ([`HIDDEN_MARK`]), so a literal backslash-e typed by someone
//!   never passes for a neutralised ESC, and the person knows to look
//!   closely.
//! * **Lines**: [`screen`] treats its text as one line, so a line break
//!   inside a value (a table cell, a predicted effect) shows as `\n`
//!   instead of forging a line of its own. Text that is made of lines (a
//!   diff, a file's content, the agent's plan) is split at LF by the face
//!   first, and each line screened; the line breaks the output is made of
//!   are the face's own.
//! * **JSON**: [`screen_json`] writes the same hidden characters inside
//!   JSON text as `\uXXXX` escapes (serde_json escapes C0 controls but
//!   writes DEL, C1 and format characters as they are): still valid JSON,
//!   with the same meaning.
//!
//! Pure: text in, text out; the faces add their own colours after
//! screening, so plangate's own painting is never escaped and an
//! upstream's never interpreted.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_general_category::{GeneralCategory, get_general_category};

/// The words that mark a text in which characters were shown as escapes.
pub const HIDDEN_MARK: &str = "contains hidden characters";

/// A text as a person is shown it: hidden characters as escapes, and
/// whether there were any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screened<'a> {
    text: Cow<'a, str>,
    hidden: bool,
}

impl<'a> Screened<'a> {
    /// The text with every hidden character shown as an escape.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether any character was shown as an escape (the text must be
    /// marked).
    pub fn hidden(&self) -> bool {
        self.hidden
    }

    /// The text as a line of plain text: followed by
    /// `  [contains hidden characters]` when it had any.
    pub fn marked(&self) -> Cow<'_, str> {
        if self.hidden {
            Cow::Owned(format!("{}  [{HIDDEN_MARK}]", self.text))
        } else {
            Cow::Borrowed(&self.text)
        }
    }

    /// The text, owned.
    pub fn into_text(self) -> Cow<'a, str> {
        self.text
    }
}

/// `text` as one line a person reads: every hidden character (module
/// docs) shown as an escape, LF included; TAB and everything printable as
/// it is. Screening screened text changes nothing.
pub fn screen(text: &str) -> Screened<'_> {
    if !hidden_chars(text).any(|_| true) {
        return Screened {
            text: Cow::Borrowed(text),
            hidden: false,
        };
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut hidden = hidden_chars(text).peekable();
    for (at, c) in text.char_indices() {
        if hidden.next_if(|&h| h == at).is_some() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\u{1b}' => out.push_str("\\e"),
                c => {
                    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
                }
            }
        } else {
            out.push(c);
        }
    }
    Screened {
        text: Cow::Owned(out),
        hidden: true,
    }
}

/// `text` made of lines (a diff, a file's content): each line screened
/// on its own, the LF between them kept as the line breaks they are.
pub fn screen_lines(text: &str) -> impl Iterator<Item = Screened<'_>> {
    text.split('\n').map(screen)
}

/// JSON text with every hidden character at or above U+0020 written as a
/// `\uXXXX` escape (a pair of them beyond U+FFFF). Such a character can
/// only stand inside a string of JSON text (structure is ASCII), where the
/// escape means the same character; the C0 controls are escaped by any
/// JSON writer already, and the LF between lines of pretty JSON is layout.
pub fn screen_json(json: &str) -> Cow<'_, str> {
    let mut hidden = hidden_chars(json)
        .filter(|&at| json[at..].chars().next().is_some_and(|c| c >= ' '))
        .peekable();
    if hidden.peek().is_none() {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for (at, c) in json.char_indices() {
        if hidden.next_if(|&h| h == at).is_some() {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `text` holds any hidden character (module docs).
pub fn has_hidden(text: &str) -> bool {
    hidden_chars(text).any(|_| true)
}

/// The byte offsets of the hidden characters of `text`, in order.
fn hidden_chars(text: &str) -> impl Iterator<Item = usize> + '_ {
    // The last pictograph seen, and whether only emoji modifiers came
    // after it: a joiner right there, before another pictograph, joins an
    // emoji.
    let mut after_pictograph = false;
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        while let Some((at, c)) = chars.next() {
            let joins = c == ZWJ
                && after_pictograph
                && chars.peek().is_some_and(|&(_, next)| is_pictograph(next));
            after_pictograph = is_pictograph(c) || (after_pictograph && is_emoji_modifier(c));
            if is_hidden(c) && !joins {
                return Some(at);
            }
        }
        None
    })
}

/// U+200D ZERO WIDTH JOINER.
const ZWJ: char = '\u{200d}';

/// Whether `c` is hidden wherever it stands (the module's rule without
/// the joiner's exception).
pub fn is_hidden(c: char) -> bool {
    match c {
        '\t' => false,
        '\0'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' => true,
        c if c.is_ascii() => false,
        c => get_general_category(c) == GeneralCategory::Format,
    }
}

/// The emoji blocks a joiner may stand between.
fn is_pictograph(c: char) -> bool {
    matches!(
        u32::from(c),
        0x2300..=0x23ff | 0x2600..=0x27bf | 0x2b00..=0x2bff | 0x1f000..=0x1faff
    )
}

/// What may follow a pictograph inside one emoji: the emoji presentation
/// selector U+FE0F and the skin tones U+1F3FB–U+1F3FF.
fn is_emoji_modifier(c: char) -> bool {
    c == '\u{fe0f}' || ('\u{1f3fb}'..='\u{1f3ff}').contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> (String, bool) {
        let s = screen(text);
        (s.text().to_owned(), s.hidden())
    }

    #[test]
    fn c0_controls_show_as_escapes_and_tab_stays() {
        assert_eq!(shown("a\rb"), ("a\\rb".into(), true));
        assert_eq!(shown("a\nb"), ("a\\nb".into(), true));
        assert_eq!(
            shown("nul\0bel\u{7}bs\u{8}"),
            ("nul\\u{0}bel\\u{7}bs\\u{8}".into(), true)
        );
        assert_eq!(
            shown("vt\u{b}ff\u{c}us\u{1f}"),
            ("vt\\u{b}ff\\u{c}us\\u{1f}".into(), true)
        );
        assert_eq!(shown("a\tb"), ("a\tb".into(), false));
    }

    #[test]
    fn del_and_c1_controls_show_as_escapes() {
        assert_eq!(shown("x\u{7f}y"), ("x\\u{7f}y".into(), true));
        // CSI and NEL as single C1 code points, which some terminals obey.
        assert_eq!(
            shown("\u{9b}2K\u{85}\u{80}"),
            ("\\u{9b}2K\\u{85}\\u{80}".into(), true)
        );
    }

    #[test]
    fn escape_sequences_are_shown_whole_never_interpreted() {
        // The line that erases itself and prints another.
        let (text, hidden) = shown("admins: [root, mallory]\r\u{1b}[2K\u{1b}[0m admins: [root]");
        assert_eq!(
            text,
            "admins: [root, mallory]\\r\\e[2K\\e[0m admins: [root]"
        );
        assert!(hidden);
        // OSC 52 (write the clipboard), ended by BEL and by ST.
        assert_eq!(
            shown("/tmp/\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\u{7}x").0,
            "/tmp/\\e]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\u{7}x"
        );
        assert_eq!(
            shown("\u{1b}]8;;http://x\u{1b}\\link").0,
            "\\e]8;;http://x\\e\\link"
        );
        assert!(
            !screen(&shown("\u{1b}[31mred").0).hidden(),
            "no ESC is left"
        );
    }

    #[test]
    fn bidi_controls_show_as_escapes() {
        for (c, esc) in [
            ('\u{202e}', "\\u{202e}"),
            ('\u{202a}', "\\u{202a}"),
            ('\u{202b}', "\\u{202b}"),
            ('\u{202c}', "\\u{202c}"),
            ('\u{202d}', "\\u{202d}"),
            ('\u{2066}', "\\u{2066}"),
            ('\u{2067}', "\\u{2067}"),
            ('\u{2068}', "\\u{2068}"),
            ('\u{2069}', "\\u{2069}"),
            ('\u{200e}', "\\u{200e}"),
            ('\u{200f}', "\\u{200f}"),
            ('\u{61c}', "\\u{61c}"),
        ] {
            assert_eq!(
                shown(&format!("a{c}b")),
                (format!("a{esc}b"), true),
                "{esc}"
            );
        }
        // `invoice` U+202E `fdp.exe` reads as "invoiceexe.pdf" where bidi is
        // obeyed.
        assert_eq!(shown("invoice\u{202e}fdp.exe").0, "invoice\\u{202e}fdp.exe");
    }

    #[test]
    fn zero_width_bom_soft_hyphen_and_other_format_characters_show_as_escapes() {
        for (c, esc) in [
            ('\u{200b}', "\\u{200b}"),
            ('\u{200c}', "\\u{200c}"),
            ('\u{200d}', "\\u{200d}"),
            ('\u{2060}', "\\u{2060}"),
            ('\u{2061}', "\\u{2061}"),
            ('\u{2064}', "\\u{2064}"),
            ('\u{feff}', "\\u{feff}"),
            ('\u{ad}', "\\u{ad}"),
            ('\u{180e}', "\\u{180e}"),
            ('\u{e0001}', "\\u{e0001}"),
            ('\u{e0041}', "\\u{e0041}"),
            ('\u{2028}', "\\u{2028}"),
            ('\u{2029}', "\\u{2029}"),
        ] {
            assert_eq!(
                shown(&format!("ro{c}ot")),
                (format!("ro{esc}ot"), true),
                "{esc}"
            );
        }
        // Tag characters spelling hidden ASCII.
        assert_eq!(shown("ok\u{e0069}\u{e0067}").0, "ok\\u{e0069}\\u{e0067}");
    }

    #[test]
    fn ordinary_letters_of_any_script_and_emoji_are_untouched() {
        for text in [
            "café",
            "naïve Øresund",
            "東京都の設定",
            "한국어",
            "שלום עולם",
            "مرحبا",
            "🎉 done ✅",
            "👍🏽",
            "🇫🇷",
            "❤\u{fe0f}",
            "👩\u{200d}💻 and 👨\u{200d}👩\u{200d}👧 and 🏳\u{fe0f}\u{200d}🌈 and ❤\u{fe0f}\u{200d}🔥 and 🏴\u{200d}☠\u{fe0f}",
            "tab\tseparated",
            "",
        ] {
            let s = screen(text);
            assert_eq!((s.text(), s.hidden()), (text, false), "{text}");
            assert!(matches!(s.into_text(), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn a_joiner_outside_an_emoji_is_hidden() {
        assert_eq!(shown("a\u{200d}b").0, "a\\u{200d}b");
        assert_eq!(shown("👩\u{200d}").0, "👩\\u{200d}");
        assert_eq!(shown("\u{200d}💻").0, "\\u{200d}💻");
        assert_eq!(shown("👩\u{200d}x💻").0, "👩\\u{200d}x💻");
        assert_eq!(shown("👩 \u{200d}💻").0, "👩 \\u{200d}💻");
    }

    #[test]
    fn screening_is_idempotent_and_the_mark_follows_the_text() {
        let once = screen("a\u{1b}[2Kb\u{202e}c");
        assert_eq!(
            once.marked(),
            "a\\e[2Kb\\u{202e}c  [contains hidden characters]"
        );
        let twice = screen(once.text());
        assert_eq!(twice.text(), once.text());
        assert!(!twice.hidden());
        assert_eq!(twice.marked(), once.text());
        assert!(has_hidden("x\u{feff}"));
        assert!(!has_hidden("x\\u{feff}"));
    }

    #[test]
    fn lines_are_screened_one_by_one() {
        let lines: Vec<(String, bool)> = screen_lines("+ok\n+bad\r\u{1b}[2K\n")
            .map(|s| (s.text().to_owned(), s.hidden()))
            .collect();
        assert_eq!(
            lines,
            [
                ("+ok".to_owned(), false),
                ("+bad\\r\\e[2K".to_owned(), true),
                (String::new(), false)
            ]
        );
    }

    #[test]
    fn json_text_escapes_hidden_characters_and_keeps_its_meaning() {
        let value = serde_json::json!({
            "path": "/tmp/\u{1b}]52;c;eA==\u{7}x",
            "content": "admins: [root]\u{202e}\u{200b}\u{7f}\u{9b}\u{feff}\u{e0041}",
            "ok": "café 東京 👩\u{200d}💻\ttab",
        });
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let safe = screen_json(&pretty);
        for c in [
            '\u{1b}',
            '\u{7}',
            '\u{202e}',
            '\u{200b}',
            '\u{7f}',
            '\u{9b}',
            '\u{feff}',
            '\u{e0041}',
        ] {
            assert!(!safe.contains(c), "{c:?} in {safe}");
        }
        assert!(
            safe.contains("\\u202e\\u200b\\u007f\\u009b\\ufeff\\udb40\\udc41"),
            "{safe}"
        );
        assert!(safe.contains("café 東京 👩\u{200d}💻"), "{safe}");
        assert_eq!(safe.lines().count(), pretty.lines().count());
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
        let plain = "{\"a\": \"b\"}";
        assert!(matches!(screen_json(plain), Cow::Borrowed(_)));
    }
}
