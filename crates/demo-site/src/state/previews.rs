//! The site's previews: reads that describe a write — what it would do,
//! what it targets and the target's version now — without changing
//! anything (what plangate's configured `preview` tools answer).

use serde_json::{Value, json};

use super::{SiteState, ToolError, check_menu_item};

impl SiteState {
    /// `preview_update_page`.
    pub fn preview_update_page(
        &self,
        id: u64,
        title: Option<&str>,
        body: Option<&str>,
    ) -> Result<Value, ToolError> {
        let page = self.check_update_page(id, title, body)?;
        let mut parts = Vec::new();
        if let Some(t) = title {
            parts.push(format!("title {:?} → {:?}", page.title, t));
        }
        if let Some(b) = body {
            parts.push(format!(
                "body replaced ({} → {} characters)",
                page.body.chars().count(),
                b.chars().count()
            ));
        }
        Ok(preview(
            format!(
                "Update page {id} ({}): {}; lands on a new draft copy.",
                page.title,
                parts.join(", ")
            ),
            id.to_string(),
            page.version,
            "copy",
        ))
    }

    /// `preview_create_menu_item`.
    pub fn preview_create_menu_item(
        &self,
        menu: &str,
        label: &str,
        url: &str,
    ) -> Result<Value, ToolError> {
        let m = self.menu(menu)?;
        check_menu_item(label, url)?;
        Ok(preview(
            format!(
                "Add item {label:?} → {url} to menu {menu:?} (now {} items); live at once.",
                m.items.len()
            ),
            menu.to_string(),
            m.version,
            "live",
        ))
    }

    /// `preview_update_option`.
    pub fn preview_update_option(&self, name: &str, value: &Value) -> Result<Value, ToolError> {
        let o = self.option(name)?;
        Ok(preview(
            format!("Set option {name}: {} → {value}; live at once.", o.value),
            name.to_string(),
            o.version,
            "live",
        ))
    }

    /// `preview_delete_page`.
    pub fn preview_delete_page(&self, id: u64) -> Result<Value, ToolError> {
        let page = self.check_delete_page(id)?;
        Ok(preview(
            format!(
                "Move page {id} ({}, {}) to the trash; a snapshot is kept so it can be restored.",
                page.title,
                page.status.as_str()
            ),
            id.to_string(),
            page.version,
            "live",
        ))
    }

    /// `preview_restore_snapshot`: what restoring the snapshot would put
    /// back over the page as it is now, and the page's current version (0
    /// when it is gone), so a restore planned against one state is stale
    /// once the page moves on.
    pub fn preview_restore_snapshot(&self, snapshot_id: &str) -> Result<Value, ToolError> {
        let snap = self
            .snapshots
            .get(snapshot_id)
            .ok_or_else(|| ToolError::not_found(format!("snapshot {snapshot_id:?} not found")))?;
        let id = snap.id;
        let (now, version) = match self.pages.iter().find(|p| p.id == id) {
            Some(p) => (
                format!(
                    "now {:?}, {} (version {})",
                    p.title,
                    p.status.as_str(),
                    p.version
                ),
                p.version,
            ),
            None => ("now gone".to_owned(), 0),
        };
        Ok(preview(
            format!(
                "Restore page {id} from snapshot {snapshot_id}: {now} → {:?}, {} as it was before its deletion.",
                snap.title,
                snap.status.as_str()
            ),
            id.to_string(),
            version,
            "live",
        ))
    }
}

fn preview(effect: String, target: String, target_version: u64, lands_on: &str) -> Value {
    json!({"effect": effect, "target": target, "target_version": target_version, "lands_on": lands_on})
}
