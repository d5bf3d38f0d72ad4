//! A CA and a server certificate kept as PEM files in one directory: `ca.pem`,
//! `ca-key.pem`, `cert.pem`, `key.pem` (what `ferrobay gen-cert` writes and `ferrobay up
//! --tls` keeps). A new certificate is signed by the CA already there, so clients keep
//! trusting the same `ca.pem` across renewals.

use std::path::{Path, PathBuf};

use crate::tls::{TlsError, generate};

/// Why a directory's certificates could not be issued; one line, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum CertDirError {
    #[error("{} has one of ca.pem and ca-key.pem but not the other", .0.display())]
    HalfCa(PathBuf),
    #[error("{}: {reason}", path.display())]
    Io { path: PathBuf, reason: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The four files of one directory.
#[derive(Clone, Debug)]
pub struct CertDir {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertDir {
    pub fn new(dir: &Path) -> CertDir {
        CertDir {
            dir: dir.to_path_buf(),
            ca_cert: dir.join("ca.pem"),
            ca_key: dir.join("ca-key.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }

    /// Issues `cert.pem` and `key.pem` for `names` (valid `days`), signed by the CA in the
    /// directory when both its files are there, else by a new CA (valid `ca_days`) written
    /// there; one CA file without the other is refused. Keys are written 0600,
    /// certificates `cert_mode`, each through a temporary file renamed into place. Returns
    /// whether the existing CA signed.
    pub fn issue(
        &self,
        names: &[String],
        days: u32,
        ca_days: u32,
        cert_mode: u32,
    ) -> Result<bool, CertDirError> {
        let reuse = self.existing_ca()?;
        let g = generate(
            names,
            days,
            ca_days,
            reuse.as_ref().map(|(c, k)| (c.as_str(), k.as_str())),
        )?;
        if reuse.is_none() {
            write_file(&self.ca_key, &g.ca_key_pem, 0o600)?;
            write_file(&self.ca_cert, &g.ca_cert_pem, cert_mode)?;
        }
        write_file(&self.key, &g.key_pem, 0o600)?;
        write_file(&self.cert, &g.cert_pem, cert_mode)?;
        Ok(reuse.is_some())
    }

    /// The CA's certificate and key PEM if both files are there, `None` if neither is.
    pub fn existing_ca(&self) -> Result<Option<(String, String)>, CertDirError> {
        match (self.ca_cert.exists(), self.ca_key.exists()) {
            (true, true) => Ok(Some((read(&self.ca_cert)?, read(&self.ca_key)?))),
            (false, false) => Ok(None),
            _ => Err(CertDirError::HalfCa(self.dir.clone())),
        }
    }
}

fn read(path: &Path) -> Result<String, CertDirError> {
    std::fs::read_to_string(path).map_err(|e| CertDirError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), CertDirError> {
    crate::files::write_replacing(path, text.as_bytes(), mode).map_err(|e| CertDirError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}
