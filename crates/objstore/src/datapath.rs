//! Erasure-coded pieces over shard stores: write a piece stripe by stripe, read a stripe
//! back (rebuilding from parity and rewriting bad or missing shards: heal on read),
//! check and repair a whole piece (the scanner), delete a piece's shards.
//!
//! Write quorum is k shards per stripe: with up to m stores of a piece down, writes go on
//! and the piece is reported degraded, for the healer to complete when the stores return.

use std::ops::Range;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use blockdev::IoBuf;
use bytes::Bytes;
use erasure::ReedSolomon;
use futures::future::join_all;

use crate::format::{self, HEADER_BYTES, ShardHeader};
use crate::layout::{Geometry, LayoutError, Piece};
use crate::placement::{PlacementError, StoreSet};
use crate::shard::{ShardError, ShardStore, StoreMode, buffers as shard_buffers};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// Fewer than k stores took a stripe: the write failed (a 503 for the client).
    #[error(
        "only {written} of {shards} shards of a stripe could be stored, {needed} needed; \
         {cause}"
    )]
    NotEnoughStores {
        written: usize,
        needed: usize,
        shards: usize,
        cause: String,
    },
    /// Fewer than k shards of a stripe could be read.
    #[error(
        "piece {piece} stripe {stripe}: {readable} of {shards} shards readable, {needed} needed; {cause}"
    )]
    Unreadable {
        piece: String,
        stripe: u32,
        readable: usize,
        needed: usize,
        shards: usize,
        /// True when stores were unreachable (the data may come back with them).
        unavailable: bool,
        cause: String,
    },
    #[error(transparent)]
    Placement(#[from] PlacementError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("erasure code: {0}")]
    Erasure(#[from] erasure::ErasureError),
    /// Some shard stores could not be reached for a delete; retry later.
    #[error("{0} shard deletes could not reach their store")]
    DeleteIncomplete(usize),
}

impl DataError {
    /// Whether the cause is stores being unreachable (503) rather than data loss (500).
    pub fn is_unavailable(&self) -> bool {
        match self {
            DataError::NotEnoughStores { .. } | DataError::DeleteIncomplete(_) => true,
            DataError::Unreadable { unavailable, .. } => *unavailable,
            _ => false,
        }
    }
}

/// Settings of the data path.
#[derive(Clone, Debug)]
pub struct DataPathConfig {
    /// Payload bytes per shard of a full stripe (a stripe holds k times this).
    pub shard_bytes: u32,
    /// A store call that takes longer counts as the store being unavailable.
    pub shard_timeout: Duration,
}

impl Default for DataPathConfig {
    fn default() -> Self {
        DataPathConfig {
            shard_bytes: 1 << 20,
            shard_timeout: Duration::from_secs(10),
        }
    }
}

/// Bytes `within` of a stripe whose data is `chunks` (the data shards' payloads in
/// order), without copying.
fn cut(chunks: Vec<Bytes>, within: Range<usize>) -> Vec<Bytes> {
    let mut out = Vec::with_capacity(chunks.len());
    let mut base = 0;
    for c in chunks {
        let (lo, hi) = (base, base + c.len());
        base = hi;
        let start = within.start.max(lo);
        let end = within.end.min(hi);
        if start < end {
            out.push(c.slice(start - lo..end - lo));
        }
    }
    out
}

pub struct DataPath {
    /// Swapped whole when the stores change ([`DataPath::set_stores`]); each operation
    /// works on the set it started with.
    stores: RwLock<Arc<StoreSet>>,
    config: DataPathConfig,
}

/// The outcome of one shard fetch.
enum Fetched {
    /// The shard's payload (checked).
    Ok(Bytes),
    /// Not there, or not the shard asked for: rebuild and rewrite.
    Bad(String),
    /// The store could not be reached: rebuild, cannot rewrite now.
    Unreachable(String),
}

/// What reading or checking a stripe found besides the data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StripeHealth {
    /// Shards found bad or missing and rewritten.
    pub repaired: usize,
    /// Shards found bad or missing whose rewrite failed.
    pub repair_failed: usize,
    /// Shards on unreachable stores (the piece stays degraded).
    pub unreachable: usize,
}

/// What [`DataPath::count_shards`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShardCount {
    pub present: usize,
    pub missing: usize,
    /// On stores that could not be asked.
    pub unreachable: usize,
}

