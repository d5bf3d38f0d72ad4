//! Asynchronous events: one Asynchronous Event Request kept outstanding (as the Linux
//! host does); each event is acted on and published in the controller's status. Reading
//! the log page an event names clears it, so the controller can report the next one.

use std::sync::{Arc, Weak};

use nvme_proto::Command;
use nvme_proto::features::{AerEvent, aer_notice, aer_type};
use nvme_proto::log::{AnaLog, ChangedNsList, GetLogPageCommand, lid};
use nvme_proto::opcode::admin as admin_op;
use tokio::task::JoinHandle;

use super::{Controller, Inner, session};
use crate::discovery::{DiscoveryLogRead, read_discovery_log};
use crate::error::{HostError, Result};
use crate::queue::{Payload, QueuePair, SubmitOptions};

/// Bytes read from a log page this host does not interpret, to clear its event.
const OTHER_LOG_BYTES: usize = 512;
/// The Reservation Notification log is 64 bytes.
const RESERVATION_LOG_BYTES: usize = 64;

pub(crate) fn spawn(owner: Weak<Inner>, admin: QueuePair) -> JoinHandle<()> {
    tokio::spawn(async move {
        let opts = SubmitOptions {
            no_timeout: true,
            ..SubmitOptions::default()
        };
        loop {
            let cmd = Command::new(admin_op::ASYNC_EVENT_REQUEST, 0, 0);
            let done = match admin.submit_with(cmd, Payload::None, opts).await {
                Ok(d) => d,
                // The connection went; the supervisor starts a new loop after reconnecting.
                Err(_) => return,
            };
            if !done.cqe.status.is_success() {
                tracing::info!(addr = %admin.addr(), "Asynchronous Event Request refused ({:?}); no events from this controller", done.cqe.status);
                return;
            }
            let ev = AerEvent::from_dw0(done.cqe.dw0);
            let Some(inner) = owner.upgrade() else {
                return;
            };
            let ctrl = Controller { inner };
            if let Err(e) = handle(&ctrl, ev).await {
                tracing::warn!(addr = %admin.addr(), "handling asynchronous event {ev:?}: {e}");
            }
        }
    })
}

/// What an event changed, applied to the status together with the event count.
enum Update {
    Nothing,
    ChangedNs(Vec<u32>),
    Ana(AnaLog),
    Discovery(DiscoveryLogRead),
}

async fn handle(ctrl: &Controller, ev: AerEvent) -> Result<()> {
    tracing::debug!(addr = %ctrl.addr(), "asynchronous event {ev:?}");
    let inner = &ctrl.inner;
    let update = match (ev.event_type, ev.info) {
        (aer_type::NOTICE, aer_notice::NS_ATTRIBUTE_CHANGED) => ctrl
            .get_log_page(lid::CHANGED_NS_LIST, 0xFFFF_FFFF, 0, ChangedNsList::BYTES)
            .await
            .and_then(|b| {
                ChangedNsList::decode(&b)
                    .map_err(|e| HostError::invalid("Changed Namespace List", e.to_string()))
            })
            .map(|list| Update::ChangedNs(list.nsids)),
        (aer_type::NOTICE, aer_notice::ANA_CHANGE) => {
            let sess = inner.session();
            session::read_ana_log(ctrl.admin(), &sess.id, sess.max_transfer_bytes)
                .await
                .map(Update::Ana)
        }
        (aer_type::NOTICE, aer_notice::DISCOVERY_LOG_CHANGE) => {
            read_discovery_log(ctrl).await.map(Update::Discovery)
        }
        _ if ev.log_page != 0 => {
            let len = if ev.log_page == lid::RESERVATION_NOTIFICATION {
                RESERVATION_LOG_BYTES
            } else {
                OTHER_LOG_BYTES
            };
            let t = GetLogPageCommand::new(ev.log_page, 0xFFFF_FFFF, 0, 4);
            ctrl.get_log_page_with(t, 0, len)
                .await
                .map(|_| Update::Nothing)
        }
        _ => Ok(Update::Nothing),
    };
    let (update, result) = match update {
        Ok(u) => (u, Ok(())),
        Err(e) => (Update::Nothing, Err(e)),
    };
    inner.status.send_modify(|s| {
        s.events += 1;
        s.last_event = Some(ev);
        match update {
            Update::Nothing => {}
            Update::ChangedNs(nsids) => {
                s.ns_changes += 1;
                s.changed_namespaces = Arc::from(nsids);
            }
            Update::Ana(log) => s.ana = Some(Arc::new(log)),
            Update::Discovery(log) => {
                s.discovery_changes += 1;
                s.discovery_log = Some(Arc::new(log));
            }
        }
    });
    result
}
