//! The site's state, its seed, its file format, and every change a tool can
//! make to it.
//!
//! Everything here is plain data and pure functions over it: no MCP, no
//! locking. The server module loads a [`SiteState`] from the file, calls one
//! of these functions, and writes the result back. Keeping the logic pure
//! makes every rule (a page update lands on a copy, a trashed page cannot be
//! deleted again, a preview changes nothing) testable without a transport.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::DemoError;

mod previews;

/// Base URL the demo pretends to live at, so preview links look real
/// without anything ever being served there.
pub const SITE_URL: &str = "https://demo-site.example";

/// Status of a page. Trash is a status rather than a removal, so a deleted
/// page can always be restored and the effect of a delete stays visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PageStatus {
    /// Visible on the live site.
    Published,
    /// Not visible; work in progress (every update lands on a draft copy).
    Draft,
    /// Deleted; a snapshot of the page before deletion is kept.
    Trash,
}

impl PageStatus {
    fn as_str(self) -> &'static str {
        match self {
            PageStatus::Published => "published",
            PageStatus::Draft => "draft",
            PageStatus::Trash => "trash",
        }
    }
}

/// One page of the site. `version` grows by one on every change so that a
/// reviewer (plangate's preview check) can tell whether a target moved
/// between planning and applying.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// Stable numeric id.
    pub id: u64,
    /// Page title.
    pub title: String,
    /// URL slug.
    pub slug: String,
    /// Page body text.
    pub body: String,
    /// Published, draft or trash.
    pub status: PageStatus,
    /// Starts at 1, +1 on every change.
    pub version: u64,
    /// For a draft copy made by `update_page`: the page it is a copy of.
    pub copy_of: Option<u64>,
}

/// One entry of a navigation menu.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MenuItem {
    /// Stable numeric id, unique across menus.
    pub id: u64,
    /// Text shown in the menu.
    pub label: String,
    /// Where the item links to.
    pub url: String,
}

/// A navigation menu. Its version grows when an item is added, so previews
/// can name the version they saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Menu {
    /// Starts at 1, +1 on every change.
    pub version: u64,
    /// Items in display order.
    pub items: Vec<MenuItem>,
}

/// A site option: any JSON value, versioned like everything else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteOption {
    /// Current value.
    pub value: Value,
    /// Starts at 1, +1 on every change.
    pub version: u64,
}

/// An installed plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plugin {
    /// Whether the plugin is active.
    pub active: bool,
    /// The plugin's own release version (not a change counter).
    pub version: String,
}

/// What a write call with an operation key answered, so a retry of the same
/// operation replays the answer instead of applying the change twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperationRecord {
    /// Tool that performed the operation; a key reused for another tool is refused.
    pub tool: String,
    /// The structured result the first call answered.
    pub result: Value,
}

/// The whole site, exactly as stored in the state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteState {
    /// All pages (including draft copies and trashed pages), ordered by id.
    pub pages: Vec<Page>,
    /// Menus by name.
    pub menus: BTreeMap<String, Menu>,
    /// Options by name.
    pub options: BTreeMap<String, SiteOption>,
    /// Plugins by slug.
    pub plugins: BTreeMap<String, Plugin>,
    /// Snapshot id → the page as it was just before it was deleted.
    pub snapshots: BTreeMap<String, Page>,
    /// Next page id to hand out.
    pub next_page_id: u64,
    /// Next menu item id to hand out.
    pub next_menu_item_id: u64,
    /// Applied write calls per tool (replays are not counted).
    pub calls: BTreeMap<String, u64>,
    /// Operation key → what that operation answered.
    pub operations: BTreeMap<String, OperationRecord>,
}

/// A tool call that cannot be carried out, reported as an `isError` result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolError {
    /// Stable machine-readable code.
    pub code: &'static str,
    /// Lowercase message naming the value at fault.
    pub message: String,
}

impl ToolError {
    /// Something named by the caller does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: "not_found",
            message: message.into(),
        }
    }
    /// The arguments are well-typed but make no sense.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: "invalid_arguments",
            message: message.into(),
        }
    }
    /// The target is in a state that forbids the change.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self {
            code: "conflict",
            message: message.into(),
        }
    }
    /// The state file could not be read or written.
    pub fn storage(message: impl Into<String>) -> Self {
        Self {
            code: "storage_error",
            message: message.into(),
        }
    }
    /// The error as the JSON carried in `structuredContent`.
    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

fn page(id: u64, title: &str, slug: &str, body: &str, status: PageStatus) -> Page {
    Page {
        id,
        title: title.into(),
        slug: slug.into(),
        body: body.into(),
        status,
        version: 1,
        copy_of: None,
    }
}

