//! Background work of a gateway: the reaper deletes the shards of garbage pieces (and of
//! writes that never committed), the healer completes pieces known to miss shards, and
//! the scanner walks every piece of the index checking (and with `deep`, reading and
//! verifying) every shard. Any number of gateways may run these at once: claims in the
//! index keep two reapers off one piece, and a repair is idempotent.

use std::sync::Arc;
use std::time::Duration;

use super::ObjectLayer;
use crate::datapath::{ShardCount, StripeHealth};
use crate::index::{Index, IndexError, ops};
use crate::layout::Piece;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReapStats {
    pub pieces_deleted: usize,
    /// Pieces whose stores could not all be reached (retried later).
    pub pieces_retried: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealStats {
    pub pieces_checked: usize,
    pub shards_repaired: usize,
    /// Pieces still missing shards (stores down, or too few shards left).
    pub pieces_degraded: usize,
    /// Pieces with fewer than k readable shards in some stripe.
    pub pieces_unreadable: usize,
}

/// How often the background loops run.
#[derive(Clone, Debug)]
pub struct BackgroundConfig {
    /// Reaper and degraded-piece healer.
    pub interval: Duration,
    /// Full scan (existence of every shard).
    pub scan_interval: Duration,
    /// Every this many scans reads and verifies every shard.
    pub deep_every: u32,
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        BackgroundConfig {
            interval: Duration::from_secs(5),
            scan_interval: Duration::from_secs(3600),
            deep_every: 24,
        }
    }
}

const BATCH: usize = 64;

impl ObjectLayer {
    /// Deletes the shards of pieces that are due; returns what it did.
    pub async fn reap(&self) -> Result<ReapStats, IndexError> {
        let mut stats = ReapStats::default();
        loop {
            let now = self.now_ms();
            let retry = now + self.config.gc_grace.as_millis().min(600_000) as i64;
            let claimed = self
                .index
                .write(move |tx| ops::gc_claim(tx, now, retry, BATCH))
                .await?;
            if claimed.is_empty() {
                return Ok(stats);
            }
            let n = claimed.len();
            for piece in claimed {
                match self.data.delete_piece(&piece).await {
                    Ok(()) => {
                        let id = piece.id;
                        self.index.write(move |tx| ops::gc_done(tx, &id)).await?;
                        stats.pieces_deleted += 1;
                    }
                    Err(e) => {
                        tracing::info!(piece = %hex::encode(piece.id), "delete postponed: {e}");
                        stats.pieces_retried += 1;
                    }
                }
            }
            if n < BATCH {
                return Ok(stats);
            }
        }
    }

    async fn heal_one(&self, piece: &Piece, deep: bool, stats: &mut HealStats) -> bool {
        stats.pieces_checked += 1;
        match self.data.heal_piece(piece, deep).await {
            Ok(h) => {
                stats.shards_repaired += h.repaired;
                if h.degraded() {
                    stats.pieces_degraded += 1;
                    false
                } else {
                    true
                }
            }
            Err(e) => {
                tracing::warn!(piece = %hex::encode(piece.id), "heal: {e}");
                if e.is_unavailable() {
                    stats.pieces_degraded += 1;
                } else {
                    stats.pieces_unreadable += 1;
                }
                false
            }
        }
    }

    /// Completes the pieces recorded as degraded; those whole again are forgotten.
    pub async fn heal_degraded(&self) -> Result<HealStats, IndexError> {
        let mut stats = HealStats::default();
        let pieces = self.index.read(|tx| ops::degraded_list(tx, 1024)).await?;
        for piece in pieces {
            if self.heal_one(&piece, false, &mut stats).await {
                let id = piece.id;
                self.index
                    .write(move |tx| ops::degraded_remove(tx, &id))
                    .await?;
            }
        }
        Ok(stats)
    }

