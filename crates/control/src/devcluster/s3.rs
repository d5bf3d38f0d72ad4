//! The dev cluster's S3 gateway: object pool `default` with one KV namespace on each of
//! the three storage nodes (created on the first run), an embedded SQLite index and the
//! root user's key pair under `DIR/s3/`, and a gateway on the pool (EC 2+1).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use meta::MetaStore;
use objstore::gateway::GatewayConfig;
use objstore::index::Index;
use objstore::layout::Geometry;
use objstore::s3::Credentials;
use serde::{Deserialize, Serialize};

use super::{DevClusterError, Progress, STORAGE_NODES, step};
use crate::pool_gateway::{NvmeKvConnector, PoolGateway};
use crate::provision::objpool::{self, DEFAULT_POOL, PoolNamespaces};
use crate::records::s3_hostnqn;

/// The gateway's name (its host NQN towards the storage nodes).
pub const GATEWAY: &str = "up";
/// Where the S3 gateway keeps its files in the data dir.
pub const S3_DIR: &str = "s3";
/// The root user's key pair, made on the first run (mode 0600).
pub const CREDENTIALS_FILE: &str = "credentials.json";
const INDEX_FILE: &str = "index.db";

/// The root user's key pair as kept in `DIR/s3/credentials.json`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPair {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    fn generate() -> KeyPair {
        let c = Credentials::generate();
        KeyPair {
            access_key: c.access_key,
            secret_key: c.secret_key,
        }
    }
}

/// The key pair in `path`, or a new one written there (readable by its owner only).
pub fn load_or_create_key_pair(path: &Path) -> Result<KeyPair, DevClusterError> {
    let err = |reason: String| DevClusterError::DataDir {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::read(path) {
        Ok(bytes) => {
            let keys: KeyPair = serde_json::from_slice(&bytes)
                .map_err(|e| err(format!("not an S3 key pair file: {e}")))?;
            if keys.access_key.is_empty() || keys.secret_key.len() < 8 {
                return Err(err(
                    "the access key is empty or the secret shorter than 8 characters".into(),
                ));
            }
            Ok(keys)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let keys = KeyPair::generate();
            let json = serde_json::to_vec_pretty(&keys).map_err(|e| err(e.to_string()))?;
            // Readable by its owner only: write_atomic's temporary file is made 0600
            // (tempfile's default) and renamed into place.
            blockdev::write_atomic(path, &json).map_err(|e| err(e.to_string()))?;
            Ok(keys)
        }
        Err(e) => Err(err(e.to_string())),
    }
}

/// What `ferrobay up` prints about its gateway.
#[derive(Clone, Debug)]
pub struct S3Info {
    /// Where the gateway listens.
    pub addr: SocketAddr,
    pub keys: KeyPair,
    pub credentials_file: PathBuf,
    pub region: String,
    pub pool: String,
    pub namespaces: usize,
    pub geometry: Geometry,
    /// Whether this start created the pool.
    pub created_pool: bool,
}

/// Creates the pool if needed, opens the index and starts the gateway.
pub(super) async fn start(
    store: &Arc<dyn MetaStore>,
    data_dir: &Path,
    listen: SocketAddr,
    namespace_bytes: u64,
    tls: Option<httpapi::tls::ServerTls>,
    progress: Progress<'_>,
) -> Result<(PoolGateway, S3Info), DevClusterError> {
    let dir = data_dir.join(S3_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| DevClusterError::DataDir {
        path: dir.clone(),
        reason: e.to_string(),
    })?;
    let host = nvmf_host::HostIdentity::from_hostnqn(&s3_hostnqn(GATEWAY))
        .map_err(|e| step("S3 host identity")(&e))?;
    let existing = objpool::get_pool(store.as_ref(), DEFAULT_POOL)
        .await
        .map_err(|e| step("read the object pool")(&e))?;
    let created_pool = existing.is_none();
    if created_pool {
        progress(&format!(
            "creating object pool {DEFAULT_POOL}: a {} MiB KV namespace on each of {}",
            namespace_bytes >> 20,
            STORAGE_NODES.join(", ")
        ));
        let req = PoolNamespaces {
            pool: DEFAULT_POOL.to_string(),
            storage_nodes: STORAGE_NODES.iter().map(|s| s.to_string()).collect(),
            size_bytes: namespace_bytes,
        };
        objpool::create_pool(store.as_ref(), &req, &host)
            .await
            .map_err(|e| step("create the object pool")(&e))?;
    } else {
        progress(&format!("object pool {DEFAULT_POOL} exists: reusing it"));
    }

    let credentials_file = dir.join(CREDENTIALS_FILE);
    let keys = load_or_create_key_pair(&credentials_file)?;
    let index_url = format!("sqlite:{}", dir.join(INDEX_FILE).display());
    let index = Index::open(&index_url)
        .await
        .map_err(|e| step("open the object index")(&e))?;
    let mut config = GatewayConfig::new(
        listen,
        Credentials {
            access_key: keys.access_key.clone(),
            secret_key: keys.secret_key.clone(),
        },
    );
    config.tls = tls;
    let geometry = Geometry { data: 2, parity: 1 };
    config.objects.default_geometry = geometry;
    let region = config.region.clone();
    progress(&format!("starting the S3 gateway on {listen}"));
    let connector = Arc::new(NvmeKvConnector::new(host));
    let gateway = PoolGateway::start(store.clone(), DEFAULT_POOL, config, index, connector)
        .await
        .map_err(|e| {
            let text = e.to_string();
            if text.contains("in use") {
                DevClusterError::S3PortInUse { addr: listen }
            } else {
                step("start the S3 gateway")(&text)
            }
        })?;
    let info = S3Info {
        addr: gateway.gateway().local_addr(),
        keys,
        credentials_file,
        region,
        pool: DEFAULT_POOL.to_string(),
        namespaces: *gateway.store_count().borrow(),
        geometry,
        created_pool,
    };
    Ok((gateway, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pairs_are_made_once_and_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(CREDENTIALS_FILE);
        let a = load_or_create_key_pair(&path).expect("create");
        assert!(a.access_key.starts_with("FB") && a.access_key.len() == 20);
        assert_eq!(a.secret_key.len(), 40);
        let mode = std::fs::metadata(&path).expect("stat").permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let b = load_or_create_key_pair(&path).expect("load");
        assert_eq!(a, b);
        let c = load_or_create_key_pair(&dir.path().join("other.json")).expect("create");
        assert_ne!(a, c);
        std::fs::write(&path, b"{}").expect("write");
        let e = load_or_create_key_pair(&path).expect_err("garbage");
        assert!(e.to_string().contains("not an S3 key pair file"), "{e}");
    }
}