impl SiteState {
    /// The state a new file starts with: the worked example of the design
    /// document (page 2 "About", the old Team draft, the main menu) runs
    /// against exactly this.
    pub fn seed() -> Self {
        let pages = vec![
            page(
                1,
                "Home",
                "home",
                "Welcome to the demo site.",
                PageStatus::Published,
            ),
            page(
                2,
                "About",
                "about",
                "We are a small team.",
                PageStatus::Published,
            ),
            page(3, "Team", "team", "The old Team draft.", PageStatus::Draft),
            page(
                4,
                "Contact",
                "contact",
                "Write to hello@demo-site.example.",
                PageStatus::Published,
            ),
        ];
        let item = |id: u64, label: &str, url: &str| MenuItem {
            id,
            label: label.into(),
            url: url.into(),
        };
        let mut menus = BTreeMap::new();
        menus.insert(
            "main".to_string(),
            Menu {
                version: 1,
                items: vec![
                    item(1, "Home", "/"),
                    item(2, "About", "/about"),
                    item(3, "Contact", "/contact"),
                ],
            },
        );
        let opt = |v: Value| SiteOption {
            value: v,
            version: 1,
        };
        let mut options = BTreeMap::new();
        options.insert("site_title".to_string(), opt(json!("Demo Site")));
        options.insert("tagline".to_string(), opt(json!("Just another demo site")));
        options.insert("posts_per_page".to_string(), opt(json!(10)));
        let mut plugins = BTreeMap::new();
        plugins.insert(
            "seo".to_string(),
            Plugin {
                active: true,
                version: "2.1.0".into(),
            },
        );
        plugins.insert(
            "forms".to_string(),
            Plugin {
                active: false,
                version: "1.4.2".into(),
            },
        );
        SiteState {
            pages,
            menus,
            options,
            plugins,
            snapshots: BTreeMap::new(),
            next_page_id: 5,
            next_menu_item_id: 4,
            calls: BTreeMap::new(),
            operations: BTreeMap::new(),
        }
    }