    /// Checks every piece the index references (object versions and multipart parts),
    /// repairing what it can and recording what it cannot.
    pub async fn scan(&self, deep: bool) -> Result<HealStats, IndexError> {
        let mut stats = HealStats::default();
        let mut referenced = ReferencedPieces::ObjectsAfter(0);
        while let Some(pieces) = referenced.next(&self.index).await? {
            for piece in pieces {
                if !self.heal_one(&piece, deep, &mut stats).await {
                    self.mark_degraded(vec![piece]).await;
                }
            }
        }
        Ok(stats)
    }
}

/// Every piece the index references, a batch at a time: object versions (after a
/// cursor), then multipart parts.
enum ReferencedPieces {
    ObjectsAfter(i64),
    Parts,
    Done,
}

impl ReferencedPieces {
    async fn next(&mut self, index: &Index) -> Result<Option<Vec<Piece>>, IndexError> {
        loop {
            match *self {
                ReferencedPieces::ObjectsAfter(cursor) => {
                    let batch = index
                        .read(move |tx| ops::object_pieces_after(tx, cursor, BATCH))
                        .await?;
                    let Some(last) = batch.last().map(|(id, _)| *id) else {
                        *self = ReferencedPieces::Parts;
                        continue;
                    };
                    *self = ReferencedPieces::ObjectsAfter(last);
                    return Ok(Some(batch.into_iter().flat_map(|(_, p)| p).collect()));
                }
                ReferencedPieces::Parts => {
                    *self = ReferencedPieces::Done;
                    return Ok(Some(index.read(ops::part_pieces).await?));
                }
                ReferencedPieces::Done => return Ok(None),
            }
        }
    }
}

/// What [`ObjectLayer::check`] found: every piece the index references and its shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    pub pieces: usize,
    /// Pieces with a shard missing or on a store that could not be asked.
    pub pieces_incomplete: usize,
    /// Pieces whose shard map is invalid (cannot be checked).
    pub pieces_invalid: usize,
    pub shards: ShardCount,
}

impl CheckReport {
    fn add(&mut self, r: Result<ShardCount, crate::datapath::DataError>) {
        self.pieces += 1;
        match r {
            Ok(c) => {
                if !c.complete() {
                    self.pieces_incomplete += 1;
                }
                self.shards.add(c);
            }
            Err(_) => self.pieces_invalid += 1,
        }
    }
}

impl ObjectLayer {
    /// Counts the shards of every piece the index references (object versions and
    /// multipart parts), changing nothing: what `ferrobay s3 check` prints.
    pub async fn check(&self) -> Result<CheckReport, IndexError> {
        let mut report = CheckReport::default();
        let mut referenced = ReferencedPieces::ObjectsAfter(0);
        while let Some(pieces) = referenced.next(&self.index).await? {
            for piece in pieces {
                report.add(self.data.count_shards(&piece).await);
            }
        }
        Ok(report)
    }
}

/// Runs the reaper, the healer and the scanner until `stop` turns true.
pub fn spawn_background(
    layer: Arc<ObjectLayer>,
    config: BackgroundConfig,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut since_scan = Duration::ZERO;
        let mut scans = 0u32;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(config.interval) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
            match layer.reap().await {
                Ok(s) if s != ReapStats::default() => tracing::info!(?s, "reaper"),
                Ok(_) => {}
                Err(e) => tracing::warn!("reaper: {e}"),
            }
            match layer.heal_degraded().await {
                Ok(s) if s.pieces_checked > 0 => tracing::info!(?s, "healer"),
                Ok(_) => {}
                Err(e) => tracing::warn!("healer: {e}"),
            }
            since_scan += config.interval;
            if since_scan >= config.scan_interval {
                since_scan = Duration::ZERO;
                scans += 1;
                let deep = config.deep_every > 0 && scans.is_multiple_of(config.deep_every);
                match layer.scan(deep).await {
                    Ok(s) => tracing::info!(?s, deep, "scan finished"),
                    Err(e) => tracing::warn!("scan: {e}"),
                }
            }
        }
    })
}

impl StripeHealth {
    /// Nothing to report.
    pub fn is_clean(&self) -> bool {
        *self == StripeHealth::default()
    }
}