impl ShardCount {
    pub fn add(&mut self, other: ShardCount) {
        self.present += other.present;
        self.missing += other.missing;
        self.unreachable += other.unreachable;
    }

    /// Every shard is where it should be.
    pub fn complete(&self) -> bool {
        self.missing == 0 && self.unreachable == 0
    }
}

impl StripeHealth {
    pub fn add(&mut self, other: StripeHealth) {
        self.repaired += other.repaired;
        self.repair_failed += other.repair_failed;
        self.unreachable += other.unreachable;
    }

    /// Whether some shard of the stripe is still not where it should be.
    pub fn degraded(&self) -> bool {
        self.unreachable > 0 || self.repair_failed > 0
    }
}

impl DataPath {
    pub fn new(stores: StoreSet, config: DataPathConfig) -> Self {
        assert!(
            config.shard_bytes > 0 && config.shard_bytes as usize <= format::MAX_PAYLOAD_BYTES,
            "shard_bytes must fit one store value with its header"
        );
        DataPath {
            stores: RwLock::new(Arc::new(stores)),
            config,
        }
    }

    /// The stores now (a snapshot: a later [`set_stores`](Self::set_stores) does not
    /// change it).
    pub fn stores(&self) -> Arc<StoreSet> {
        self.stores
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the stores new pieces are placed on and existing shards are looked up
    /// in (a store pool that grew, a store that reconnected under a new handle). Pieces
    /// keep the store ids of their shard maps: a store missing from the new set reads as
    /// unavailable, so keep every store that holds shards.
    pub fn set_stores(&self, stores: StoreSet) {
        *self
            .stores
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(stores);
    }

    pub fn config(&self) -> &DataPathConfig {
        &self.config
    }

    /// Starts a new piece of geometry `g` on stores chosen by placement.
    pub fn writer(&self, g: Geometry) -> Result<PieceWriter<'_>, DataError> {
        let id = *uuid::Uuid::new_v4().as_bytes();
        let stores = self.stores().place(&id, g.total())?;
        let rs = ReedSolomon::new(usize::from(g.data), usize::from(g.parity))?;
        Ok(PieceWriter {
            dp: self,
            rs,
            piece: Piece {
                id,
                size: 0,
                geometry: g,
                shard_bytes: self.config.shard_bytes,
                stores,
            },
            stripes: 0,
            finished_short: false,
            degraded: false,
        })
    }

    fn store_of(&self, piece: &Piece, shard: usize) -> Result<Arc<dyn ShardStore>, String> {
        self.stores()
            .get(&piece.stores[shard])
            .cloned()
            .ok_or_else(|| format!("shard store {} is not configured", piece.stores[shard]))
    }

