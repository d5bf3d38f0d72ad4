//! NVM subsystems (and the discovery subsystem): access list, namespaces, controllers.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use nvme_proto::tls_key::{ConfiguredPsk, GeneratedPsk};

use crate::auth::DhchapHostConfig;
use crate::controller::Controller;
use crate::namespace::Namespace;
use crate::sync::{lock, read, write};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SubsysKind {
    Nvm,
    Discovery,
}

#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub allow_any: bool,
    pub hosts: BTreeSet<String>,
}

pub(crate) struct Subsystem {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    pub kind: SubsysKind,
    pub access: RwLock<Access>,
    /// DH-HMAC-CHAP requirements per host NQN: a host listed here must authenticate.
    pub dhchap: RwLock<BTreeMap<String, Arc<DhchapHostConfig>>>,
    /// TLS PSKs per host NQN: a host listed here must connect over TLS (a TLS listener).
    pub tls_psks: RwLock<BTreeMap<String, Arc<ConfiguredPsk>>>,
    /// The TLS PSK (`NVMe1G..` identity, derived key zeroized on drop) of each host's last
    /// secure channel concatenation, as the TLS listener needs it: replaced by the host's
    /// next concatenation, dropped when its DH-HMAC-CHAP config changes, in memory only
    /// (a restarted target asks the host to concatenate again).
    pub generated_psks: Mutex<BTreeMap<String, tls_psk::Psk>>,
    pub namespaces: RwLock<BTreeMap<u32, Arc<Namespace>>>,
    /// Bumped on every namespace change; connections cache namespace lookups against it.
    pub ns_generation: AtomicU64,
    pub controllers: Mutex<BTreeMap<u16, Weak<Controller>>>,
    /// Set when the subsystem was removed: new connects fail, live controllers are killed.
    pub removed: std::sync::atomic::AtomicBool,
}

impl Subsystem {
    pub fn new(
        nqn: String,
        serial: String,
        model: String,
        kind: SubsysKind,
        access: Access,
    ) -> Self {
        Subsystem {
            nqn,
            serial,
            model,
            kind,
            access: RwLock::new(access),
            dhchap: RwLock::new(BTreeMap::new()),
            tls_psks: RwLock::new(BTreeMap::new()),
            generated_psks: Mutex::new(BTreeMap::new()),
            namespaces: RwLock::new(BTreeMap::new()),
            ns_generation: AtomicU64::new(1),
            controllers: Mutex::new(BTreeMap::new()),
            removed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        let a = read(&self.access);
        a.allow_any || a.hosts.contains(hostnqn)
    }

    /// What `hostnqn` must authenticate with, if anything.
    pub fn dhchap_for(&self, hostnqn: &str) -> Option<Arc<DhchapHostConfig>> {
        read(&self.dhchap).get(hostnqn).cloned()
    }

    /// The configured TLS PSK of `hostnqn`, if it must use TLS.
    pub fn tls_psk_for(&self, hostnqn: &str) -> Option<Arc<ConfiguredPsk>> {
        read(&self.tls_psks).get(hostnqn).cloned()
    }

    /// Whether `hostnqn` must use secure channel concatenation.
    pub fn concat_required(&self, hostnqn: &str) -> bool {
        self.dhchap_for(hostnqn).is_some_and(|c| c.concat)
    }

    /// Retains the PSK `hostnqn`'s concatenation generated (replacing, and so wiping, the
    /// previous one).
    pub fn retain_generated(&self, hostnqn: &str, g: &GeneratedPsk) {
        let (identity, key) = g.tls_psk(hostnqn, &self.nqn);
        // Cannot fail: the identity is never empty, the key as long as the hash.
        if let Ok(psk) = tls_psk::Psk::new(identity, &key, g.hash().tls_alg()) {
            lock(&self.generated_psks).insert(hostnqn.to_string(), psk);
        }
    }

    /// Forgets the PSK `hostnqn`'s concatenation generated (its DH-HMAC-CHAP config
    /// changed: a key generated under the old one is not kept).
    pub fn forget_generated(&self, hostnqn: &str) {
        lock(&self.generated_psks).remove(hostnqn);
    }

    /// The retained TLS PSK of `hostnqn` if `identity` is its identity (the digest in it
    /// names one generated key; an older one's identity no longer matches).
    pub fn generated_psk(&self, hostnqn: &str, identity: &[u8]) -> Option<tls_psk::Psk> {
        lock(&self.generated_psks)
            .get(hostnqn)
            .filter(|p| p.identity() == identity)
            .cloned()
    }

    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        read(&self.namespaces).get(&nsid).cloned()
    }

    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        read(&self.namespaces).values().cloned().collect()
    }

    pub fn bump_ns_generation(&self) {
        self.ns_generation.fetch_add(1, Ordering::Release);
    }

    pub fn live_controllers(&self) -> Vec<Arc<Controller>> {
        let mut g = lock(&self.controllers);
        g.retain(|_, w| w.strong_count() > 0);
        g.values().filter_map(Weak::upgrade).collect()
    }

    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        lock(&self.controllers).get(&cntlid).and_then(Weak::upgrade)
    }

    pub fn set_access(&self, a: Access) {
        *write(&self.access) = a;
    }
}
