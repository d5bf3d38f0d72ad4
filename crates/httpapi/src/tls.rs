//! HTTPS for the APIs and the S3 gateway: rustls with X.509 certificates (ring provider).
//!
//! - [`ServerTls`]: a certificate chain and its key from PEM files, checked at load (the
//!   file, that it holds a certificate / a key, that the key belongs to the first
//!   certificate); ALPN h2 and http/1.1. [`ServerTls::accept`] runs one handshake under
//!   [`HANDSHAKE_TIMEOUT`]. Renewed files are picked up without a restart: before a
//!   handshake, at most every [`RELOAD_CHECK_INTERVAL`], the files' modification time,
//!   size and inode are compared with those loaded; when they changed both files are
//!   loaded and checked again and new connections get the new certificate (connections
//!   already open keep theirs). Files that do not load (half written, a key of another
//!   certificate) keep the old certificate, with one log line per change of the files.
//! - [`ClientTls`]: the CAs a client trusts, from a PEM file, and nothing else (no system
//!   roots: clusters use their own CA). [`set_default_client`] makes one the trust of every
//!   [`crate::HttpClient`] the process makes (the CLI's `--ca-cert`).
//! - [`generate`]: a self-signed CA and a server certificate it signs (`ferrobay gen-cert`).
//!
//! Key material is never logged nor part of an error message; errors name the file.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Time a client gets to complete the TLS handshake after TCP accept.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often (at most, when connections arrive) a server looks whether its certificate
/// or key file changed.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Why certificates or keys could not be loaded or made; one line, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("{}: no certificate (expected a PEM `BEGIN CERTIFICATE` block)", path.display())]
    NoCertificate { path: PathBuf },
    #[error("{}: no private key (expected a PEM `BEGIN PRIVATE KEY` block)", path.display())]
    NoKey { path: PathBuf },
    #[error("{}: {reason}", path.display())]
    BadPem { path: PathBuf, reason: String },
    #[error("the key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{what}: {reason}")]
    Config { what: String, reason: String },
}

fn crypto() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::Read {
        path: path.to_path_buf(),
        reason: match e.kind() {
            io::ErrorKind::NotFound => "no such file".to_string(),
            _ => e.to_string(),
        },
    })
}

/// Every certificate of a PEM file, in order; at least one.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = zeroize_on_drop(read(path)?);
    PrivateKeyDer::from_pem_slice(&pem.0).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey {
            path: path.to_path_buf(),
        },
        e => TlsError::BadPem {
            path: path.to_path_buf(),
            reason: e.to_string(),
        },
    })
}

/// Overwrites the bytes of a key file when dropped (best effort: no copy is kept).
struct Wipe(Vec<u8>);
impl Drop for Wipe {
    fn drop(&mut self) {
        self.0.iter_mut().for_each(|b| *b = 0);
    }
}
fn zeroize_on_drop(v: Vec<u8>) -> Wipe {
    Wipe(v)
}

/// A server's certificate and key, ready to accept TLS connections, following renewals
/// of the files (module docs). Cheap to clone: clones share the loaded certificate.
#[derive(Clone)]
pub struct ServerTls {
    inner: Arc<Reloading>,
}

struct Reloading {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Loaded>,
    /// Milliseconds between looks at the files (0: before every handshake).
    check_interval_ms: std::sync::atomic::AtomicU64,
    last_check: std::sync::Mutex<std::time::Instant>,
    /// The files as they were when loading them last failed: logged once, not retried
    /// until they change again.
    failed: std::sync::Mutex<Option<Stamps>>,
}

struct Loaded {
    acceptor: tokio_rustls::TlsAcceptor,
    stamps: Option<Stamps>,
}

/// What tells that a file changed: modification time (ns), size, inode (a renamed-in
/// file has a new one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    modified: Option<std::time::SystemTime>,
    len_bytes: u64,
    inode: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamps {
    cert: FileStamp,
    key: FileStamp,
}

fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some(FileStamp {
        modified: m.modified().ok(),
        len_bytes: m.len(),
        inode: m.ino(),
    })
}

fn stamps(cert: &Path, key: &Path) -> Option<Stamps> {
    Some(Stamps {
        cert: stamp(cert)?,
        key: stamp(key)?,
    })
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.inner.cert_path)
            .finish_non_exhaustive()
    }
}

/// Loads and checks a chain and its key into an acceptor.
fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let certs = load_certs(cert)?;
    let private = load_key(key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config {
            what: "TLS versions".into(),
            reason: e.to_string(),
        })?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            },
            e => TlsError::Config {
                what: format!("{} with {}", cert.display(), key.display()),
                reason: e.to_string(),
            },
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

