//! What the cluster commands (`processor`, `node run --meta`, `volume --meta|--api`, `up`)
//! share: usage errors, opening the metadata store, stop signals, endpoints files.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

/// Exit code of a bad command line (clap's).
pub const USAGE_EXIT_CODE: u8 = 2;

/// A bad command line found after parsing (a combination clap cannot express). `main`
/// exits with [`USAGE_EXIT_CODE`] for it.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// A byte size argument (`1G`, `64k`); a bad one is a one-line usage error (exit 2).
pub fn parse_size_arg(flag: &str, s: &str) -> anyhow::Result<u64> {
    blockdev::parse_size_bytes(s).map_err(|e| usage(format!("{flag}: {e}")))
}

/// A volume level argument (`raid5`, `4+2`), checked, kept as text.
pub fn parse_level_arg(s: &str) -> anyhow::Result<String> {
    s.parse::<volume::LevelSpec>()
        .map(|_| s.to_string())
        .map_err(|e| usage(format!("--level: {e}")))
}

/// Opens the store a `--meta` URL names (`etcd://H:P[,H:P]` or `embedded:DIR`).
pub async fn open_store(url: &str) -> anyhow::Result<Arc<dyn meta::MetaStore>> {
    // A URL that names no store is a bad command line.
    control::metaurl::MetaUrl::parse(url).map_err(|e| usage(format!("--meta: {e}")))?;
    control::metaurl::open_meta(url)
        .await
        .with_context(|| format!("metadata store {url}"))
}

/// Waits for Ctrl-C or SIGTERM. The handlers are installed by this call, not at the first
/// poll, so a signal that arrives while a daemon is still starting ends it cleanly once
/// it is up instead of killing it half-way.
pub fn stop_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let int = signal(SignalKind::interrupt());
    let term = signal(SignalKind::terminate());
    async move {
        match (int, term) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Writes JSON to `path` atomically (`blockdev::write_atomic`): a reader never sees half.
pub fn write_json_file<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    blockdev::write_atomic(path, &serde_json::to_vec_pretty(value)?)
        .with_context(|| format!("write {}", path.display()))
}

/// A size for people: `1.0 GiB`, `64.0 KiB`, `512 B` (the one format of every table;
/// `--json` has the exact bytes).
pub fn human_bytes(n: u64) -> String {
    bytesize::ByteSize(n).display().iec().to_string()
}

/// Where the `ferrobay up` of this directory keeps the cluster's API token.
pub const UP_TOKEN_FILE: &str = "ferrobay-data/api-token";

/// The API token a client command sends: `--api-token-file`, else `$FERROBAY_API_TOKEN`,
/// else the first of `defaults` that exists (none: no token, and the API answers 401
/// saying so).
pub fn client_token(file: Option<&Path>, defaults: &[&Path]) -> anyhow::Result<Option<String>> {
    use httpapi::auth::Token;
    if let Some(f) = file {
        return Ok(Some(Token::read(f)?.as_str().to_string()));
    }
    if let Some(t) = Token::from_env()? {
        return Ok(Some(t.as_str().to_string()));
    }
    for d in defaults {
        if d.exists() {
            return Ok(Some(Token::read(d)?.as_str().to_string()));
        }
    }
    Ok(None)
}

/// The token a daemon requires: `--api-token-file` (read; made 0600 with a new token if it
/// does not exist), else `$FERROBAY_API_TOKEN`, else `None` (the daemon's default).
pub fn daemon_token(file: Option<&Path>) -> anyhow::Result<Option<httpapi::auth::Token>> {
    use httpapi::auth::Token;
    if let Some(f) = file {
        let (t, created) = Token::load_or_create(f)?;
        if created {
            tracing::info!(file = %f.display(), "new API token written");
        }
        return Ok(Some(t));
    }
    Ok(Token::from_env()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_for_people() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1 << 30), "1.0 GiB");
        assert_eq!(human_bytes(64 << 10), "64.0 KiB");
        assert_eq!(human_bytes(300 << 20), "300.0 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    #[test]
    fn argument_parsers() {
        assert_eq!(parse_size_arg("--size", "1G").unwrap(), 1 << 30);
        let e = parse_size_arg("--size", "1GB").unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some());
        assert!(e.to_string().starts_with("--size: "), "{e}");
        assert_eq!(parse_level_arg("raid5").unwrap(), "raid5");
        let e = parse_level_arg("raid7").unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some() && e.to_string().contains("raid7"));
    }
}

/// `--tls-cert FILE --tls-key FILE`: serve a daemon's HTTP port (API, dashboard, S3) over
/// TLS. Renewed files are picked up without a restart (`httpapi::tls`: when they change,
/// or at once on SIGHUP).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServerTlsArgs {
    /// Serve HTTPS with this certificate chain (PEM: the server's certificate first, then
    /// intermediates), e.g. cert.pem of `ferrobay gen-cert`. Needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM; keep it 0600). Never logged.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
}

impl ServerTlsArgs {
    /// The loaded certificate and key, checked (a bad file is a one-line error naming it);
    /// SIGHUP reloads them.
    pub fn load(&self) -> anyhow::Result<Option<httpapi::tls::ServerTls>> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => {
                let tls = httpapi::tls::ServerTls::from_pem_files(c, k)
                    .context("--tls-cert/--tls-key")?;
                reload_on_sighup(tls.clone());
                Ok(Some(tls))
            }
            _ => Ok(None),
        }
    }
}

/// SIGHUP loads the certificate and key again at once (the habit of other daemons; the
/// files are also looked at when they change), logging one line either way.
fn reload_on_sighup(tls: httpapi::tls::ServerTls) {
    use tokio::signal::unix::{SignalKind, signal};
    // Outside a runtime (never for the daemons) there is nothing to listen with.
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let _guard = rt.enter();
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        return;
    };
    rt.spawn(async move {
        while hup.recv().await.is_some() {
            match tls.reload() {
                Ok(()) => tracing::info!(
                    cert = %tls.cert_path().display(),
                    "SIGHUP: TLS certificate reloaded: new connections get it"
                ),
                Err(e) => tracing::warn!(
                    "SIGHUP: TLS certificate not reloaded, the loaded one stays in use: {e}"
                ),
            }
        }
    });
}

/// Makes the CAs of `--ca-cert FILE` (else `$FERROBAY_CA_CERT`) the trust of every API
/// client of this process (`httpapi::tls::set_default_client`).
pub fn trust_ca(ca_cert: Option<&Path>) -> anyhow::Result<()> {
    let from_env = std::env::var_os("FERROBAY_CA_CERT")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    let (path, what) = match (ca_cert, &from_env) {
        (Some(p), _) => (p, "--ca-cert"),
        (None, Some(p)) => (p.as_path(), "FERROBAY_CA_CERT"),
        (None, None) => return Ok(()),
    };
    let tls = httpapi::tls::ClientTls::from_ca_file(path).context(what)?;
    httpapi::tls::set_default_client(Some(tls));
    Ok(())
}
