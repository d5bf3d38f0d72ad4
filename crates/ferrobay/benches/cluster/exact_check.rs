//! After a failover: each block written holds its last acknowledged write (bench's
//! checker, `bench::check_read_block`, per block).

use std::collections::HashMap;
use std::sync::Arc;

use blockdev::{BlockDevice, IoBuf};
use serde::Serialize;

/// The exact check: each block's last acknowledged write must be what it holds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ExactCheck {
    pub(crate) blocks_checked: u64,
    /// Holding an older write (or none) than the last acknowledged.
    pub(crate) lost: u64,
    pub(crate) misdirected: u64,
    pub(crate) corrupt: u64,
    pub(crate) read_errors: u64,
}

impl ExactCheck {
    pub(crate) fn mismatches(&self) -> u64 {
        self.lost + self.misdirected + self.corrupt + self.read_errors
    }
}

pub(crate) async fn exact_check(
    dev: &Arc<dyn BlockDevice>,
    acked: HashMap<u64, u32>,
) -> ExactCheck {
    const WINDOW: usize = 32;
    let mut out = ExactCheck::default();
    let mut set = tokio::task::JoinSet::new();
    let mut todo = acked.into_iter();
    loop {
        while set.len() < WINDOW {
            let Some((off, id)) = todo.next() else { break };
            let dev = dev.clone();
            set.spawn(async move {
                let r = dev.read(off, IoBuf::new_zeroed(4096)).await;
                (off, id, r)
            });
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        out.blocks_checked += 1;
        let Ok((off, id, r)) = done else {
            out.read_errors += 1;
            continue;
        };
        let Ok(buf) = r else {
            out.read_errors += 1;
            continue;
        };
        let mut v = bench::VerifyReport::default();
        bench::check_read_block(&buf, off, id, &mut v);
        // One verdict per block; a torn block holds another write than acknowledged.
        if v.misdirected > 0 {
            out.misdirected += 1;
        } else if v.corrupt > 0 {
            out.corrupt += 1;
        } else if v.lost > 0 || v.torn > 0 {
            out.lost += 1;
        }
    }
    out
}