impl ServerTls {
    /// The chain in `cert` (server certificate first, then intermediates) and its key.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        // Stamped before reading: a change while reading is seen at the next look.
        let before = stamps(cert, key);
        let acceptor = acceptor(cert, key)?;
        Ok(ServerTls {
            inner: Arc::new(Reloading {
                cert_path: cert.to_path_buf(),
                key_path: key.to_path_buf(),
                current: RwLock::new(Loaded {
                    acceptor,
                    stamps: before,
                }),
                check_interval_ms: std::sync::atomic::AtomicU64::new(
                    u64::try_from(RELOAD_CHECK_INTERVAL.as_millis()).unwrap_or(u64::MAX),
                ),
                last_check: std::sync::Mutex::new(std::time::Instant::now()),
                failed: std::sync::Mutex::new(None),
            }),
        })
    }

    /// Looks at the files at most every `interval` (default [`RELOAD_CHECK_INTERVAL`];
    /// zero: before every handshake). Shared by every clone.
    pub fn set_reload_check_interval(&self, interval: Duration) {
        self.inner.check_interval_ms.store(
            u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The certificate file it was loaded from (for logs).
    pub fn cert_path(&self) -> &Path {
        &self.inner.cert_path
    }

    /// Loads both files again now, whether they changed or not (for a reload command or
    /// signal): `Ok` and new connections get the new certificate, or the error and the
    /// old certificate stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let r = &self.inner;
        let before = stamps(&r.cert_path, &r.key_path);
        // On failure the caller logs it; the look at changed files need not again.
        self.load(
            &mut r.failed.lock().unwrap_or_else(|p| p.into_inner()),
            before,
        )
    }

    /// Loads both files (as they were at `stamps`) and makes them the certificate of new
    /// connections, or records `stamps` in `failed` and keeps the old one.
    fn load(&self, failed: &mut Option<Stamps>, stamps: Option<Stamps>) -> Result<(), TlsError> {
        let r = &self.inner;
        match acceptor(&r.cert_path, &r.key_path) {
            Ok(acceptor) => {
                *r.current.write().unwrap_or_else(|p| p.into_inner()) = Loaded { acceptor, stamps };
                *failed = None;
                Ok(())
            }
            Err(e) => {
                *failed = stamps;
                Err(e)
            }
        }
    }

    /// Reloads if the files changed since they were loaded (or last failed to load).
    fn reload_if_changed(&self) {
        let r = &self.inner;
        let interval = Duration::from_millis(
            r.check_interval_ms
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        {
            let mut last = r.last_check.lock().unwrap_or_else(|p| p.into_inner());
            if !interval.is_zero() && last.elapsed() < interval {
                return;
            }
            *last = std::time::Instant::now();
        }
        // A file missing for a moment (being replaced): look again next time.
        let Some(now) = stamps(&r.cert_path, &r.key_path) else {
            return;
        };
        let loaded = r.current.read().unwrap_or_else(|p| p.into_inner()).stamps;
        if loaded == Some(now) {
            return;
        }
        let mut failed = r.failed.lock().unwrap_or_else(|p| p.into_inner());
        if *failed == Some(now) {
            return;
        }
        match self.load(&mut failed, Some(now)) {
            Ok(()) => tracing::info!(
                cert = %r.cert_path.display(),
                "TLS certificate reloaded: new connections get the renewed one"
            ),
            Err(e) => {
                tracing::warn!("TLS certificate not reloaded, the loaded one stays in use: {e}");
            }
        }
    }

    /// The TLS handshake on an accepted connection, at most [`HANDSHAKE_TIMEOUT`], with
    /// the certificate as of now (renewed files are loaded first).
    pub async fn accept(&self, tcp: TcpStream) -> io::Result<ServerStream> {
        self.reload_if_changed();
        let acceptor = self
            .inner
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .acceptor
            .clone();
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
            Ok(Ok(s)) => Ok(MaybeTls::Tls(Box::new(s))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )),
        }
    }
}

/// Plain TCP, or TLS over TCP (`T` is tokio-rustls' server or client stream).
pub enum MaybeTls<T> {
    Plain(TcpStream),
    Tls(Box<T>),
}

/// What a server reads requests from.
pub type ServerStream = MaybeTls<tokio_rustls::server::TlsStream<TcpStream>>;
/// What a client sends requests on.
pub type ClientStream = MaybeTls<tokio_rustls::client::TlsStream<TcpStream>>;

