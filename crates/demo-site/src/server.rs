//! The MCP face of the site: [`DemoSite`], its tools, resources and server info.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, Implementation, ListResourcesResult, MetaObject, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, RequestMetaObject,
    Resource, ResourceContents, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::DemoError;
use crate::state::{OperationRecord, PageStatus, SiteState, ToolError};

/// The `_meta` key under which plangate passes a step id when it applies a
/// step, so a retried step is applied at most once.
pub const OPERATION_KEY_META: &str = "dev.plangate/operation_key";

/// The `_meta` key set to `true` on a result that replays an earlier
/// operation instead of applying it again.
pub const REPLAYED_META: &str = "dev.plangate/replayed";

const INSTRUCTIONS: &str = "A small demo website. Reads: list_pages, get_page, list_menus, \
list_options, list_plugins and the preview_* tools (they describe a write and the target's \
current version without changing anything). Writes: update_page lands on a new draft copy and \
never touches the live page; create_menu_item, update_option and set_plugin_active change the \
live site; delete_page moves a page to the trash and keeps a snapshot that restore_snapshot \
brings back.";

const PAGE_URI_PREFIX: &str = "site://pages/";

/// The demo website as an MCP server.
///
/// Cheap to clone: clones share the state file path and the lock that
/// serialises changes to it, so one handler per HTTP session (as rmcp's
/// session manager creates them) still sees one consistent site.
#[derive(Clone)]
pub struct DemoSite {
    inner: Arc<Inner>,
    tool_router: ToolRouter<DemoSite>,
}

struct Inner {
    path: PathBuf,
    lock: Mutex<()>,
}

impl std::fmt::Debug for DemoSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoSite")
            .field("state_path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl DemoSite {
    /// Opens the site whose state lives in `state_path`, seeding the file
    /// with the demo content if it does not exist yet. A file that exists
    /// but cannot be read or parsed is an error: silently reseeding would
    /// throw away someone's changes.
    pub fn open(state_path: impl Into<PathBuf>) -> Result<Self, DemoError> {
        let path = state_path.into();
        match std::fs::metadata(&path) {
            Ok(_) => {
                SiteState::load(&path)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Its directory too (owner-only): the demo's state lives in
                // plangate's data dir, which a first command may not have
                // made yet.
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    let mut builder = std::fs::DirBuilder::new();
                    builder.recursive(true);
                    #[cfg(unix)]
                    {
                        use std::os::unix::fs::DirBuilderExt;
                        builder.mode(0o700);
                    }
                    builder.create(dir).map_err(|source| DemoError::Io {
                        path: dir.to_path_buf(),
                        source,
                    })?;
                }
                SiteState::seed().save(&path)?;
            }
            Err(source) => return Err(DemoError::Io { path, source }),
        }
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                lock: Mutex::new(()),
            }),
            tool_router: Self::tool_router(),
        })
    }

    /// Where this site keeps its state.
    pub fn state_path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs a read against the current file.
    async fn read(&self, f: impl FnOnce(&SiteState) -> Result<Value, ToolError>) -> CallToolResult {
        let _guard = self.inner.lock.lock().await;
        let result = SiteState::load(&self.inner.path)
            .map_err(|e| ToolError::storage(e.to_string()))
            .and_then(|s| f(&s));
        into_result(result)
    }

    /// Runs a write: load, replay if the operation key was seen, else apply,
    /// count, remember the answer under the key, and save atomically. A
    /// failed change writes nothing.
    async fn write(
        &self,
        tool: &'static str,
        meta: &RequestMetaObject,
        f: impl FnOnce(&mut SiteState) -> Result<Value, ToolError>,
    ) -> CallToolResult {
        let key = match meta.get(OPERATION_KEY_META) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(other) => {
                return into_result(Err(ToolError::invalid(format!(
                    "_meta {OPERATION_KEY_META:?} must be a non-empty string, got {other}"
                ))));
            }
        };
        let _guard = self.inner.lock.lock().await;
        let mut state = match SiteState::load(&self.inner.path) {
            Ok(s) => s,
            Err(e) => return into_result(Err(ToolError::storage(e.to_string()))),
        };
        if let Some(key) = &key
            && let Some(record) = state.operations.get(key)
        {
            if record.tool != tool {
                return into_result(Err(ToolError::conflict(format!(
                    "operation key {key:?} was already used by tool {}",
                    record.tool
                ))));
            }
            tracing::info!(tool, operation_key = %key, "replaying recorded operation");
            let mut result = CallToolResult::structured(record.result.clone());
            let mut m = MetaObject::default();
            m.insert(REPLAYED_META.into(), Value::Bool(true));
            result.meta = Some(m);
            return result;
        }
        let value = match f(&mut state) {
            Ok(v) => v,
            Err(e) => return into_result(Err(e)),
        };
        *state.calls.entry(tool.to_string()).or_insert(0) += 1;
        if let Some(key) = key {
            state.operations.insert(
                key,
                OperationRecord {
                    tool: tool.to_string(),
                    result: value.clone(),
                },
            );
        }
        if let Err(e) = state.save(&self.inner.path) {
            return into_result(Err(ToolError::storage(e.to_string())));
        }
        tracing::info!(tool, "applied");
        CallToolResult::structured(value)
    }
}