    /// Reads and parses the state file.
    pub fn load(path: &Path) -> Result<Self, DemoError> {
        let bytes = fs::read(path).map_err(|source| DemoError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_slice(&bytes).map_err(|source| DemoError::Corrupt {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Writes the state file atomically: a temporary file in the same
    /// directory, flushed to disk, then renamed over the old one, so a crash
    /// never leaves a half-written file behind. The file is owner-only
    /// (0600 on unix): options may hold secrets.
    pub fn save(&self, path: &Path) -> Result<(), DemoError> {
        let io = |source| DemoError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut bytes = serde_json::to_vec_pretty(self).map_err(DemoError::Serialize)?;
        bytes.push(b'\n');
        let tmp = temp_path(path);
        let result = (|| {
            // Created exclusively: a file or link left at the temporary
            // name (a crash, or planted) is removed, never written through.
            let mut options = fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                options.mode(0o600);
            }
            let mut file = match options.open(&tmp) {
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    fs::remove_file(&tmp)?;
                    options.open(&tmp)?
                }
                other => other?,
            };
            file.write_all(&bytes)?;
            file.sync_all()?;
            fs::rename(&tmp, path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(io)
    }

    fn page(&self, id: u64) -> Result<&Page, ToolError> {
        self.pages
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| ToolError::not_found(format!("page {id} not found")))
    }

    fn page_mut(&mut self, id: u64) -> Result<&mut Page, ToolError> {
        self.pages
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| ToolError::not_found(format!("page {id} not found")))
    }

    fn menu(&self, name: &str) -> Result<&Menu, ToolError> {
        self.menus.get(name).ok_or_else(|| {
            ToolError::not_found(format!(
                "menu {name:?} not found (menus: {})",
                self.menus.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    fn option(&self, name: &str) -> Result<&SiteOption, ToolError> {
        self.options.get(name).ok_or_else(|| {
            ToolError::not_found(format!(
                "option {name:?} not found (options: {})",
                self.options.keys().cloned().collect::<Vec<_>>().join(", ")
            ))
        })
    }

    // ---- reads -------------------------------------------------------------

    /// `list_pages`: a summary of every page, or only those with `status`.
    pub fn list_pages(&self, status: Option<PageStatus>) -> Value {
        let pages: Vec<Value> = self
            .pages
            .iter()
            .filter(|p| status.is_none_or(|s| p.status == s))
            .map(|p| {
                json!({"id": p.id, "title": p.title, "slug": p.slug, "status": p.status,
                       "version": p.version, "copy_of": p.copy_of})
            })
            .collect();
        json!({ "pages": pages })
    }

    /// `get_page`: the whole page.
    pub fn get_page(&self, id: u64) -> Result<Value, ToolError> {
        Ok(json!(self.page(id)?))
    }

    /// `list_menus`: every menu with its items.
    pub fn list_menus(&self) -> Value {
        let menus: Vec<Value> = self
            .menus
            .iter()
            .map(|(name, m)| json!({"name": name, "version": m.version, "items": m.items}))
            .collect();
        json!({ "menus": menus })
    }

    /// `list_options`: every option with its value and version.
    pub fn list_options(&self) -> Value {
        let options: Vec<Value> = self
            .options
            .iter()
            .map(|(name, o)| json!({"name": name, "value": o.value, "version": o.version}))
            .collect();
        json!({ "options": options })
    }

    /// `list_plugins`: every plugin and whether it is active.
    pub fn list_plugins(&self) -> Value {
        let plugins: Vec<Value> = self
            .plugins
            .iter()
            .map(|(slug, p)| json!({"slug": slug, "active": p.active, "version": p.version}))
            .collect();
        json!({ "plugins": plugins })
    }

    // ---- writes ------------------------------------------------------------

    fn check_update_page(
        &self,
        id: u64,
        title: Option<&str>,
        body: Option<&str>,
    ) -> Result<&Page, ToolError> {
        let page = self.page(id)?;
        if title.is_none() && body.is_none() {
            return Err(ToolError::invalid(format!(
                "nothing to update on page {id}: give a title, a body, or both"
            )));
        }
        if title.is_some_and(|t| t.trim().is_empty()) {
            return Err(ToolError::invalid("title must not be empty"));
        }
        if page.status == PageStatus::Trash {
            return Err(ToolError::conflict(format!(
                "page {id} is in the trash; restore it before updating it"
            )));
        }
        Ok(page)
    }

    /// `update_page`: leaves page `id` untouched and creates a draft copy
    /// carrying the changes.
    pub fn update_page(
        &mut self,
        id: u64,
        title: Option<&str>,
        body: Option<&str>,
    ) -> Result<Value, ToolError> {
        let base = self.check_update_page(id, title, body)?.clone();
        let copy_id = self.next_page_id;
        self.next_page_id += 1;
        let mut changed = Vec::new();
        if title.is_some() {
            changed.push("title");
        }
        if body.is_some() {
            changed.push("body");
        }
        let copy = Page {
            id: copy_id,
            title: title.unwrap_or(&base.title).to_string(),
            slug: format!("{}-draft-{copy_id}", base.slug),
            body: body.unwrap_or(&base.body).to_string(),
            status: PageStatus::Draft,
            version: 1,
            copy_of: Some(id),
        };
        let version = copy.version;
        self.pages.push(copy);
        Ok(json!({
            "copy_id": copy_id,
            "page_id": id,
            "preview_url": format!("{SITE_URL}/?preview={copy_id}"),
            "changed": changed,
            "version": version,
            "base_version": base.version,
        }))
    }

    /// `create_menu_item`: adds an item to a menu, live.
    pub fn create_menu_item(
        &mut self,
        menu: &str,
        label: &str,
        url: &str,
    ) -> Result<Value, ToolError> {
        self.menu(menu)?;
        check_menu_item(label, url)?;
        let id = self.next_menu_item_id;
        let m = self
            .menus
            .get_mut(menu)
            .ok_or_else(|| ToolError::not_found(format!("menu {menu:?} not found")))?;
        m.items.push(MenuItem {
            id,
            label: label.into(),
            url: url.into(),
        });
        m.version += 1;
        self.next_menu_item_id += 1;
        Ok(json!({"menu_item_id": id, "menu": menu, "label": label, "url": url, "link": url}))
    }

    /// `update_option`: sets an existing option, live.
    pub fn update_option(&mut self, name: &str, value: Value) -> Result<Value, ToolError> {
        self.option(name)?;
        let o = self
            .options
            .get_mut(name)
            .ok_or_else(|| ToolError::not_found(format!("option {name:?} not found")))?;
        let old = std::mem::replace(&mut o.value, value.clone());
        o.version += 1;
        Ok(json!({"option": name, "old_value": old, "new_value": value}))
    }

    /// `set_plugin_active`: activates or deactivates a plugin, live.
    pub fn set_plugin_active(&mut self, slug: &str, active: bool) -> Result<Value, ToolError> {
        let known = self.plugins.keys().cloned().collect::<Vec<_>>().join(", ");
        let p = self.plugins.get_mut(slug).ok_or_else(|| {
            ToolError::not_found(format!("plugin {slug:?} not found (plugins: {known})"))
        })?;
        let was_active = std::mem::replace(&mut p.active, active);
        Ok(json!({"plugin": slug, "active": active, "was_active": was_active}))
    }

    fn check_delete_page(&self, id: u64) -> Result<&Page, ToolError> {
        let page = self.page(id)?;
        if page.status == PageStatus::Trash {
            return Err(ToolError::conflict(format!(
                "page {id} is already in the trash"
            )));
        }
        Ok(page)
    }

    /// `delete_page`: moves a page to the trash and keeps a snapshot of it.
    pub fn delete_page(&mut self, id: u64) -> Result<Value, ToolError> {
        let before = self.check_delete_page(id)?.clone();
        let mut snapshot_id = format!("snap_{id}_{}", before.version);
        let mut n = 1;
        while self.snapshots.contains_key(&snapshot_id) {
            n += 1;
            snapshot_id = format!("snap_{id}_{}_{n}", before.version);
        }
        self.snapshots.insert(snapshot_id.clone(), before);
        let page = self.page_mut(id)?;
        page.status = PageStatus::Trash;
        page.version += 1;
        Ok(json!({"page_id": id, "snapshot_id": snapshot_id, "status": "trash"}))
    }

    /// `restore_snapshot`: puts a deleted page back as it was. Its version
    /// still grows, so anything planned against the trashed page is stale.
    pub fn restore_snapshot(&mut self, snapshot_id: &str) -> Result<Value, ToolError> {
        let snap = self
            .snapshots
            .get(snapshot_id)
            .ok_or_else(|| ToolError::not_found(format!("snapshot {snapshot_id:?} not found")))?
            .clone();
        let id = snap.id;
        match self.pages.iter_mut().find(|p| p.id == id) {
            Some(page) => {
                let version = page.version + 1;
                *page = snap;
                page.version = version;
            }
            None => {
                self.pages.push(snap);
                self.pages.sort_by_key(|p| p.id);
            }
        }
        let version = self.page(id)?.version;
        Ok(json!({"page_id": id, "restored": true, "snapshot_id": snapshot_id, "version": version}))
    }
}

fn check_menu_item(label: &str, url: &str) -> Result<(), ToolError> {
    if label.trim().is_empty() {
        return Err(ToolError::invalid("menu item label must not be empty"));
    }
    if url.trim().is_empty() {
        return Err(ToolError::invalid("menu item url must not be empty"));
    }
    Ok(())
}

fn temp_path(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "state".into());
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_matches_the_worked_example() {
        let s = SiteState::seed();
        let about = s.page(2).unwrap();
        assert_eq!(about.title, "About");
        assert_eq!(about.body, "We are a small team.");
        assert_eq!(s.page(3).unwrap().status, PageStatus::Draft);
        assert_eq!(s.menus["main"].items.len(), 3);
        assert_eq!(s.options["posts_per_page"].value, json!(10));
        assert!(s.plugins["seo"].active);
        assert!(!s.plugins["forms"].active);
    }

    #[test]
    fn preview_sentence_names_title_change() {
        let s = SiteState::seed();
        let v = s.preview_update_page(2, Some("Our story"), None).unwrap();
        assert_eq!(
            v["effect"],
            "Update page 2 (About): title \"About\" → \"Our story\"; lands on a new draft copy."
        );
        assert_eq!(v["target"], "2");
        assert_eq!(v["target_version"], 1);
        assert_eq!(v["lands_on"], "copy");
    }

    #[test]
    fn delete_twice_is_a_conflict_and_restore_bumps_version() {
        let mut s = SiteState::seed();
        let r = s.delete_page(3).unwrap();
        assert_eq!(r["snapshot_id"], "snap_3_1");
        assert_eq!(s.delete_page(3).unwrap_err().code, "conflict");
        // The restore's preview shows the page as it is now, and its
        // version (what a planned restore binds).
        let v = s.preview_restore_snapshot("snap_3_1").unwrap();
        assert_eq!(v["target_version"], 2);
        assert!(
            v["effect"]
                .as_str()
                .unwrap()
                .contains("trash (version 2) →"),
            "{v}"
        );
        assert_eq!(
            s.preview_restore_snapshot("snap_9").unwrap_err().code,
            "not_found"
        );
        s.restore_snapshot("snap_3_1").unwrap();
        let p = s.page(3).unwrap();
        assert_eq!(p.status, PageStatus::Draft);
        assert_eq!(p.version, 3);
        // a second deletion gets its own snapshot id
        assert_eq!(s.delete_page(3).unwrap()["snapshot_id"], "snap_3_3");
    }

    #[test]
    fn update_without_fields_is_invalid() {
        let mut s = SiteState::seed();
        assert_eq!(
            s.update_page(2, None, None).unwrap_err().code,
            "invalid_arguments"
        );
        assert_eq!(s, SiteState::seed());
    }
}
