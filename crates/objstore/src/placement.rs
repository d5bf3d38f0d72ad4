//! Which shard stores hold a piece: rendezvous (highest random weight) hashing of the
//! piece id over all stores, taking at most one store per failure domain.
//!
//! Every gateway computes the same placement from the same store list without talking to
//! the others; adding a store moves only the pieces for which it now scores highest. The
//! placement is recorded in the piece's shard map, so changing the store list later never
//! loses track of existing shards.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sha2::Digest;

use crate::format::PieceId;
use crate::shard::ShardStore;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("shard store id {0:?} is given twice")]
    DuplicateStore(String),
    #[error(
        "{needed} shards per stripe need {needed} failure domains, but the shard stores \
         span only {available}"
    )]
    NotEnoughDomains { needed: usize, available: usize },
}

/// The shard stores a gateway writes to, by id.
#[derive(Clone)]
pub struct StoreSet {
    stores: Vec<Arc<dyn ShardStore>>,
    by_id: HashMap<String, usize>,
    domains: usize,
}

impl StoreSet {
    pub fn new(stores: Vec<Arc<dyn ShardStore>>) -> Result<Self, PlacementError> {
        let mut by_id = HashMap::new();
        for (i, s) in stores.iter().enumerate() {
            if by_id.insert(s.id().to_string(), i).is_some() {
                return Err(PlacementError::DuplicateStore(s.id().to_string()));
            }
        }
        let domains = stores
            .iter()
            .map(|s| s.failure_domain())
            .collect::<HashSet<_>>()
            .len();
        Ok(StoreSet {
            stores,
            by_id,
            domains,
        })
    }

    pub fn len(&self) -> usize {
        self.stores.len()
    }

    pub fn is_empty(&self) -> bool {
        self.stores.is_empty()
    }

    pub fn failure_domains(&self) -> usize {
        self.domains
    }

    pub fn all(&self) -> &[Arc<dyn ShardStore>] {
        &self.stores
    }

    pub fn get(&self, id: &str) -> Option<&Arc<dyn ShardStore>> {
        self.by_id.get(id).map(|&i| &self.stores[i])
    }

    /// Checks that a k+m geometry can be placed at all.
    pub fn check_geometry(&self, shards: usize) -> Result<(), PlacementError> {
        if shards > self.domains {
            return Err(PlacementError::NotEnoughDomains {
                needed: shards,
                available: self.domains,
            });
        }
        Ok(())
    }

    /// The ids of the `count` stores for `piece`, shard 0 first.
    pub fn place(&self, piece: &PieceId, count: usize) -> Result<Vec<String>, PlacementError> {
        self.check_geometry(count)?;
        let mut scored: Vec<(u64, &Arc<dyn ShardStore>)> = self
            .stores
            .iter()
            .map(|s| (score(piece, s.id()), s))
            .collect();
        // Highest score first; ids break (astronomically unlikely) ties deterministically.
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id().cmp(b.1.id())));
        let mut used_domains = HashSet::new();
        let mut chosen = Vec::with_capacity(count);
        for (_, store) in scored {
            if chosen.len() == count {
                break;
            }
            if used_domains.insert(store.failure_domain()) {
                chosen.push(store.id().to_string());
            }
        }
        debug_assert_eq!(chosen.len(), count);
        Ok(chosen)
    }
}

fn score(piece: &PieceId, store_id: &str) -> u64 {
    let mut h = sha2::Sha256::new();
    h.update(piece);
    h.update(store_id.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::MemShardStore;

    fn set(spec: &[(&str, &str)]) -> StoreSet {
        StoreSet::new(
            spec.iter()
                .map(|(id, d)| Arc::new(MemShardStore::new(*id, *d)) as Arc<dyn ShardStore>)
                .collect(),
        )
        .expect("store set")
    }

    #[test]
    fn one_store_per_failure_domain() {
        let s = set(&[
            ("a1", "a"),
            ("a2", "a"),
            ("b1", "b"),
            ("c1", "c"),
            ("c2", "c"),
        ]);
        for i in 0..200u8 {
            let chosen = s.place(&[i; 16], 3).expect("place");
            let domains: HashSet<char> = chosen.iter().map(|id| id.as_bytes()[0] as char).collect();
            assert_eq!(domains.len(), 3, "{chosen:?}");
        }
        assert_eq!(
            s.place(&[0; 16], 4),
            Err(PlacementError::NotEnoughDomains {
                needed: 4,
                available: 3
            })
        );
    }

    #[test]
    fn spreads_evenly_and_adding_a_store_moves_little() {
        let ids: Vec<String> = (0..6).map(|i| format!("s{i}")).collect();
        let spec: Vec<(&str, &str)> = ids.iter().map(|i| (i.as_str(), i.as_str())).collect();
        let six = set(&spec);
        let mut counts = HashMap::new();
        let pieces: Vec<PieceId> = (0..3000u32)
            .map(|i| {
                let mut p = [0u8; 16];
                p[..4].copy_from_slice(&i.to_le_bytes());
                p
            })
            .collect();
        for p in &pieces {
            for id in six.place(p, 3).expect("place") {
                *counts.entry(id).or_insert(0) += 1;
            }
        }
        // 9000 shards over 6 stores: 1500 each expected.
        for (id, n) in &counts {
            assert!((1300..1700).contains(n), "{id}: {n}");
        }
        let mut spec7 = spec.clone();
        spec7.push(("s6", "s6"));
        let seven = set(&spec7);
        let moved = pieces
            .iter()
            .filter(|p| {
                let a: HashSet<String> = six.place(p, 3).expect("place").into_iter().collect();
                let b: HashSet<String> = seven.place(p, 3).expect("place").into_iter().collect();
                a != b
            })
            .count();
        // A piece moves only if s6 enters its top 3: about 3/7 of them.
        assert!(moved < pieces.len() / 2, "moved {moved}");
    }

    #[test]
    fn duplicate_ids_refused() {
        let stores: Vec<Arc<dyn ShardStore>> = vec![
            Arc::new(MemShardStore::new("x", "a")),
            Arc::new(MemShardStore::new("x", "b")),
        ];
        assert!(matches!(
            StoreSet::new(stores),
            Err(PlacementError::DuplicateStore(_))
        ));
    }
}
