//! TLS on listeners that require it (NVMe/TCP 1.1 section 3.6): the PSK store that derives
//! each host's TLS PSK from its configured PSK and the identity it offers, and the
//! handshake before ICReq.

use std::sync::{Arc, Weak};

use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::tls_key::{ConfiguredPsk, Derivation, PskIdentity};
use tls_psk::{Psk, PskStore, ServerConfig};

use crate::subsystem::SubsysKind;
use crate::sync::read;
use crate::target::TargetInner;

/// Looks PSK identities up in the subsystems' per-host TLS PSKs.
struct TargetPsks {
    target: Weak<TargetInner>,
}

impl TargetPsks {
    fn configured(&self, id: &PskIdentity) -> Option<Arc<ConfiguredPsk>> {
        let target = self.target.upgrade()?;
        if id.subnqn == DISCOVERY_NQN {
            // The discovery controller: any subsystem's PSK of this host.
            return read(&target.subsystems)
                .values()
                .filter(|s| s.kind == SubsysKind::Nvm)
                .find_map(|s| s.tls_psk_for(&id.hostnqn));
        }
        target.subsystem(&id.subnqn)?.tls_psk_for(&id.hostnqn)
    }
}

impl TargetPsks {
    /// The TLS PSK the host's last secure channel concatenation generated, if `identity`
    /// names it. A refusal is logged with the host (never the key): the handshake then
    /// ends with an unknown_psk_identity alert.
    fn generated(&self, id: &PskIdentity, identity: &[u8]) -> Option<Psk> {
        let target = self.target.upgrade()?;
        let subsys = target
            .subsystem(&id.subnqn)
            .filter(|s| s.kind == SubsysKind::Nvm);
        let found = subsys.as_ref().and_then(|s| {
            if !s.concat_required(&id.hostnqn) {
                return None;
            }
            s.generated_psk(&id.hostnqn, identity)
        });
        let Some(psk) = found else {
            tracing::warn!(
                host = %id.hostnqn,
                subsys = %id.subnqn,
                "TLS handshake refused: host {} offers a generated PSK identity for {} but no such PSK is retained (it must first authenticate with secure channel concatenation on a plain-TCP admin queue)",
                id.hostnqn,
                id.subnqn
            );
            return None;
        };
        Some(psk)
    }
}

impl PskStore for TargetPsks {
    fn lookup(&self, identity: &[u8]) -> Option<Psk> {
        self.candidates(identity).into_iter().next()
    }

    /// The TLS PSKs of the host's configured PSK for this identity: the specification's
    /// derivation, then libnvme's before 1.16 (what a Linux host's keyring holds when
    /// `nvme check-tls-key --insert` of such a libnvme put the key there, as Debian 13's
    /// nvme-cli 2.13 with libnvme 1.13 does).
    fn candidates(&self, identity: &[u8]) -> Vec<Psk> {
        let Ok(id) = PskIdentity::parse(identity) else {
            return Vec::new();
        };
        if id.generated {
            return self.generated(&id, identity).into_iter().collect();
        }
        let Some(configured) = self.configured(&id) else {
            return Vec::new();
        };
        if configured.hash() != id.hash {
            return Vec::new();
        }
        let hash = id.hash.tls_alg();
        let mut out = Vec::new();
        for derivation in Derivation::ALL {
            let Ok((derived, key)) =
                configured.tls_psk_with(derivation, id.version, &id.hostnqn, &id.subnqn)
            else {
                continue;
            };
            // Version 1 carries a digest of the retained PSK: a different key (or
            // derivation), a different identity.
            if derived.as_bytes() != identity {
                continue;
            }
            if let Ok(psk) = Psk::new(identity, &key, hash) {
                out.push(psk);
            }
        }
        out
    }
}

/// The TLS server configuration of a target's TLS listeners.
pub(crate) fn server_config(target: &Arc<TargetInner>) -> Arc<ServerConfig> {
    Arc::new(ServerConfig::new(Arc::new(TargetPsks {
        target: Arc::downgrade(target),
    })))
}

/// The NVMe PSK identity a TLS connection authenticated with.
pub(crate) fn peer_identity<S>(stream: &tls_psk::TlsStream<S>) -> Option<PskIdentity>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let n = stream.connection().negotiated()?;
    PskIdentity::parse(&n.psk_identity).ok()
}
