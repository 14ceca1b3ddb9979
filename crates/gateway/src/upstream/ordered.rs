//! A transport wrapper that hands an upstream's progress to the hub in
//! wire order. Apart from the connection code because it sits in every
//! transport plangate opens, for the life of the session.

use std::future::Future;
use std::sync::{Arc, Weak};

use rmcp::RoleClient;

use super::UpstreamClient;
use crate::Gateway;

/// Hands an upstream's progress notifications to the hub as they come off
/// the wire, in order, before any later message (such as the call's
/// result) reaches rmcp — which runs notification handlers in spawned
/// tasks and so could deliver a call's result before the progress the
/// upstream sent just ahead of it.
pub(super) struct OrderedProgress<T> {
    inner: T,
    name: Arc<str>,
    gw: Weak<Gateway>,
}

impl<T> OrderedProgress<T> {
    pub(super) fn new(inner: T, client: &UpstreamClient) -> Self {
        OrderedProgress {
            inner,
            name: client.name.clone(),
            gw: client.gw.clone(),
        }
    }
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient>
    for OrderedProgress<T>
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if let rmcp::model::JsonRpcMessage::Notification(n) = &message
                && let rmcp::model::ServerNotification::ProgressNotification(p) = &n.notification
                && let Some(gw) = self.gw.upgrade()
            {
                gw.hub().progress(&self.name, p.params.clone());
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
