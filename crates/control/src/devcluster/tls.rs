//! `ferrobay up --tls`: the key material of a secure dev cluster, kept in `DIR/tls/` (0700) and
//! made on the first run (every file 0600, written through a temporary file and renamed):
//!
//! | file | what |
//! |---|---|
//! | `ca.pem`, `ca-key.pem` | the cluster's CA (`httpapi::tls::generate`, as `ferrobay gen-cert`) |
//! | `cert.pem`, `key.pem` | the HTTPS certificate of the APIs and the S3 gateway, for `--addr`, `localhost` and loopback |
//! | `host.psk` | the configured TLS PSK (`NVMeTLSkey-1:01:..`) of the host NQN that uses the volume |
//! | `hostnqn` | that host NQN |
//! | `processor.psk` | the processor node's TLS PSK towards the storage nodes |
//!
//! A later run reuses them (the host keeps its key, clients their `ca.pem`). No key is
//! ever printed or logged: `ferrobay up` prints the files' paths.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use nvme_proto::tls_key::ConfiguredPsk;
use rand::RngCore as _;

use super::DevClusterError;

/// The directory under the data dir.
pub const TLS_DIR: &str = "tls";
/// Days the HTTPS certificate is valid when `up` makes it (renew: delete cert.pem and
/// key.pem and run `up` again, or `ferrobay gen-cert --out-dir DIR/tls --force`).
const CERT_DAYS: u32 = 365;
const CA_DAYS: u32 = 3650;

/// Where `ferrobay up --tls` keeps its keys and certificates, all present and checked.
#[derive(Clone, Debug)]
pub struct DevTlsFiles {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The host's configured PSK (give it to `nvme check-tls-key --keydata`).
    pub host_psk: PathBuf,
    /// The host NQN that must use TLS (and the key in `host_psk`) for the volume.
    pub host_nqn: String,
    /// The processor node's key towards the storage nodes.
    pub processor_psk: PathBuf,
}

