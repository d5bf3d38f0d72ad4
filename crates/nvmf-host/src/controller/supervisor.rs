//! The task that keeps a controller usable: it answers timed-out commands with Abort,
//! resets the controller when a queue loses its connection, a Keep Alive fails or an
//! Abort does not help, and reconnects with exponential backoff until the
//! controller-loss timeout.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use nvme_proto::Command;
use nvme_proto::opcode::admin as admin_op;
use tokio::sync::Notify;

use super::session::{self, Session};
use super::status::ControllerState;
use super::{Inner, events, keepalive, lock};
use crate::error::{HostError, Result, TransportError};
use crate::queue::{Payload, QueuePair, SubmitOptions, TimedOut};

/// How often to look whether an aborted command has completed.
const ABORT_POLL: Duration = Duration::from_millis(5);

/// Starts keep-alive and the asynchronous event loop of the current connection.
pub(super) fn start_connection_tasks(inner: &Arc<Inner>) {
    let weak = Arc::downgrade(inner);
    let mut t = lock(&inner.tasks);
    t.stop_connection_tasks();
    if inner.opts.kato_ms > 0 {
        t.keepalive = Some(keepalive::spawn(
            weak.clone(),
            inner.admin.clone(),
            inner.opts.kato_ms,
        ));
    }
    t.events = Some(events::spawn(weak, inner.admin.clone()));
}

/// Runs until the controller is dropped, closed or lost.
pub(super) async fn run(weak: Weak<Inner>, notify: Arc<Notify>) {
    loop {
        notify.notified().await;
        let reason = {
            let Some(inner) = weak.upgrade() else {
                return;
            };
            if inner.closed.load(Ordering::Acquire) {
                return;
            }
            check(&inner).await
        };
        if let Some(reason) = reason
            && !recover(&weak, reason).await
        {
            return;
        }
    }
}

/// Looks at every queue; returns why the controller must be reset, if it must.
async fn check(inner: &Inner) -> Option<String> {
    if let Some(r) = lock(&inner.reset_request).take() {
        return Some(r);
    }
    for q in inner.queues() {
        if let Some(e) = q.error() {
            return Some(e.to_string());
        }
    }
    for t in inner.admin.take_timeouts() {
        if inner.admin.still_outstanding(&t) {
            return Some(timed_out_text(
                &inner.admin,
                &t,
                "admin commands are not aborted",
            ));
        }
    }
    for q in &inner.io {
        for t in q.take_timeouts() {
            if let Some(r) = abort(inner, q, &t).await {
                return Some(r);
            }
        }
    }
    None
}

fn timed_out_text(q: &QueuePair, t: &TimedOut, then: &str) -> String {
    format!(
        "{} (CID {}) on queue {} of {} timed out after {} ms; {then}",
        t.kind,
        t.cid,
        q.qid(),
        q.addr(),
        t.timeout_ms
    )
}

/// Sends Abort for a timed-out command and waits for it to complete. Returns the reason
/// for a reset when that does not happen.
async fn abort(inner: &Inner, q: &QueuePair, t: &TimedOut) -> Option<String> {
    if !q.still_outstanding(t) {
        return None;
    }
    let wait = Duration::from_millis(
        inner
            .opts
            .io_timeout_ms
            .min(inner.opts.admin_timeout_ms)
            .max(100),
    );
    let mut cmd = Command::new(admin_op::ABORT, 0, 0);
    cmd.set_cdw10(u32::from(q.qid()) | (u32::from(t.cid) << 16));
    let opts = SubmitOptions {
        timeout_ms: Some(wait.as_millis() as u64),
        ..SubmitOptions::default()
    };
    let sent = tokio::time::timeout(wait, inner.admin.submit_with(cmd, Payload::None, opts)).await;
    let aborted = match sent {
        Ok(Ok(done)) if done.cqe.status.is_success() => done.cqe.dw0 & 1 == 0,
        Ok(Ok(done)) => {
            tracing::warn!(addr = %inner.addr, "Abort failed: {:?}", done.cqe.status);
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(addr = %inner.addr, "Abort failed: {e}");
            false
        }
        Err(_) => false,
    };
    if aborted {
        let until = Instant::now() + wait;
        while q.still_outstanding(t) && Instant::now() < until {
            tokio::time::sleep(ABORT_POLL).await;
        }
        if !q.still_outstanding(t) {
            tracing::info!(addr = %inner.addr, qid = q.qid(), cid = t.cid, "timed-out {} aborted", t.kind);
            return None;
        }
    }
    Some(timed_out_text(
        q,
        t,
        if aborted {
            "it did not complete after Abort"
        } else {
            "Abort did not abort it"
        },
    ))
}