    async fn timed<T>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = Result<T, ShardError>>,
    ) -> Result<T, ShardError> {
        match tokio::time::timeout(self.config.shard_timeout, f).await {
            Ok(r) => r,
            Err(_) => Err(ShardError::Unavailable(format!(
                "{what} timed out after {} ms",
                self.config.shard_timeout.as_millis()
            ))),
        }
    }

    async fn put_shard(
        &self,
        piece: &Piece,
        stripe: u32,
        shard: usize,
        value: Bytes,
    ) -> Result<(), ShardError> {
        let store = self
            .store_of(piece, shard)
            .map_err(ShardError::Unavailable)?;
        let key = piece.address(stripe, shard).key();
        self.timed("store", store.store(key, value, StoreMode::Upsert))
            .await
    }

    async fn put_shard_buf(
        &self,
        piece: &Piece,
        stripe: u32,
        shard: usize,
        value: IoBuf,
    ) -> Result<(), ShardError> {
        let store = self
            .store_of(piece, shard)
            .map_err(ShardError::Unavailable)?;
        let key = piece.address(stripe, shard).key();
        self.timed("store", store.store_buf(key, value, StoreMode::Upsert))
            .await
    }

    async fn fetch(&self, piece: &Piece, stripe: u32, shard: usize) -> Fetched {
        let store = match self.store_of(piece, shard) {
            Ok(s) => s,
            Err(e) => return Fetched::Unreachable(e),
        };
        let address = piece.address(stripe, shard);
        let expected_len = HEADER_BYTES + piece.payload_len(stripe);
        let value = match self
            .timed(
                "retrieve",
                store.retrieve_value(address.key(), expected_len),
            )
            .await
        {
            Ok((value, size)) if size == expected_len => value,
            Ok((_, size)) => {
                return Fetched::Bad(format!(
                    "shard {shard} on {} is {size} bytes, expected {expected_len}",
                    store.id()
                ));
            }
            Err(ShardError::Unavailable(e)) => return Fetched::Unreachable(e),
            Err(e) => return Fetched::Bad(format!("shard {shard} on {}: {e}", store.id())),
        };
        match format::decode(&value, &address) {
            // The payload stays in the buffer it was received into.
            Ok(_) => Fetched::Ok(value.slice(HEADER_BYTES..)),
            Err(e) => Fetched::Bad(format!("shard {shard} on {}: {e}", store.id())),
        }
    }

    fn shard_header(piece: &Piece, stripe: u32, shard: usize, payload_bytes: usize) -> ShardHeader {
        ShardHeader {
            address: piece.address(stripe, shard),
            data_shards: piece.geometry.data,
            parity_shards: piece.geometry.parity,
            payload_bytes: payload_bytes as u32,
            stripe_data_bytes: piece.stripe_len(stripe) as u32,
        }
    }

    fn shard_value(piece: &Piece, stripe: u32, shard: usize, payload: &[u8]) -> Bytes {
        let header = Self::shard_header(piece, stripe, shard, payload.len());
        Bytes::from(format::encode(&header, payload))
    }

    /// Reads stripe `stripe` of `piece`: its object bytes. Missing or bad shards are
    /// rebuilt from the others and rewritten before this returns.
    pub async fn read_stripe(
        &self,
        piece: &Piece,
        stripe: u32,
    ) -> Result<(Vec<u8>, StripeHealth), DataError> {
        let all = 0..piece.stripe_len(stripe);
        let (chunks, health) = self.read_stripe_chunks(piece, stripe, all).await?;
        Ok((chunks.concat(), health))
    }

    /// [`read_stripe`](Self::read_stripe) of the stripe's object bytes `within`, as
    /// slices of the data shards' payloads in order: the bytes stay in the buffers they
    /// were received into.
    pub async fn read_stripe_chunks(
        &self,
        piece: &Piece,
        stripe: u32,
        within: Range<usize>,
    ) -> Result<(Vec<Bytes>, StripeHealth), DataError> {
        piece.validate()?;
        debug_assert!(within.end <= piece.stripe_len(stripe));
        let k = piece.k();
        let n = piece.geometry.total();
        let mut fetched: Vec<Option<Fetched>> = (0..n).map(|_| None).collect();
        // Data shards first: with all of them good, nothing else is read.
        let firsts = join_all((0..k).map(|i| self.fetch(piece, stripe, i))).await;
        for (i, f) in firsts.into_iter().enumerate() {
            fetched[i] = Some(f);
        }
        let all_good = fetched[..k]
            .iter()
            .all(|f| matches!(f, Some(Fetched::Ok(_))));
        if !all_good {
            let rest = join_all((k..n).map(|i| self.fetch(piece, stripe, i))).await;
            for (j, f) in rest.into_iter().enumerate() {
                fetched[k + j] = Some(f);
            }
        }
        let (mut shards, health) = self.rebuild(piece, stripe, fetched).await?;
        shards.truncate(k);
        Ok((cut(shards, within), health))
    }

    /// Rebuilds the missing data shards among `fetched` (None: not read) and the bad
    /// ones, rewrites the bad ones, and returns all k+m shards: those read or rebuilt,
    /// empty for shards neither read nor needed (parity with all data shards good).
    async fn rebuild(
        &self,
        piece: &Piece,
        stripe: u32,
        fetched: Vec<Option<Fetched>>,
    ) -> Result<(Vec<Bytes>, StripeHealth), DataError> {
        let k = piece.k();
        let n = piece.geometry.total();
        let plen = piece.payload_len(stripe);
        let mut health = StripeHealth::default();
        let mut present = vec![false; n];
        let mut to_rewrite = Vec::new();
        let mut causes = Vec::new();
        let mut shards: Vec<Bytes> = Vec::with_capacity(n);
        for (i, f) in fetched.into_iter().enumerate() {
            match f {
                Some(Fetched::Ok(p)) => {
                    present[i] = true;
                    shards.push(p);
                    continue;
                }
                Some(Fetched::Bad(e)) => {
                    to_rewrite.push(i);
                    causes.push(e);
                }
                Some(Fetched::Unreachable(e)) => {
                    health.unreachable += 1;
                    causes.push(e);
                }
                None => {}
            }
            shards.push(Bytes::new());
        }
        let readable = present.iter().filter(|p| **p).count();
        if readable < k {
            return Err(DataError::Unreadable {
                piece: hex::encode(piece.id),
                stripe,
                readable,
                needed: k,
                shards: n,
                unavailable: health.unreachable > 0,
                cause: causes.join("; "),
            });
        }
        // What must be computed: missing data shards (the caller's bytes) and bad shards
        // (to rewrite). Parity that was not read is not computed for nothing.
        let mut wanted: Vec<usize> = (0..k).filter(|&i| !present[i]).collect();
        wanted.extend(to_rewrite.iter().copied().filter(|&i| i >= k));
        if !wanted.is_empty() {
            let rs = ReedSolomon::new(k, piece.m())?;
            let mut bufs: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    if present[i] {
                        shards[i].to_vec()
                    } else if wanted.contains(&i) {
                        vec![0u8; plen]
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
            rs.reconstruct_some(&mut refs, &present, &wanted)?;
            for &i in &wanted {
                shards[i] = Bytes::from(std::mem::take(&mut bufs[i]));
            }
        }
        if !to_rewrite.is_empty() {
            tracing::warn!(
                piece = %hex::encode(piece.id),
                stripe,
                shards = ?to_rewrite,
                cause = %causes.join("; "),
                "healing shards"
            );
            let results = join_all(to_rewrite.iter().map(|&i| {
                let value = Self::shard_value(piece, stripe, i, &shards[i]);
                self.put_shard(piece, stripe, i, value)
            }))
            .await;
            for r in results {
                match r {
                    Ok(()) => health.repaired += 1,
                    Err(e) => {
                        tracing::warn!(piece = %hex::encode(piece.id), stripe, "heal rewrite failed: {e}");
                        health.repair_failed += 1;
                    }
                }
            }
        }
        Ok((shards, health))
    }

    /// Checks every shard of every stripe of `piece` and repairs what it can. `deep`
    /// reads and verifies each shard; otherwise only existence is checked.
    pub async fn heal_piece(&self, piece: &Piece, deep: bool) -> Result<StripeHealth, DataError> {
        piece.validate()?;
        let n = piece.geometry.total();
        let mut total = StripeHealth::default();
        for stripe in 0..piece.stripes() {
            let fetched: Vec<Option<Fetched>> = if deep {
                join_all((0..n).map(|i| self.fetch(piece, stripe, i)))
                    .await
                    .into_iter()
                    .map(Some)
                    .collect()
            } else {
                let exists = join_all((0..n).map(|i| async move {
                    let store = self.store_of(piece, i).map_err(ShardError::Unavailable)?;
                    self.timed("exist", store.exist(piece.address(stripe, i).key()))
                        .await
                }))
                .await;
                if exists.iter().all(|e| matches!(e, Ok(true))) {
                    continue;
                }
                // Something is missing or unreachable: read everything and rebuild.
                join_all((0..n).map(|i| self.fetch(piece, stripe, i)))
                    .await
                    .into_iter()
                    .map(Some)
                    .collect()
            };
            let (_, health) = self.rebuild(piece, stripe, fetched).await?;
            total.add(health);
        }
        Ok(total)
    }

    /// Counts the shards of `piece` that exist, are missing and sit on stores that cannot
    /// be reached, by asking each store (Exist); reads and repairs nothing.
    pub async fn count_shards(&self, piece: &Piece) -> Result<ShardCount, DataError> {
        piece.validate()?;
        let n = piece.geometry.total();
        let mut count = ShardCount::default();
        for stripe in 0..piece.stripes() {
            let exists = join_all((0..n).map(|i| async move {
                let store = self.store_of(piece, i).map_err(ShardError::Unavailable)?;
                self.timed("exist", store.exist(piece.address(stripe, i).key()))
                    .await
            }))
            .await;
            for e in exists {
                match e {
                    Ok(true) => count.present += 1,
                    Ok(false) => count.missing += 1,
                    Err(_) => count.unreachable += 1,
                }
            }
        }
        Ok(count)
    }

    /// Deletes every shard of `piece` (absent ones are fine). Unreachable stores make
    /// it fail with [`DataError::DeleteIncomplete`] after deleting the rest.
    pub async fn delete_piece(&self, piece: &Piece) -> Result<(), DataError> {
        piece.validate()?;
        let n = piece.geometry.total();
        let mut failed = 0;
        for stripe in 0..piece.stripes() {
            let results = join_all((0..n).map(|i| async move {
                let store = self.store_of(piece, i).map_err(ShardError::Unavailable)?;
                self.timed("delete", store.delete(piece.address(stripe, i).key()))
                    .await
            }))
            .await;
            failed += results
                .into_iter()
                .filter(|r| !matches!(r, Ok(()) | Err(ShardError::KeyNotFound)))
                .count();
        }
        if failed > 0 {
            return Err(DataError::DeleteIncomplete(failed));
        }
        Ok(())
    }
}