fn data_err(path: &Path, reason: impl Into<String>) -> DevClusterError {
    DevClusterError::DataDir {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Writes `data` to `path` readable by its owner only (write_atomic's temporary file is
/// 0600, tempfile's default, and is renamed into place).
fn write_private(path: &Path, data: &[u8]) -> Result<(), DevClusterError> {
    blockdev::write_atomic(path, data).map_err(|e| data_err(path, e.to_string()))
}

/// The configured PSK in `path`, or a new SHA-256 one written there.
pub fn load_or_create_psk(path: &Path) -> Result<ConfiguredPsk, DevClusterError> {
    match std::fs::read_to_string(path) {
        Ok(text) => ConfiguredPsk::parse(text.trim())
            .map_err(|e| data_err(path, format!("not a NVMeTLSkey-1 key: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut key = [0u8; 32];
            rand::rng().fill_bytes(&mut key);
            let psk = ConfiguredPsk::new(1, &key).map_err(|e| data_err(path, e.to_string()));
            key.iter_mut().for_each(|b| *b = 0);
            let psk = psk?;
            let mut text = psk.to_interchange();
            text.push('\n');
            write_private(path, text.as_bytes())?;
            Ok(psk)
        }
        Err(e) => Err(data_err(path, e.to_string())),
    }
}

/// The host NQN: `wanted` if given (kept in `DIR/tls/hostnqn` for later runs), else the
/// one kept there, else this machine's `/etc/nvme/hostnqn` (what nvme-cli sends), else a
/// new `nqn.2014-08.org.nvmexpress:uuid:..`.
fn host_nqn(dir: &Path, wanted: Option<&str>) -> Result<String, DevClusterError> {
    let path = dir.join("hostnqn");
    let kept = match std::fs::read_to_string(&path) {
        Ok(s) => Some(s.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(data_err(&path, e.to_string())),
    };
    let nqn = match (wanted, &kept) {
        (Some(w), _) => w.to_string(),
        (None, Some(k)) => k.clone(),
        (None, None) => std::fs::read_to_string("/etc/nvme/hostnqn")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| format!("nqn.2014-08.org.nvmexpress:uuid:{}", uuid::Uuid::new_v4())),
    };
    nvme_proto::fabrics::validate_nqn(&nqn)
        .map_err(|e| DevClusterError::Config(format!("--host-nqn {nqn:?}: {e}")))?;
    if kept.as_deref() != Some(nqn.as_str()) {
        write_private(&path, format!("{nqn}\n").as_bytes())?;
    }
    Ok(nqn)
}

/// Makes (or finds) everything in `data_dir/tls`. `addr`: the address clients use, a
/// name of the certificate.
pub fn prepare(
    data_dir: &Path,
    addr: IpAddr,
    wanted_host_nqn: Option<&str>,
) -> Result<DevTlsFiles, DevClusterError> {
    let dir = data_dir.join(TLS_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| data_err(&dir, e.to_string()))?;
    // Only the owner may list or open the keys.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| data_err(&dir, e.to_string()))?;
    let certs = httpapi::cert_dir::CertDir::new(&dir);
    let f = DevTlsFiles {
        ca_cert: certs.ca_cert.clone(),
        cert: certs.cert.clone(),
        key: certs.key.clone(),
        host_psk: dir.join("host.psk"),
        processor_psk: dir.join("processor.psk"),
        host_nqn: host_nqn(&dir, wanted_host_nqn)?,
        dir,
    };
    if !(f.cert.exists() && f.key.exists() && f.ca_cert.exists()) {
        let mut names = vec![addr.to_string(), "localhost".to_string()];
        for lo in ["127.0.0.1", "::1"] {
            if !names.iter().any(|n| n == lo) {
                names.push(lo.to_string());
            }
        }
        if addr.is_unspecified() {
            // Every address: clients on this machine use loopback or localhost.
            names.retain(|n| n != &addr.to_string());
        }
        // Every file of the directory is the owner's only, certificates too.
        certs
            .issue(&names, CERT_DAYS, CA_DAYS, 0o600)
            .map_err(|e| data_err(&f.dir, format!("make the certificate: {e}")))?;
    }
    load_or_create_psk(&f.host_psk)?;
    load_or_create_psk(&f.processor_psk)?;
    Ok(f)
}

impl DevTlsFiles {
    /// The HTTPS certificate, loaded and checked.
    pub fn server_tls(&self) -> Result<httpapi::tls::ServerTls, DevClusterError> {
        httpapi::tls::ServerTls::from_pem_files(&self.cert, &self.key)
            .map_err(|e| data_err(&self.dir, e.to_string()))
    }

    /// The cluster's CA, for the HTTP clients of this process.
    pub fn client_tls(&self) -> Result<httpapi::tls::ClientTls, DevClusterError> {
        httpapi::tls::ClientTls::from_ca_file(&self.ca_cert)
            .map_err(|e| data_err(&self.dir, e.to_string()))
    }

    pub fn host_psk(&self) -> Result<ConfiguredPsk, DevClusterError> {
        load_or_create_psk(&self.host_psk)
    }

    pub fn processor_psk(&self) -> Result<ConfiguredPsk, DevClusterError> {
        load_or_create_psk(&self.processor_psk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn files_are_made_once_and_private() {
        let dir = tempfile::tempdir().expect("tempdir");
        let nqn = "nqn.2014-08.org.nvmexpress:uuid:5e1f0a7c-2241-4d11-9a3b-700155129e01";
        let a = prepare(dir.path(), IpAddr::from([127, 0, 0, 1]), Some(nqn)).expect("prepare");
        assert_eq!(a.host_nqn, nqn);
        for p in std::fs::read_dir(&a.dir).expect("dir") {
            let p = p.expect("entry").path();
            let mode = std::fs::metadata(&p).expect("stat").permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", p.display());
        }
        let dir_mode = std::fs::metadata(&a.dir)
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        a.server_tls().expect("the certificate loads");
        a.client_tls().expect("the CA loads");
        let psk = std::fs::read_to_string(&a.host_psk).expect("psk");
        let cert = std::fs::read_to_string(&a.cert).expect("cert");
        // Again, no host NQN given: the same files and NQN.
        let b = prepare(dir.path(), IpAddr::from([127, 0, 0, 1]), None).expect("again");
        assert_eq!(b.host_nqn, nqn);
        assert_eq!(std::fs::read_to_string(&b.host_psk).expect("psk"), psk);
        assert_eq!(std::fs::read_to_string(&b.cert).expect("cert"), cert);
        assert_ne!(a.host_psk().expect("key"), a.processor_psk().expect("key"));
        let e = prepare(dir.path(), IpAddr::from([127, 0, 0, 1]), Some("not an nqn"))
            .expect_err("bad NQN");
        assert!(e.to_string().contains("--host-nqn"), "{e}");
    }
}