fn into_result(result: Result<Value, ToolError>) -> CallToolResult {
    match result {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => CallToolResult::structured_error(e.to_json()),
    }
}

/// Arguments of `list_pages`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct ListPagesArgs {
    /// Only pages with this status; every page when absent.
    #[serde(default)]
    pub status: Option<PageStatus>,
}

/// Arguments naming one page.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PageIdArgs {
    /// The page id.
    pub id: u64,
}

/// Arguments of `update_page` and `preview_update_page`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UpdatePageArgs {
    /// The page to update (it stays untouched; a draft copy gets the changes).
    pub id: u64,
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New body.
    #[serde(default)]
    pub body: Option<String>,
}

/// Arguments of `create_menu_item` and its preview.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct MenuItemArgs {
    /// Menu name, e.g. "main".
    pub menu: String,
    /// Text shown in the menu.
    pub label: String,
    /// Where the item links to, e.g. "/team".
    pub url: String,
}

/// Arguments of `update_option` and its preview.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UpdateOptionArgs {
    /// Option name, e.g. "tagline".
    pub name: String,
    /// New value: any JSON.
    pub value: Value,
}

/// Arguments of `set_plugin_active`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PluginArgs {
    /// Plugin slug, e.g. "forms".
    pub slug: String,
    /// True to activate, false to deactivate.
    pub active: bool,
}

/// Arguments of `restore_snapshot`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SnapshotArgs {
    /// Snapshot id returned by delete_page, e.g. "snap_3_1".
    pub snapshot_id: String,
}

