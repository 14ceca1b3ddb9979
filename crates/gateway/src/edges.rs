//! What the engine's verbs reach beyond the [`Engine`]: the catalog, the
//! upstreams' tool calls, which upstreams are down, and where a person
//! approves. Planning, apply, amend, revert and retry take an [`Ops`] — the
//! engine and these edges — so they run over any [`Edges`]: the
//! [`crate::Gateway`]'s upstream sessions in every face, or a test's own
//! upstream. A verb cannot reach a client's session, the key cache, OAuth
//! or the console through it: what it may touch is in its signature
//! (docs/architecture.md, "The engine and its edges").

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, ProgressNotificationParam};
use rmcp::model::{ProgressToken, RequestMetaObject};
use tokio_util::sync::CancellationToken;

use crate::upstream::{CallError, Routed, Watch};
use crate::{Catalog, Engine, Gateway};

/// Hears an upstream's progress on a running call (each notification is
/// awaited before the next is read).
pub type Heard<'a> = dyn Fn(ProgressNotificationParam) -> BoxFuture<'a, ()> + Send + Sync + 'a;

/// A tool call to an upstream, awaited: a tool result or why there is none.
pub type Called<'a> = BoxFuture<'a, Result<CallToolResult, CallError>>;

/// A tool call for [`Edges::call`]: `params` to `server` (with `meta`,
/// e.g. an operation key) until it answers, times out or `cancel` fires;
/// `heard` hears the upstream's progress.
pub struct ToUpstream<'a> {
    /// The upstream's name.
    pub server: &'a str,
    /// The call.
    pub params: CallToolRequestParams,
    /// Its `_meta`.
    pub meta: Option<RequestMetaObject>,
    /// Cancels it (the upstream is told).
    pub cancel: &'a CancellationToken,
    /// Hears its progress, if anyone listens.
    pub heard: Option<&'a Heard<'a>>,
}

/// The edges the verbs reach, implemented by the gateway over its upstream
/// sessions. Each method says what a verb needs, not how a transport
/// gives it.
pub trait Edges: Send + Sync {
    /// The catalog as it stands: every tool the upstreams offer, with its
    /// effect and settings.
    fn catalog(&self) -> Arc<Catalog>;

    /// The enabled upstreams that are not connected now, with the reason.
    fn down_upstreams(&self) -> BTreeMap<String, String>;

    /// Whether `server` has a live session now.
    fn is_connected(&self, server: &str) -> bool;

    /// Sends `call` to its upstream. `None` when that upstream is not
    /// connected: nothing was sent.
    fn call<'a>(&'a self, call: ToUpstream<'a>) -> Option<Called<'a>>;

    /// Who approves a plan and where, in words an agent may read
    /// ([`Gateway::how_to_approve`]).
    fn how_to_approve(&self) -> String;
}

/// What a plan verb runs on: the engine and its edges. Cheap to copy; it
/// derefs to the [`Engine`].
#[derive(Clone, Copy)]
pub struct Ops<'a> {
    engine: &'a Engine,
    edges: &'a dyn Edges,
}

impl std::fmt::Debug for Ops<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ops")
            .field("engine", self.engine)
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for Ops<'_> {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        self.engine
    }
}

impl<'a> Ops<'a> {
    /// The verbs over `engine`, reaching out through `edges`.
    pub fn new(engine: &'a Engine, edges: &'a dyn Edges) -> Ops<'a> {
        Ops { engine, edges }
    }

    /// The engine alone, for what needs no edge.
    pub fn engine(self) -> &'a Engine {
        self.engine
    }

    /// The current catalog ([`Edges::catalog`]).
    pub fn catalog(self) -> Arc<Catalog> {
        self.edges.catalog()
    }

    /// The upstreams down now ([`Edges::down_upstreams`]).
    pub fn down_upstreams(self) -> BTreeMap<String, String> {
        self.edges.down_upstreams()
    }

    /// Whether `server` is connected ([`Edges::is_connected`]).
    pub fn is_connected(self, server: &str) -> bool {
        self.edges.is_connected(server)
    }

    /// Who approves and where ([`Edges::how_to_approve`]).
    pub fn how_to_approve(self) -> String {
        self.edges.how_to_approve()
    }

    /// A call to an upstream ([`Edges::call`]).
    pub fn call(self, call: ToUpstream<'a>) -> Option<Called<'a>> {
        self.edges.call(call)
    }

    /// A plain call to `server`: no operation key, no progress, never
    /// cancelled (a read or a preview the verb needs before it goes on).
    pub async fn read(
        self,
        server: &str,
        params: CallToolRequestParams,
    ) -> Option<Result<CallToolResult, CallError>> {
        let never = CancellationToken::new();
        let call = ToUpstream {
            server,
            params,
            meta: None,
            cancel: &never,
            heard: None,
        };
        Some(self.edges.call(call)?.await)
    }
}

impl Gateway {
    /// The plan verbs over this gateway's engine and upstream sessions.
    pub fn ops(&self) -> Ops<'_> {
        Ops::new(self, self)
    }
}

impl Edges for Gateway {
    fn catalog(&self) -> Arc<Catalog> {
        Gateway::catalog(self)
    }

    fn down_upstreams(&self) -> BTreeMap<String, String> {
        Gateway::down_upstreams(self)
    }

    fn is_connected(&self, server: &str) -> bool {
        self.upstream(server).is_some()
    }

    fn call<'a>(&'a self, call: ToUpstream<'a>) -> Option<Called<'a>> {
        let ToUpstream {
            server,
            params,
            meta,
            cancel,
            heard,
        } = call;
        let upstream = self.upstream(server)?;
        Some(Box::pin(async move {
            let Some(heard) = heard else {
                return upstream.call(self.metrics(), params, meta, cancel).await;
            };
            // The upstream's progress on this call, routed here by the hub
            // and passed on to `heard`.
            let route = |token: &ProgressToken| -> Routed<'_> {
                let (rx, guard) = self.hub().watch_progress(upstream.name(), token);
                (rx, Box::new(guard))
            };
            let tell = |p: ProgressNotificationParam| -> BoxFuture<'_, ()> { heard(p) };
            let watch = Watch {
                route: &route,
                heard: &tell,
            };
            upstream
                .call_watched(self.metrics(), params, meta, cancel, Some(&watch))
                .await
        }))
    }

    fn how_to_approve(&self) -> String {
        Gateway::how_to_approve(self)
    }
}
