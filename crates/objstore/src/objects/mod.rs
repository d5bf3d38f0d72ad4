//! The object layer between the S3 protocol and the data path: turns a request body into
//! stored data (inline in the index for small objects, erasure-coded pieces otherwise),
//! streams stored data back, and runs the background work (deleting garbage pieces,
//! completing degraded pieces, scanning). It knows nothing of HTTP or S3 XML.

mod heal;
pub mod ingest;
mod read;

pub use heal::{BackgroundConfig, CheckReport, HealStats, ReapStats, spawn_background};
pub use ingest::{BodyError, IngestError, Ingested};

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::datapath::{DataPath, DataPathConfig};
use crate::index::{Index, IndexError, ObjectData, ops};
use crate::layout::{Geometry, Piece};
use crate::placement::StoreSet;

/// Settings of the object layer.
#[derive(Clone, Debug)]
pub struct ObjectConfig {
    /// Geometry of buckets created without one.
    pub default_geometry: Geometry,
    /// Objects up to this size live in the index row itself (see docs/object.md,
    /// "Small objects").
    pub inline_max_bytes: usize,
    /// How long an uncommitted write may take before its pieces count as garbage, and
    /// how long deleted data stays readable for GETs already streaming it.
    pub gc_grace: Duration,
    pub datapath: DataPathConfig,
}

impl Default for ObjectConfig {
    fn default() -> Self {
        ObjectConfig {
            default_geometry: Geometry { data: 2, parity: 1 },
            inline_max_bytes: 16 << 10,
            gc_grace: Duration::from_secs(3600),
            datapath: DataPathConfig::default(),
        }
    }
}

pub struct ObjectLayer {
    pub(crate) index: Index,
    pub(crate) data: DataPath,
    pub(crate) config: ObjectConfig,
    pub(crate) clock: Arc<dyn Clock>,
}

impl ObjectLayer {
    pub fn new(
        index: Index,
        stores: StoreSet,
        config: ObjectConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let data = DataPath::new(stores, config.datapath.clone());
        ObjectLayer {
            index,
            data,
            config,
            clock,
        }
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    pub fn data(&self) -> &DataPath {
        &self.data
    }

    pub fn config(&self) -> &ObjectConfig {
        &self.config
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// When data replaced or deleted now may be reclaimed.
    pub fn gc_due_ms(&self) -> i64 {
        self.now_ms() + self.config.gc_grace.as_millis() as i64
    }

    /// Drops stored data that will not be committed (a failed or refused write): its
    /// shards are deleted now, or queued if a store cannot be reached.
    pub async fn discard(&self, data: &ObjectData) {
        for piece in data.pieces() {
            self.discard_piece(piece).await;
        }
    }

    async fn discard_piece(&self, piece: &Piece) {
        let id = piece.id;
        match self.data.delete_piece(piece).await {
            Ok(()) => {
                let r = self.index.write(move |tx| ops::gc_done(tx, &id)).await;
                if let Err(e) = r {
                    tracing::warn!("forgetting discarded piece {}: {e}", hex::encode(id));
                }
            }
            Err(e) => {
                tracing::warn!(
                    "discarding piece {}: {e}; the reaper retries",
                    hex::encode(id)
                );
                let p = [piece.clone()];
                let now = self.now_ms();
                let r = self
                    .index
                    .write(move |tx| ops::gc_intent_update(tx, &p[0], Some(now)))
                    .await;
                if let Err(e) = r {
                    tracing::warn!("queueing discarded piece {}: {e}", hex::encode(id));
                }
            }
        }
    }

    /// Records pieces that miss shards, for the healer.
    pub async fn mark_degraded(&self, pieces: Vec<Piece>) {
        if pieces.is_empty() {
            return;
        }
        let now = self.now_ms();
        let r: Result<(), IndexError> = self
            .index
            .write(move |tx| ops::degraded_add(tx, &pieces, now))
            .await;
        if let Err(e) = r {
            tracing::warn!("recording degraded pieces: {e}; the scanner will find them");
        }
    }
}