#[tool_router(router = tool_router)]
impl DemoSite {
    /// List pages with id, title, slug, status, version and copy_of.
    #[tool(
        name = "list_pages",
        title = "List pages",
        annotations(title = "List pages", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_pages(&self, Parameters(a): Parameters<ListPagesArgs>) -> CallToolResult {
        self.read(|s| Ok(s.list_pages(a.status))).await
    }

    /// Get one page, including its body.
    #[tool(
        name = "get_page",
        title = "Get page",
        annotations(title = "Get page", read_only_hint = true, open_world_hint = false)
    )]
    async fn get_page(&self, Parameters(a): Parameters<PageIdArgs>) -> CallToolResult {
        self.read(|s| s.get_page(a.id)).await
    }

    /// List menus and their items.
    #[tool(
        name = "list_menus",
        title = "List menus",
        annotations(title = "List menus", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_menus(&self) -> CallToolResult {
        self.read(|s| Ok(s.list_menus())).await
    }

    /// List site options with their values and versions.
    #[tool(
        name = "list_options",
        title = "List options",
        annotations(title = "List options", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_options(&self) -> CallToolResult {
        self.read(|s| Ok(s.list_options())).await
    }

    /// List installed plugins and whether each is active.
    #[tool(
        name = "list_plugins",
        title = "List plugins",
        annotations(title = "List plugins", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_plugins(&self) -> CallToolResult {
        self.read(|s| Ok(s.list_plugins())).await
    }

    /// Update a page's title and/or body. The live page is NOT changed: the
    /// changes land on a new draft copy (copy_of = id), returned with a preview URL.
    #[tool(
        name = "update_page",
        title = "Update page (as a draft copy)",
        annotations(
            title = "Update page (as a draft copy)",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn update_page(
        &self,
        Parameters(a): Parameters<UpdatePageArgs>,
        meta: RequestMetaObject,
    ) -> CallToolResult {
        self.write("update_page", &meta, |s| {
            s.update_page(a.id, a.title.as_deref(), a.body.as_deref())
        })
        .await
    }

    /// Add an item to a menu. Live at once.
    #[tool(
        name = "create_menu_item",
        title = "Create menu item",
        annotations(
            title = "Create menu item",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_menu_item(
        &self,
        Parameters(a): Parameters<MenuItemArgs>,
        meta: RequestMetaObject,
    ) -> CallToolResult {
        self.write("create_menu_item", &meta, |s| {
            s.create_menu_item(&a.menu, &a.label, &a.url)
        })
        .await
    }

    /// Set an existing site option to a new JSON value. Live at once.
    #[tool(
        name = "update_option",
        title = "Update option",
        annotations(
            title = "Update option",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn update_option(
        &self,
        Parameters(a): Parameters<UpdateOptionArgs>,
        meta: RequestMetaObject,
    ) -> CallToolResult {
        self.write("update_option", &meta, |s| {
            s.update_option(&a.name, a.value)
        })
        .await
    }

    /// Activate or deactivate a plugin. Live at once.
    #[tool(
        name = "set_plugin_active",
        title = "Activate or deactivate plugin",
        annotations(
            title = "Activate or deactivate plugin",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn set_plugin_active(
        &self,
        Parameters(a): Parameters<PluginArgs>,
        meta: RequestMetaObject,
    ) -> CallToolResult {
        self.write("set_plugin_active", &meta, |s| {
            s.set_plugin_active(&a.slug, a.active)
        })
        .await
    }

    /// Delete a page: it moves to the trash (off the live site) and a snapshot
    /// is kept; restore_snapshot brings it back.
    #[tool(
        name = "delete_page",
        title = "Delete page",
        annotations(
            title = "Delete page",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn delete_page(
        &self,
        Parameters(a): Parameters<PageIdArgs>,
        meta: RequestMetaObject,
    ) -> CallToolResult {
        self.write("delete_page", &meta, |s| s.delete_page(a.id))
            .await
    }

    /// Restore a deleted page from the snapshot delete_page returned.
    #[tool(
        name = "restore_snapshot",
        title = "Restore snapshot",
        annotations(
            title = "Restore snapshot",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn restore_snapshot(
        &self,
        Parameters(a): Parameters<SnapshotArgs>,
        meta: RequestMetaObject,
    ) -> CallToolResult {
        self.write("restore_snapshot", &meta, |s| {
            s.restore_snapshot(&a.snapshot_id)
        })
        .await
    }

    /// Describe what update_page would do and the page's current version,
    /// without changing anything.
    #[tool(
        name = "preview_update_page",
        title = "Preview page update",
        annotations(
            title = "Preview page update",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn preview_update_page(
        &self,
        Parameters(a): Parameters<UpdatePageArgs>,
    ) -> CallToolResult {
        self.read(|s| s.preview_update_page(a.id, a.title.as_deref(), a.body.as_deref()))
            .await
    }

    /// Describe what create_menu_item would do and the menu's current
    /// version, without changing anything.
    #[tool(
        name = "preview_create_menu_item",
        title = "Preview menu item creation",
        annotations(
            title = "Preview menu item creation",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn preview_create_menu_item(
        &self,
        Parameters(a): Parameters<MenuItemArgs>,
    ) -> CallToolResult {
        self.read(|s| s.preview_create_menu_item(&a.menu, &a.label, &a.url))
            .await
    }

    /// Describe what update_option would do and the option's current
    /// version, without changing anything.
    #[tool(
        name = "preview_update_option",
        title = "Preview option update",
        annotations(
            title = "Preview option update",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn preview_update_option(
        &self,
        Parameters(a): Parameters<UpdateOptionArgs>,
    ) -> CallToolResult {
        self.read(|s| s.preview_update_option(&a.name, &a.value))
            .await
    }

    /// Describe what delete_page would do and the page's current version,
    /// without changing anything.
    #[tool(
        name = "preview_delete_page",
        title = "Preview page deletion",
        annotations(
            title = "Preview page deletion",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn preview_delete_page(&self, Parameters(a): Parameters<PageIdArgs>) -> CallToolResult {
        self.read(|s| s.preview_delete_page(a.id)).await
    }

    /// Describe what restore_snapshot would put back over the page as it
    /// is now, and the page's current version, without changing anything.
    #[tool(
        name = "preview_restore_snapshot",
        title = "Preview snapshot restore",
        annotations(
            title = "Preview snapshot restore",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn preview_restore_snapshot(
        &self,
        Parameters(a): Parameters<SnapshotArgs>,
    ) -> CallToolResult {
        self.read(|s| s.preview_restore_snapshot(&a.snapshot_id))
            .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoSite {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("demo-site", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let _guard = self.inner.lock.lock().await;
        let state = SiteState::load(&self.inner.path)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let resources = state
            .pages
            .iter()
            .map(|p| {
                Resource::new(format!("{PAGE_URI_PREFIX}{}", p.id), p.slug.clone())
                    .with_title(p.title.clone())
                    .with_description(format!("Page {} ({:?})", p.id, p.status))
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let not_found =
            || ErrorData::resource_not_found(format!("resource {uri:?} not found"), None);
        let id: u64 = uri
            .strip_prefix(PAGE_URI_PREFIX)
            .and_then(|s| s.parse().ok())
            .ok_or_else(not_found)?;
        let _guard = self.inner.lock.lock().await;
        let state = SiteState::load(&self.inner.path)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let page = state.get_page(id).map_err(|_| not_found())?;
        let text = serde_json::to_string_pretty(&page)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, uri.clone()).with_mime_type("application/json"),
        ])
        .into())
    }
}
