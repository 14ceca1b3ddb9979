//! Headless Chromium for the browser tests (Debian's `chromium`;
//! `scripts/install-browser` installs it when missing): where it is, the
//! flags every run starts with, how its process group ends, and where the
//! screenshots go.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const CHROMIUM: &str = "/usr/bin/chromium";

/// The flags every headless run here starts with: no sandbox, GPU,
/// background network or first-run screens.
pub const HEADLESS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
];

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/artifacts`, where the screenshots are kept for people.
pub fn artifacts_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("artifacts")
}

/// `/usr/bin/chromium`, installed by `scripts/install-browser` if missing.
pub fn chromium() -> &'static str {
    if !Path::new(CHROMIUM).exists() {
        let script = workspace_root().join("scripts/install-browser");
        let status = Command::new(&script)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(status.success(), "scripts/install-browser failed");
    }
    assert!(Path::new(CHROMIUM).exists(), "{CHROMIUM} is missing");
    CHROMIUM
}

/// Kills the whole process group `pgid` (renderers, zygote), so that no
/// Chromium outlives its test. The `--` is essential: procps
/// `kill -KILL -1234` reads `-1234` as `-2`.
pub fn kill_group(pgid: u32) {
    let _ = Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// A JSON value as a JavaScript expression safe inside a page's
/// `<script>` (the test host pages embed real answers this way).
pub fn js_literal(v: &Value) -> String {
    serde_json::to_string(v)
        .unwrap()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

// === Chromium over the DevTools protocol ===

/// A headless Chromium in its own process group; dropping it kills the
/// whole group.
pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    ws: tungstenite::WebSocket<TcpStream>,
    next_id: u64,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let pgid = self.child.id();
        if pgid > 1 {
            kill_group(pgid);
        }
        let _ = self.child.wait();
    }
}

impl Browser {
    pub fn start() -> Browser {
        use std::os::unix::process::CommandExt;
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(chromium())
            .args(HEADLESS)
            .args([
                "--window-size=1200,1000",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("chromium starts");
        let mut browser_guard = Some(child);
        let active = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&active) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break (port.trim().to_owned(), path.trim().to_owned());
                }
            }
            if Instant::now() > deadline {
                let mut child = browser_guard.take().unwrap();
                kill_group(child.id());
                let _ = child.wait();
                panic!("chromium wrote no DevToolsActivePort within a minute");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let child = browser_guard.take().unwrap();
        let stream = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream)
            .expect("devtools websocket");
        Browser {
            child,
            _profile: profile,
            ws,
            next_id: 0,
        }
    }

    /// Sends one command (to a page's session if given) and returns its
    /// result, skipping the events that arrive meanwhile.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_call(session, method, params)
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    /// Like [`Browser::call`], with the protocol's error as `Err` (a page
    /// between two documents has no context to evaluate in).
    pub fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let raw = self.ws.read().expect("devtools answers");
            let Ok(text) = raw.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap();
            if v["id"] == json!(id) {
                if let Some(e) = v.get("error") {
                    return Err(e.clone());
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// A new tab at `url`, attached: its session id.
    pub fn open(&mut self, url: &str) -> String {
        let target = self.call(None, "Target.createTarget", json!({"url": "about:blank"}));
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        let session = attached["sessionId"].as_str().unwrap().to_owned();
        self.call(Some(&session), "Page.enable", json!({}));
        self.call(Some(&session), "Runtime.enable", json!({}));
        self.call(Some(&session), "Page.navigate", json!({"url": url}));
        session
    }

    /// Evaluates `expr` in the page and returns its value.
    pub fn eval(&mut self, session: &str, expr: &str) -> Value {
        let r = self.call(
            Some(session),
            "Runtime.evaluate",
            json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expr} threw: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Waits until `expr` is truthy in the page; panics with `what`.
    pub fn wait_for(&mut self, session: &str, what: &str, expr: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = self.try_call(
                Some(session),
                "Runtime.evaluate",
                json!({"expression": format!("!!({expr})"), "returnByValue": true}),
            );
            if r.is_ok_and(|r| r["result"]["value"] == json!(true)) {
                return;
            }
            if Instant::now() > deadline {
                let body = self.eval(session, "document.body ? document.body.innerText : ''");
                panic!("timed out waiting for {what}; the page says:\n{body}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Clicks the centre of the first element matching `selector` with
    /// real mouse events, once the page holds still: the element is where
    /// it was a moment before and nothing covers its centre (a live page
    /// redraws, and a click at a stale place would hit something else).
    pub fn click(&mut self, session: &str, selector: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let probe = format!(
            "(() => {{ const e = document.querySelector({sel}); if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); const x = r.x + r.width / 2, y = r.y + r.height / 2; const hit = document.elementFromPoint(x, y); return [x, y, !!hit && (hit === e || e.contains(hit))]; }})()"
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let (x, y) = loop {
            let first = self.eval(session, &probe);
            std::thread::sleep(Duration::from_millis(80));
            let second = self.eval(session, &probe);
            if !second.is_null() && first == second && second[2] == json!(true) {
                break (second[0].as_f64().unwrap(), second[1].as_f64().unwrap());
            }
            assert!(
                Instant::now() < deadline,
                "{selector} is not there to click, or never holds still: {second}"
            );
        };
        for kind in ["mousePressed", "mouseReleased"] {
            self.call(
                Some(session),
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            );
        }
    }

    /// Clicks the element matching `selector`, then waits for `what`
    /// (`expr` true): a person's click and what it leads to.
    pub fn click_then(&mut self, session: &str, selector: &str, what: &str, expr: &str) {
        self.click(session, selector);
        self.wait_for(session, what, expr);
    }

    /// Rejects the console's step matching `step` with `reason` through
    /// its form, and waits until the page shows the rejection.
    pub fn reject_step(&mut self, session: &str, step: &str, reason: &str) {
        self.click_then(
            session,
            &format!("{step} button.reject-step"),
            "the reason box",
            "document.querySelector('textarea.reason')",
        );
        self.type_into(session, "textarea.reason", reason);
        self.click_then(
            session,
            "button.confirm-reject",
            "the rejection",
            &format!(
                "document.querySelector('{} .rejection')",
                step.replace('\'', "\\'")
            ),
        );
    }

    /// Focuses the element matching `selector` and presses `key` on it
    /// (`" "` or `"Enter"`), as a person at the keyboard does.
    pub fn press(&mut self, session: &str, selector: &str, key: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        let focused = self.eval(
            session,
            &format!(
                "(() => {{ const e = document.querySelector({sel}); if (!e) return false; e.focus(); return document.activeElement === e; }})()"
            ),
        );
        assert_eq!(focused, json!(true), "cannot focus {selector}");
        let (code, vk, text) = match key {
            " " => ("Space", 32, " "),
            "Enter" => ("Enter", 13, "\r"),
            other => panic!("press: no key {other:?}"),
        };
        self.call(
            Some(session),
            "Input.dispatchKeyEvent",
            json!({"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk, "text": text}),
        );
        self.call(
            Some(session),
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk}),
        );
    }

    /// Types `text` into the element matching `selector`, as a keyboard
    /// would.
    pub fn type_into(&mut self, session: &str, selector: &str, text: &str) {
        let sel = serde_json::to_string(selector).unwrap();
        self.eval(
            session,
            &format!(
                "(() => {{ const e = document.querySelector({sel}); e.value = ''; e.focus(); }})()"
            ),
        );
        self.call(Some(session), "Input.insertText", json!({"text": text}));
    }

    /// Submits the login form with `token` and waits for the next page.
    pub fn log_in(&mut self, session: &str, token: &str) {
        self.eval(session, "window.__previousPage = true");
        self.type_into(session, "#token", token);
        self.click(session, "#login");
        self.wait_for(
            session,
            "the page after logging in",
            "!window.__previousPage && document.readyState === 'complete'",
        );
    }

    /// The events of the history the page shows, each as `type | actor`:
    /// what the tests read a history's acts and actors off.
    pub fn history_acts(&mut self, session: &str) -> Vec<String> {
        let acts = self.eval(
            session,
            "Array.from(document.querySelectorAll('ol.history li.event')).map(li => li.getAttribute('data-type') + ' | ' + li.querySelector('.actor').textContent)",
        );
        serde_json::from_value(acts).unwrap()
    }

    /// The top `height` pixels of the page (1200 wide), as a person first
    /// sees it: what the README shows.
    pub fn screenshot_top(&mut self, session: &str, height: u32, to: &Path) {
        use base64::Engine as _;
        self.eval(session, "window.scrollTo(0, 0)");
        let shot = self.call(
            Some(session),
            "Page.captureScreenshot",
            json!({"format": "png", "clip": {"x": 0, "y": 0, "width": 1200, "height": height, "scale": 1}}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, png).unwrap();
    }

    pub fn screenshot(&mut self, session: &str, to: &Path) {
        use base64::Engine as _;
        let shot = self.call(
            Some(session),
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, png).unwrap();
    }
}