/// Resets the controller and reconnects with backoff. Returns false when the controller
/// is gone (lost, closed or dropped).
pub(super) async fn recover(weak: &Weak<Inner>, reason: String) -> bool {
    let lost_at = Instant::now();
    let opts = {
        let Some(inner) = weak.upgrade() else {
            return false;
        };
        tracing::warn!(addr = %inner.addr, subnqn = %inner.subnqn, "resetting controller: {reason}");
        lock(&inner.tasks).stop_connection_tasks();
        inner.status.send_modify(|s| {
            s.state = ControllerState::Reconnecting { attempts: 0 };
            s.last_error = Some(reason.clone());
        });
        detach_all(&inner, &reason).await;
        inner.opts.clone()
    };
    let mut last_error = reason.clone();
    let mut delay = Duration::from_millis(opts.reconnect_delay_ms.max(1));
    let max_delay = Duration::from_millis(opts.reconnect_delay_max_ms.max(opts.reconnect_delay_ms));
    let loss = opts.ctrl_loss_tmo_ms.map(Duration::from_millis);
    let mut attempts = 0u32;
    loop {
        let Some(inner) = weak.upgrade() else {
            return false;
        };
        if inner.closed.load(Ordering::Acquire) {
            return false;
        }
        if loss.is_some_and(|l| lost_at.elapsed() >= l) {
            give_up(&inner, attempts, &last_error).await;
            return false;
        }
        attempts += 1;
        inner.status.send_modify(|s| {
            s.state = ControllerState::Reconnecting { attempts };
        });
        match reconnect(&inner).await {
            Ok(s) => {
                install(&inner, s, attempts);
                return true;
            }
            Err(e) => {
                tracing::warn!(addr = %inner.addr, attempts, "reconnect failed: {e}");
                last_error = e.to_string();
                inner
                    .status
                    .send_modify(|s| s.last_error = Some(last_error.clone()));
                detach_all(&inner, &last_error).await;
            }
        }
        drop(inner);
        let mut pause = delay;
        if let Some(l) = loss {
            pause = pause.min(l.saturating_sub(lost_at.elapsed()));
        }
        tokio::time::sleep(pause).await;
        delay = (delay * 2).min(max_delay);
    }
}

async fn detach_all(inner: &Inner, reason: &str) {
    let r = TransportError::Reset {
        reason: reason.to_string(),
    };
    for q in inner.queues() {
        q.detach(r.clone()).await;
    }
}

/// One reconnect attempt: admin bring-up, then every I/O queue.
async fn reconnect(inner: &Inner) -> Result<Session> {
    let p = inner.params();
    let want = inner.io.len() as u16;
    if p.opts.concat.is_some() {
        // A fresh generated PSK for the new connections (the target keeps only the last).
        let psk = super::concat::generate_tls_psk(&p).await?;
        for q in inner.queues() {
            q.set_tls(Some(psk.clone()));
        }
    }
    let s = session::bring_up_admin(&inner.admin, &p, want).await?;
    if usize::from(s.io_granted) < inner.io.len() {
        return Err(HostError::invalid(
            format!("reconnect to {}", inner.addr),
            format!(
                "controller granted {} I/O queues, fewer than the {} this host had",
                s.io_granted,
                inner.io.len()
            ),
        ));
    }
    let in_capsule = session::io_in_capsule_bytes(&s.id);
    for q in &inner.io {
        q.set_in_capsule_max_bytes(in_capsule);
    }
    session::connect_io_queues(&inner.io, &p, s.cntlid).await?;
    Ok(s)
}

fn install(inner: &Arc<Inner>, s: Session, attempts: u32) {
    let (cntlid, ana) = (s.cntlid, s.ana.clone());
    *inner.session.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(s);
    // Live before the gates open: whoever sees waiting I/O complete sees it live.
    inner.status.send_modify(|st| {
        st.state = ControllerState::Live;
        st.generation += 1;
        st.cntlid = cntlid;
        st.ana = ana;
    });
    for q in inner.queues() {
        q.open_gate();
    }
    start_connection_tasks(inner);
    tracing::info!(addr = %inner.addr, subnqn = %inner.subnqn, cntlid, attempts, "controller reconnected");
}

async fn give_up(inner: &Inner, attempts: u32, last_error: &str) {
    let e = HostError::ControllerLost {
        addr: inner.addr,
        subnqn: inner.subnqn.clone(),
        ctrl_loss_tmo_ms: inner.opts.ctrl_loss_tmo_ms.unwrap_or(0),
        attempts,
        last_error: last_error.to_string(),
    };
    tracing::error!(addr = %inner.addr, "{e}");
    inner.status.send_modify(|s| {
        s.state = ControllerState::Lost {
            reason: e.to_string(),
        };
    });
    for q in inner.queues() {
        q.fail_all(e.clone());
    }
    detach_all(inner, last_error).await;
}
