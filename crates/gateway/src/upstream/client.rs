//! plangate's client handler towards one upstream ([`UpstreamClient`]):
//! what it declares, and where the requests and notifications an upstream
//! sends go — to the client whose call is in progress, to the hub, or to a
//! refresh of the catalog. Apart from the connection code because it runs
//! for the life of a session, not once per attempt.

use std::sync::{Arc, Weak};

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationAction, ErrorCode, Implementation,
    ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam, ProtocolVersion,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, RoleClient};
use tokio::sync::oneshot;

use super::stderr::StderrTail;
use super::{ASK_TIMEOUT, Ask, Downstream, oauth, related};
use crate::Gateway;

/// plangate's client side towards one upstream. It declares elicitation
/// and sampling so upstreams may ask during a call; what they ask is routed
/// to the client whose call is in progress (handed to its gateway as
/// `Downstream`). It does not declare roots: an upstream shared by
/// several clients cannot be given one client's roots.
#[derive(Clone)]
pub struct UpstreamClient {
    pub(super) name: Arc<str>,
    pub(super) gw: Weak<Gateway>,
    /// What the upstream writes to stderr in this connection attempt.
    pub(super) stderr: StderrTail,
    /// Where its OAuth credentials are, when there is no gateway to ask
    /// (`config check`).
    vault: Option<oauth::Vault>,
}

impl UpstreamClient {
    /// A handler for upstream `name` reporting to `gw`.
    pub(crate) fn new(name: &str, gw: Weak<Gateway>) -> Self {
        UpstreamClient {
            name: Arc::from(name),
            gw,
            stderr: StderrTail::default(),
            vault: None,
        }
    }

    /// A handler that reports to no gateway (for `config check`).
    pub fn detached(name: &str) -> Self {
        UpstreamClient::new(name, Weak::new())
    }

    /// [`UpstreamClient::detached`], with OAuth credentials from `vault`.
    pub fn detached_with(name: &str, vault: oauth::Vault) -> Self {
        UpstreamClient {
            vault: Some(vault),
            ..UpstreamClient::new(name, Weak::new())
        }
    }

    /// Where this upstream's OAuth credentials are.
    pub(super) fn vault(&self) -> Option<oauth::Vault> {
        self.vault.clone().or_else(|| {
            self.gw.upgrade().map(|g| oauth::Vault {
                store: g.store().clone(),
                material: g.material().clone(),
            })
        })
    }

    /// Where a request this upstream sent goes (see
    /// [`Downstream::ask_target`]); `None` after logging why it goes
    /// nowhere.
    fn ask_sender(
        &self,
        what: &str,
        cx: &mut RequestContext<RoleClient>,
    ) -> Option<tokio::sync::mpsc::Sender<Ask>> {
        // rmcp marks a request with the POST stream it came on (SEP-2260);
        // plangate's own tag says the same for a stream resumed by GET.
        let tagged = related::take(&mut cx.meta.0.0);
        let related = match cx.extensions.get::<rmcp::service::InboundStreamOrigin>() {
            Some(rmcp::service::InboundStreamOrigin::OutboundRequest(id)) => Some(id.clone()),
            _ => tagged,
        };
        let gw = self.gw.upgrade()?;
        match gw.ask_target(&self.name, related.as_ref()) {
            Ok(sender) => Some(sender),
            Err(why) => {
                tracing::info!(upstream = %self.name, "{what} from the upstream declined: {why}");
                None
            }
        }
    }
}

fn declined(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::INVALID_REQUEST,
        format!(
            "plangate declined {what}: no client call to this server is in progress that could answer it"
        ),
        None,
    )
}

async fn relay<T>(
    sender: tokio::sync::mpsc::Sender<Ask>,
    make: impl FnOnce(oneshot::Sender<Result<T, ErrorData>>) -> Ask,
    what: &str,
) -> Result<T, ErrorData> {
    let (tx, rx) = oneshot::channel();
    if sender.send(make(tx)).await.is_err() {
        return Err(declined(what));
    }
    match tokio::time::timeout(ASK_TIMEOUT, rx).await {
        Ok(Ok(answer)) => answer,
        _ => Err(declined(what)),
    }
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = serde_json::from_value(
            serde_json::json!({"elicitation": {"form": {}}, "sampling": {}}),
        )
        .unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("plangate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        mut cx: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        match self.ask_sender("elicitation", &mut cx) {
            Some(sender) => relay(sender, |tx| Ask::Elicit(request, tx), "elicitation").await,
            None => Ok(ElicitResult::new(ElicitationAction::Decline)),
        }
    }

    async fn create_message(
        &self,
        request: CreateMessageRequestParams,
        mut cx: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        match self.ask_sender("sampling", &mut cx) {
            Some(sender) => relay(sender, |tx| Ask::Sample(request, tx), "sampling").await,
            None => Err(declined("sampling")),
        }
    }

    async fn list_roots(
        &self,
        mut cx: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        match self.ask_sender("roots/list", &mut cx) {
            Some(sender) => relay(sender, Ask::Roots, "roots/list").await,
            None => Err(declined("roots/list")),
        }
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        mut cx: NotificationContext<RoleClient>,
    ) {
        let related = related::take(&mut cx.meta.0.0);
        if let Some(gw) = self.gw.upgrade() {
            gw.upstream_log(&self.name, related.as_ref(), params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        if let Some(gw) = self.gw.upgrade() {
            gw.upstream_resource_updated(&self.name, &params.uri).await;
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _cx: NotificationContext<RoleClient>,
    ) {
        if let Some(gw) = self.gw.upgrade() {
            gw.upstream_progress(&self.name, params);
        }
    }

    async fn on_tool_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        tracing::info!(upstream = %self.name, "upstream tool list changed");
        if let Some(gw) = self.gw.upgrade() {
            let name = self.name.to_string();
            // Refresh outside the notification handler: it sends requests
            // over this very connection.
            tokio::spawn(async move { gw.refresh_upstream(&name).await });
        }
    }

    async fn on_resource_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        if let Some(gw) = self.gw.upgrade() {
            let name = self.name.to_string();
            tokio::spawn(async move { gw.refresh_upstream(&name).await });
        }
    }

    async fn on_prompt_list_changed(&self, _cx: NotificationContext<RoleClient>) {
        if let Some(gw) = self.gw.upgrade() {
            let name = self.name.to_string();
            tokio::spawn(async move { gw.refresh_upstream(&name).await });
        }
    }
}