impl<T> MaybeTls<T> {
    pub fn is_tls(&self) -> bool {
        matches!(self, MaybeTls::Tls(_))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for MaybeTls<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for MaybeTls<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// The CAs a client trusts for `https://` servers. Cheap to clone.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    /// Where the CAs came from (None: trusts nothing, every server is refused).
    ca_path: Option<PathBuf>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.ca_path)
            .finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates in `ca` (PEM, one or more) and nothing else.
    pub fn from_ca_file(ca: &Path) -> Result<ClientTls, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in load_certs(ca)? {
            roots.add(c).map_err(|e| TlsError::BadPem {
                path: ca.to_path_buf(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        Ok(ClientTls {
            config: client_config(roots)?,
            ca_path: Some(ca.to_path_buf()),
        })
    }

    /// Trusts no server (what a client without `--ca-cert` has for `https://`).
    pub fn trust_nothing() -> ClientTls {
        ClientTls {
            config: client_config(rustls::RootCertStore::empty())
                .unwrap_or_else(|_| unreachable_config()),
            ca_path: None,
        }
    }

    pub fn ca_path(&self) -> Option<&Path> {
        self.ca_path.as_deref()
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }
}

fn client_config(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let mut config = rustls::ClientConfig::builder_with_provider(crypto())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config {
            what: "TLS versions".into(),
            reason: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // The pooled client speaks HTTP/1.1 (keep-alive); h2 would need its own pool setup.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The ring provider's default versions always build; this is never reached.
#[allow(clippy::panic)]
fn unreachable_config() -> Arc<rustls::ClientConfig> {
    panic!("rustls: the ring provider supports no default TLS version")
}

static DEFAULT_CLIENT: RwLock<Option<ClientTls>> = RwLock::new(None);

/// Makes `tls` the trust of every [`crate::HttpClient`] made from now on; with one set,
/// addresses without a scheme (`host:port`) are reached over https too. The binary sets it
/// from `--ca-cert` / `FERROBAY_CA_CERT` before anything else.
pub fn set_default_client(tls: Option<ClientTls>) {
    let mut g = DEFAULT_CLIENT.write().unwrap_or_else(|p| p.into_inner());
    *g = tls;
}

/// The trust set by [`set_default_client`], if any.
pub fn default_client() -> Option<ClientTls> {
    DEFAULT_CLIENT
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// What [`generate`] makes, PEM text. The key fields are secrets: write them 0600.
pub struct Generated {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for Generated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Generated").finish_non_exhaustive()
    }
}

/// The subject of the CA [`generate`] makes; reusing a CA rebuilds this same name.
const CA_NAME: &str = "Ferrobay cluster CA";

fn ca_params(days: u32) -> Result<rcgen::CertificateParams, TlsError> {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, CA_NAME);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut p, days);
    Ok(p)
}

fn validity(p: &mut rcgen::CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A day back: clocks of a cluster are not exactly in step.
    p.not_before = now - time::Duration::days(1);
    p.not_after = now + time::Duration::days(i64::from(days));
}

fn rc(e: rcgen::Error) -> TlsError {
    TlsError::Config {
        what: "certificate".into(),
        reason: e.to_string(),
    }
}

/// A server certificate for `names` (DNS names, or IP addresses as IP SANs; the first is
/// also its common name) valid for `days`, signed by a new CA valid for `ca_days`, or by
/// the CA `reuse_ca` (its certificate and key PEM, made by an earlier [`generate`]).
pub fn generate(
    names: &[String],
    days: u32,
    ca_days: u32,
    reuse_ca: Option<(&str, &str)>,
) -> Result<Generated, TlsError> {
    if names.is_empty() {
        return Err(TlsError::Config {
            what: "certificate".into(),
            reason: "at least one name (--name HOST) is needed".into(),
        });
    }
    let (ca_key, ca_cert_pem) = match reuse_ca {
        Some((cert_pem, key_pem)) => (
            rcgen::KeyPair::from_pem(key_pem).map_err(|e| TlsError::Config {
                what: "the CA key".into(),
                reason: e.to_string(),
            })?,
            Some(cert_pem.to_string()),
        ),
        None => (rcgen::KeyPair::generate().map_err(rc)?, None),
    };
    // signed_by uses the issuer's name and key (not its serial or dates): rebuilding the
    // parameters of a CA made here signs exactly as the original would.
    let ca = ca_params(ca_days)?.self_signed(&ca_key).map_err(rc)?;
    let key = rcgen::KeyPair::generate().map_err(rc)?;
    let mut p = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| TlsError::Config {
        what: "--name".into(),
        reason: e.to_string(),
    })?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::CommonName, names[0].as_str());
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    validity(&mut p, days);
    let cert = p.signed_by(&key, &ca, &ca_key).map_err(rc)?;
    Ok(Generated {
        ca_cert_pem: ca_cert_pem.unwrap_or_else(|| ca.pem()),
        ca_key_pem: ca_key.serialize_pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
