//! `--meta` URLs: `etcd://HOST:PORT[,HOST:PORT...]` (an etcd v3 cluster) or
//! `embedded:DIR` (redb in DIR; one process at a time).

use std::path::PathBuf;
use std::sync::Arc;

use meta::{EmbeddedOptions, EmbeddedStore, EtcdOptions, EtcdStore, MetaError, MetaStore};

use crate::error::ControlError;

/// What a URL names, before anything is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaUrl {
    /// `HOST:PORT` endpoints.
    Etcd(Vec<String>),
    Embedded(PathBuf),
}

fn bad(url: &str, reason: impl Into<String>) -> ControlError {
    ControlError::MetaUrl {
        url: url.to_string(),
        reason: reason.into(),
    }
}

impl MetaUrl {
    pub fn parse(url: &str) -> Result<MetaUrl, ControlError> {
        if let Some(rest) = url.strip_prefix("etcd://") {
            let rest = rest.trim_end_matches('/');
            if rest.is_empty() {
                return Err(bad(
                    url,
                    "no endpoint (expected etcd://HOST:PORT[,HOST:PORT])",
                ));
            }
            let mut endpoints = Vec::new();
            for ep in rest.split(',') {
                let Some((host, port)) = ep.rsplit_once(':') else {
                    return Err(bad(url, format!("endpoint {ep:?} has no :PORT")));
                };
                if host.is_empty() || host.contains('/') || host.contains('@') {
                    return Err(bad(url, format!("endpoint {ep:?} has no valid host")));
                }
                if port.parse::<u16>().ok().filter(|p| *p != 0).is_none() {
                    return Err(bad(url, format!("endpoint {ep:?} has no valid port")));
                }
                endpoints.push(ep.to_string());
            }
            return Ok(MetaUrl::Etcd(endpoints));
        }
        if let Some(dir) = url.strip_prefix("embedded:") {
            let dir = dir.strip_prefix("//").unwrap_or(dir);
            if dir.is_empty() {
                return Err(bad(url, "no directory (expected embedded:DIR)"));
            }
            return Ok(MetaUrl::Embedded(PathBuf::from(dir)));
        }
        Err(bad(
            url,
            "expected etcd://HOST:PORT[,HOST:PORT] or embedded:DIR",
        ))
    }
}

/// Opens the store `url` names. etcd connects lazily (a cluster that is down fails the
/// first request, not this); the embedded store creates DIR if needed and fails when
/// another process has it open.
pub async fn open_meta(url: &str) -> Result<Arc<dyn MetaStore>, ControlError> {
    match MetaUrl::parse(url)? {
        MetaUrl::Etcd(endpoints) => {
            let endpoints: Vec<String> = endpoints.iter().map(|e| format!("http://{e}")).collect();
            let store = EtcdStore::connect(&endpoints, EtcdOptions::default())
                .await
                .map_err(|e| bad(url, e.to_string()))?;
            Ok(Arc::new(store))
        }
        MetaUrl::Embedded(dir) => {
            std::fs::create_dir_all(&dir)
                .map_err(|e| bad(url, format!("cannot create {}: {e}", dir.display())))?;
            let store = EmbeddedStore::open(&dir, EmbeddedOptions::default())
                .await
                .map_err(|e| match e {
                    // The URL is fine; the store is busy.
                    MetaError::InUse(_) => ControlError::Meta(e),
                    other => bad(url, other.to_string()),
                })?;
            Ok(Arc::new(store))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_good_urls() {
        assert_eq!(
            MetaUrl::parse("etcd://127.0.0.1:2379").ok(),
            Some(MetaUrl::Etcd(vec!["127.0.0.1:2379".into()]))
        );
        assert_eq!(
            MetaUrl::parse("etcd://a:1,[::1]:2379/").ok(),
            Some(MetaUrl::Etcd(vec!["a:1".into(), "[::1]:2379".into()]))
        );
        assert_eq!(
            MetaUrl::parse("embedded:/var/lib/x").ok(),
            Some(MetaUrl::Embedded("/var/lib/x".into()))
        );
        assert_eq!(
            MetaUrl::parse("embedded:rel/dir").ok(),
            Some(MetaUrl::Embedded("rel/dir".into()))
        );
    }

    #[test]
    fn refuses_bad_urls_in_one_line() {
        for u in [
            "",
            "etcd://",
            "etcd://host",
            "etcd://host:0",
            "etcd://host:x",
            "etcd://:2379",
            "etcd://a:1,,b:2",
            "http://127.0.0.1:2379",
            "embedded:",
            "redb:/x",
        ] {
            let e = MetaUrl::parse(u).expect_err(u).to_string();
            assert!(
                e.contains("invalid metadata store URL") && !e.contains('\n'),
                "{e}"
            );
        }
    }

    #[tokio::test]
    async fn opens_an_embedded_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("embedded:{}", dir.path().join("meta").display());
        let store = open_meta(&url).await.expect("open");
        store.put("/ferrobay/x", b"1".to_vec()).await.expect("put");
        drop(store);
    }

    #[tokio::test]
    async fn a_store_open_elsewhere_is_in_use_not_a_bad_url() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("embedded:{}", dir.path().join("meta").display());
        let _held = open_meta(&url).await.expect("open");
        let e = match open_meta(&url).await {
            Ok(_) => panic!("a second open of {url} succeeded"),
            Err(e) => e,
        };
        assert!(
            matches!(e, ControlError::Meta(MetaError::InUse(_))),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("is open in another process")
                && text.contains("ask that through its API")
                && !text.contains("invalid metadata store URL")
                && !text.contains('\n'),
            "{text}"
        );
    }
}
