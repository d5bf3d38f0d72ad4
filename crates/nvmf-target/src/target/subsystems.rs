//! NVM subsystems: creation, removal, access lists.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use nvme_proto::fabrics::DISCOVERY_NQN;

use crate::TargetError;
use crate::config::SubsystemConfig;
use crate::subsystem::{Access, SubsysKind, Subsystem};
use crate::sync::{read, write};
use crate::target::{Target, check_nqn};

impl Target {
    /// Adds an NVM subsystem.
    pub fn add_subsystem(&self, cfg: SubsystemConfig) -> Result<(), TargetError> {
        check_nqn(&cfg.nqn)?;
        if cfg.nqn == DISCOVERY_NQN {
            return Err(TargetError::SubsystemExists(cfg.nqn));
        }
        for h in &cfg.allowed_hosts {
            check_nqn(h)?;
        }
        let serial = if cfg.serial.is_empty() {
            let seq = self
                .inner
                .subsystem_serial_seq
                .fetch_add(1, Ordering::Relaxed);
            format!("{}{:08X}", self.inner.config.serial_prefix, seq)
        } else {
            cfg.serial.clone()
        };
        if serial.len() > 20 || !serial.is_ascii() {
            return Err(TargetError::InvalidConfig(
                "serial must be ≤ 20 ASCII characters",
            ));
        }
        let model = if cfg.model.is_empty() {
            self.inner.config.model.clone()
        } else {
            cfg.model.clone()
        };
        {
            let mut subs = write(&self.inner.subsystems);
            if subs.contains_key(&cfg.nqn) {
                return Err(TargetError::SubsystemExists(cfg.nqn));
            }
            let s = Subsystem::new(
                cfg.nqn.clone(),
                serial,
                model,
                SubsysKind::Nvm,
                Access {
                    allow_any: cfg.allow_any_host,
                    hosts: cfg.allowed_hosts.iter().cloned().collect(),
                },
            );
            subs.insert(cfg.nqn.clone(), Arc::new(s));
        }
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// Removes a subsystem; its controllers are torn down.
    pub fn remove_subsystem(&self, nqn: &str) -> Result<(), TargetError> {
        let s = write(&self.inner.subsystems)
            .remove(nqn)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        s.removed.store(true, Ordering::Release);
        for c in s.live_controllers() {
            c.kill();
        }
        for ns in s.namespaces() {
            self.account_removed(&ns);
        }
        self.inner.qos_forget_subsystem(nqn);
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// Replaces the access list of a subsystem. Controllers of hosts no longer allowed are
    /// torn down.
    pub fn set_allowed_hosts(
        &self,
        nqn: &str,
        allow_any_host: bool,
        hosts: &[String],
    ) -> Result<(), TargetError> {
        for h in hosts {
            check_nqn(h)?;
        }
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        s.set_access(Access {
            allow_any: allow_any_host,
            hosts: hosts.iter().cloned().collect(),
        });
        for c in s.live_controllers() {
            if !s.host_allowed(&c.hostnqn) {
                c.kill();
            }
        }
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// Requires host `hostnqn` to authenticate to subsystem `nqn` with DH-HMAC-CHAP
    /// (`Some`), or no longer (`None`). Live controllers of that host are torn down, so
    /// that it reconnects under the new requirement.
    pub fn set_host_dhchap(
        &self,
        nqn: &str,
        hostnqn: &str,
        cfg: Option<crate::auth::DhchapHostConfig>,
    ) -> Result<(), TargetError> {
        check_nqn(hostnqn)?;
        if let Some(c) = &cfg
            && c.hashes.is_empty()
        {
            return Err(TargetError::InvalidConfig(
                "DH-HMAC-CHAP needs at least one hash function",
            ));
        }
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        if let Some(c) = &cfg {
            c.check().map_err(TargetError::InvalidConfig)?;
        }
        // A new secret or policy: a PSK generated under the old one is not kept.
        s.forget_generated(hostnqn);
        {
            let mut m = write(&s.dhchap);
            match cfg {
                Some(c) => {
                    m.insert(hostnqn.to_string(), Arc::new(c));
                }
                None => {
                    m.remove(hostnqn);
                }
            }
        }
        for c in s.live_controllers() {
            if c.hostnqn == hostnqn {
                c.kill();
            }
        }
        Ok(())
    }

    /// Requires host `hostnqn` to connect to subsystem `nqn` over TLS with the PSKs derived
    /// from `psk` (`Some`: the configured PSK, NVMe/TCP 3.6.1), or no longer (`None`). Live
    /// controllers of that host are torn down, so that it reconnects under the new
    /// requirement.
    pub fn set_host_tls_psk(
        &self,
        nqn: &str,
        hostnqn: &str,
        psk: Option<nvme_proto::tls_key::ConfiguredPsk>,
    ) -> Result<(), TargetError> {
        check_nqn(hostnqn)?;
        let s = self
            .inner
            .subsystem(nqn)
            .filter(|s| s.kind == SubsysKind::Nvm)
            .ok_or_else(|| TargetError::NoSuchSubsystem(nqn.to_string()))?;
        {
            let mut m = write(&s.tls_psks);
            match psk {
                Some(p) => {
                    m.insert(hostnqn.to_string(), Arc::new(p));
                }
                None => {
                    m.remove(hostnqn);
                }
            }
        }
        for c in s.live_controllers() {
            if c.hostnqn == hostnqn {
                c.kill();
            }
        }
        self.inner.discovery_log_changed();
        Ok(())
    }

    /// The hosts that must connect to subsystem `nqn` over TLS.
    pub fn tls_psk_hosts(&self, nqn: &str) -> Vec<String> {
        self.inner
            .subsystem(nqn)
            .map(|s| read(&s.tls_psks).keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The hosts that must authenticate to subsystem `nqn`.
    pub fn dhchap_hosts(&self, nqn: &str) -> Vec<String> {
        self.inner
            .subsystem(nqn)
            .map(|s| read(&s.dhchap).keys().cloned().collect())
            .unwrap_or_default()
    }

    /// NQNs of the NVM subsystems.
    pub fn subsystems(&self) -> Vec<String> {
        read(&self.inner.subsystems).keys().cloned().collect()
    }

    /// Every NVM subsystem with who may connect to it, sorted by NQN (what a node
    /// publishes for a central discovery controller).
    pub fn subsystem_access(&self) -> Vec<SubsystemAccess> {
        read(&self.inner.subsystems)
            .values()
            .map(|s| {
                let a = read(&s.access);
                SubsystemAccess {
                    nqn: s.nqn.clone(),
                    allow_any_host: a.allow_any,
                    allowed_hosts: a.hosts.iter().cloned().collect(),
                }
            })
            .collect()
    }
}

/// An NVM subsystem and its access list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsystemAccess {
    pub nqn: String,
    /// Any host may connect (the list below is then not used).
    pub allow_any_host: bool,
    /// Host NQNs allowed, sorted.
    pub allowed_hosts: Vec<String>,
}
