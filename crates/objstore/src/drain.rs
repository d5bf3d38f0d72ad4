//! What the gateway does with a request body the S3 handler did not read.
//!
//! Many answers come before the body is read: a bad upload id, a missing bucket, a failed
//! condition, a bad signature. HTTP/1.1 then leaves the rest of the body on the
//! connection. hyper reads a little of it and otherwise closes the connection; a client
//! still sending then gets a TCP reset that can destroy the answer before it reads it, and
//! a body that arrives just after hyper looked is taken as the start of the next request
//! (boto3 saw `(400, '400')`, a bare 400 from the HTTP layer, and `(404, '404')`).
//!
//! So the handler reads the request body through a [`SharedBody`] whose inner body stays
//! with the gateway, and after the handler answered, [`finish_body`] reads and discards
//! what is left when it is small ([`DRAIN_MAX_BYTES`], within [`DRAIN_TIMEOUT_MS`]): the
//! connection stays usable. A larger or unknown rest is not waited for: the answer says
//! `Connection: close`, and the connection's lingering close ([`crate::linger`]) keeps the
//! reset away from the answer.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// The largest unread rest of a body the gateway reads and discards after answering.
pub const DRAIN_MAX_BYTES: u64 = 1 << 20;
/// How long it waits for that rest.
pub const DRAIN_TIMEOUT_MS: u64 = 5_000;

type Slot = Arc<Mutex<Option<Incoming>>>;

fn lock(slot: &Slot) -> MutexGuard<'_, Option<Incoming>> {
    // A panic while polling leaves nothing half-done in an Option: keep using it.
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The request body as the handler sees it; the gateway keeps a handle to what is left.
pub struct SharedBody {
    slot: Slot,
}

/// The gateway's handle to a request body lent to the handler.
pub struct BodyRest {
    slot: Slot,
}

/// Splits `body` into what the handler reads and the gateway's handle to the rest.
pub fn share(body: Incoming) -> (SharedBody, BodyRest) {
    let slot = Arc::new(Mutex::new(Some(body)));
    (SharedBody { slot: slot.clone() }, BodyRest { slot })
}

impl Body for SharedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match lock(&self.slot).as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        lock(&self.slot).as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        lock(&self.slot)
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

/// What became of a body's unread rest.
#[derive(Debug, PartialEq, Eq)]
pub enum Rest {
    /// Nothing was left (or all of it was read now): the connection can be reused.
    Clean,
    /// Too much or too slow: the connection must close after the answer.
    Close,
}

/// After the handler answered: reads and discards a small unread rest of the body.
pub async fn finish_body(rest: BodyRest) -> Rest {
    let Some(mut body) = lock(&rest.slot).take() else {
        return Rest::Clean;
    };
    if body.is_end_stream() {
        return Rest::Clean;
    }
    match body.size_hint().upper() {
        Some(n) if n <= DRAIN_MAX_BYTES => {}
        _ => return Rest::Close,
    }
    let drain = async {
        let mut read_bytes = 0u64;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return Rest::Close };
            read_bytes += frame.data_ref().map_or(0, |d| d.len() as u64);
            if read_bytes > DRAIN_MAX_BYTES {
                return Rest::Close;
            }
        }
        Rest::Clean
    };
    tokio::time::timeout(Duration::from_millis(DRAIN_TIMEOUT_MS), drain)
        .await
        .unwrap_or(Rest::Close)
}
