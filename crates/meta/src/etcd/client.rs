//! The connection to an etcd cluster: one gRPC channel balanced over the endpoints, with
//! the timeouts, HTTP/2 keep-alive and require-leader metadata of every request, and the
//! service clients on it.

use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::channel::Change;
use tonic::transport::{Channel, Endpoint};

use super::EtcdOptions;
use super::api::etcdserverpb::kv_client::KvClient;
use super::api::etcdserverpb::lease_client::LeaseClient;
use super::api::etcdserverpb::watch_client::WatchClient;
use crate::error::MetaError;

/// Queued changes of the balanced channel's endpoint set (all inserted at connect).
const ENDPOINT_CHANGES: usize = 64;

/// The channel every service client sends on.
pub(super) type EtcdChannel = InterceptedService<Channel, RequireLeader>;

/// Adds etcd's require-leader metadata to every request: a member cut off from its
/// cluster then fails the request at once instead of serving stale reads or hanging
/// watches.
#[derive(Clone, Copy)]
pub(super) struct RequireLeader;

impl Interceptor for RequireLeader {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert(
            "hasleader",
            tonic::metadata::MetadataValue::from_static("true"),
        );
        Ok(request)
    }
}

/// A connection to the cluster. Cheap to clone (clones share the channel).
#[derive(Clone)]
pub(super) struct Client {
    channel: EtcdChannel,
}

impl Client {
    /// A channel to `endpoints` (`http://host:port` or `host:port`). Connects lazily: this
    /// succeeds while the cluster is down, and requests fail until it is up.
    pub async fn connect(endpoints: &[String], options: &EtcdOptions) -> Result<Self, MetaError> {
        let endpoints = endpoints
            .iter()
            .map(|e| endpoint(e, options))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(MetaError::Invalid("no etcd endpoints".into()));
        }
        // Balanced even over one endpoint, as etcd's own clients do.
        let (channel, changes) = Channel::balance_channel(ENDPOINT_CHANGES);
        for endpoint in endpoints {
            changes
                .send(Change::Insert(endpoint.uri().clone(), endpoint))
                .await
                .map_err(|_| MetaError::Backend("etcd: the channel's balancer stopped".into()))?;
        }
        Ok(Self {
            channel: InterceptedService::new(channel, RequireLeader),
        })
    }

    pub fn kv(&self) -> KvClient<EtcdChannel> {
        KvClient::new(self.channel.clone())
    }

    pub fn watch(&self) -> WatchClient<EtcdChannel> {
        WatchClient::new(self.channel.clone())
    }

    pub fn lease(&self) -> LeaseClient<EtcdChannel> {
        LeaseClient::new(self.channel.clone())
    }
}

fn endpoint(url: &str, options: &EtcdOptions) -> Result<Endpoint, MetaError> {
    if url.starts_with("https://") {
        return Err(MetaError::Invalid(format!(
            "etcd endpoint {url}: TLS is not supported, use http://"
        )));
    }
    let url = if url.starts_with("http://") {
        url.to_owned()
    } else {
        format!("http://{url}")
    };
    let endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| MetaError::Invalid(format!("etcd endpoint {url}: {e}")))?;
    let keep_alive = options.request_timeout / 2;
    Ok(endpoint
        .connect_timeout(options.connect_timeout)
        .timeout(options.request_timeout)
        // HTTP/2 pings find a dead connection (a cut link sends no reset).
        .http2_keep_alive_interval(keep_alive)
        .keep_alive_timeout(keep_alive)
        .keep_alive_while_idle(true))
}

/// `[key, range_end)` of every key under `prefix` (every key for `""`), as etcd's own
/// clients compute it.
pub(super) fn prefix_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    let key = prefix.as_bytes();
    if key.is_empty() {
        // "\0".."\0": from the smallest key to the end.
        return (vec![0], vec![0]);
    }
    (key.to_vec(), prefix_end(key))
}

/// The smallest key above every key starting with `key`: `key` with its last byte below
/// 0xff incremented and what follows dropped, or `"\0"` (no end) when every byte is 0xff.
fn prefix_end(key: &[u8]) -> Vec<u8> {
    match key.iter().rposition(|b| *b < 0xff) {
        Some(i) => {
            let mut end = key[..=i].to_vec();
            end[i] += 1;
            end
        }
        None => vec![0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges() {
        assert_eq!(prefix_range(""), (vec![0], vec![0]));
        assert_eq!(prefix_range("/a/"), (b"/a/".to_vec(), b"/a0".to_vec()));
        assert_eq!(prefix_range("foo1"), (b"foo1".to_vec(), b"foo2".to_vec()));
        // Bytes 0xff (etcd keys are bytes; ours are UTF-8, which has none) are dropped.
        assert_eq!(prefix_end(b"fo\xff\xff"), b"fp".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn endpoints_take_http_urls_and_bare_addresses() {
        let options = EtcdOptions::default();
        let with = endpoint("http://127.0.0.1:2379", &options).expect("url");
        let bare = endpoint("127.0.0.1:2379", &options).expect("bare");
        assert_eq!(with.uri(), bare.uri());
        let Err(MetaError::Invalid(why)) = endpoint("https://127.0.0.1:2379", &options) else {
            panic!("https accepted");
        };
        assert!(why.contains("TLS is not supported"), "{why}");
        assert!(matches!(
            endpoint("http://bad host:1", &options),
            Err(MetaError::Invalid(_))
        ));
    }
}