/// Writes one piece, a stripe at a time. Every stripe but the last is full
/// ([`stripe_data_bytes`](Self::stripe_data_bytes) long).
pub struct PieceWriter<'a> {
    dp: &'a DataPath,
    rs: ReedSolomon,
    piece: Piece,
    stripes: u32,
    finished_short: bool,
    degraded: bool,
}

impl PieceWriter<'_> {
    pub fn stripe_data_bytes(&self) -> usize {
        self.piece.stripe_data_bytes() as usize
    }

    /// The piece as written so far (its id and stores are fixed from the start).
    pub fn piece(&self) -> &Piece {
        &self.piece
    }

    /// Encodes and stores one stripe; durable on k or more stores when this returns Ok.
    pub async fn write_stripe(&mut self, data: &[u8]) -> Result<(), DataError> {
        assert!(
            !self.finished_short,
            "a short stripe must be the last stripe of a piece"
        );
        assert!(!data.is_empty() && data.len() <= self.stripe_data_bytes());
        if data.len() < self.stripe_data_bytes() {
            self.finished_short = true;
        }
        let stripe = self.stripes;
        self.piece.size += data.len() as u64;
        self.piece.validate()?;
        let k = self.piece.k();
        let n = self.piece.geometry.total();
        let plen = self.piece.payload_len(stripe);
        // Each shard value is built in place: payload (data copied in once, parity
        // encoded into it), then the header in front of it; the buffer goes to the store
        // as it is.
        let mut shards: Vec<IoBuf> = (0..n)
            .map(|_| shard_buffers::take(HEADER_BYTES + plen))
            .collect();
        for (i, shard) in shards[..k].iter_mut().enumerate() {
            let payload = &mut shard[HEADER_BYTES..];
            let chunk = data.get(i * plen..).unwrap_or(&[]);
            let chunk = &chunk[..chunk.len().min(plen)];
            payload[..chunk.len()].copy_from_slice(chunk);
            payload[chunk.len()..].fill(0);
        }
        {
            let (d, p) = shards.split_at_mut(k);
            let d: Vec<&[u8]> = d.iter().map(|b| &b[HEADER_BYTES..]).collect();
            let mut p: Vec<&mut [u8]> = p.iter_mut().map(|b| &mut b[HEADER_BYTES..]).collect();
            self.rs.encode(&d, &mut p)?;
        }
        let piece = &self.piece;
        for (i, shard) in shards.iter_mut().enumerate() {
            format::encode_in_place(&DataPath::shard_header(piece, stripe, i, plen), shard);
        }
        let results = join_all(
            shards
                .into_iter()
                .enumerate()
                .map(|(i, value)| self.dp.put_shard_buf(piece, stripe, i, value)),
        )
        .await;
        let mut causes = Vec::new();
        let mut written = 0;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => written += 1,
                Err(e) => causes.push(format!("{}: {e}", self.piece.stores[i])),
            }
        }
        self.stripes += 1;
        if written < k {
            return Err(DataError::NotEnoughStores {
                written,
                needed: k,
                shards: n,
                cause: causes.join("; "),
            });
        }
        if written < n {
            tracing::warn!(
                piece = %hex::encode(self.piece.id),
                stripe,
                "stripe written degraded: {}",
                causes.join("; ")
            );
            self.degraded = true;
        }
        Ok(())
    }

    /// The finished piece, and whether some shards are missing (for the healer).
    pub fn finish(self) -> (Piece, bool) {
        (self.piece, self.degraded)
    }
}

#[cfg(test)]
mod tests;
