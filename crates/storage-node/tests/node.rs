//! A real node on loopback (port 0) with a RAM and a file drive: bring-up, restart from
//! the same data dir, and the HTTP control API.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;

use storage_node::api::{AttachRequest, AttachmentView, CreateNamespaceRequest};
use storage_node::{ClientError, NodeClient, NodeConfig, StorageNode, parse_node_drive};

const MIB: u64 = 1 << 20;

fn local0() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn config(dir: &Path, drives: &[String]) -> NodeConfig {
    let mut cfg = NodeConfig::new("n1", dir.join("data"));
    cfg.listen = vec![local0()];
    cfg.discovery_listen = Some(local0());
    cfg.http_listen = Some(local0());
    cfg.drives = drives
        .iter()
        .map(|d| parse_node_drive(d).unwrap())
        .collect();
    cfg
}

fn drives(dir: &Path) -> Vec<String> {
    vec![
        "ram:64M".to_string(),
        format!("file:{}:32M", dir.join("d1.img").display()),
    ]
}

fn client(node: &StorageNode) -> NodeClient {
    NodeClient::new(node.http_addr().unwrap().to_string())
        .with_token(Some(node.api_token().as_str().to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bring_up_restart_and_control_api() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path(), &drives(dir.path())))
        .await
        .unwrap();
    let c = client(&node);

    // First start: one subsystem per drive, one namespace spanning each.
    let subs = c.subsystems().await.unwrap();
    let nqns: Vec<&str> = subs.iter().map(|s| s.nqn.as_str()).collect();
    assert_eq!(
        nqns,
        [
            "nqn.2026-01.io.ferrobay:n1:d0",
            "nqn.2026-01.io.ferrobay:n1:d1"
        ]
    );
    assert!(
        subs.iter()
            .all(|s| s.serial.len() == 20 && s.allow_any_host && s.namespaces == [1])
    );
    assert_ne!(subs[0].serial, subs[1].serial);
    let nss = c.list_namespaces().await.unwrap();
    assert_eq!(nss.len(), 2);
    assert_eq!((nss[0].size_bytes, nss[1].size_bytes), (64 * MIB, 32 * MIB));
    assert!(
        nss.iter()
            .all(|n| n.attachment.all && n.nguid.len() == 32 && n.eui64.len() == 16)
    );
    let target_ns = node.target().namespaces(&subs[0].nqn).unwrap();
    assert_eq!(hex::encode(target_ns[0].nguid), nss[0].nguid);
    assert_eq!(
        uuid::Uuid::from_bytes(target_ns[0].uuid).to_string(),
        nss[0].uuid
    );
    assert!(node.nvme_addrs()[0].port() != 0 && node.discovery_addr().unwrap().port() != 0);

    // Carve d0 into smaller namespaces through the HTTP API.
    let d0 = subs[0].nqn.clone();
    c.delete_namespace(&d0, 1).await.unwrap();
    assert!(node.target().namespaces(&d0).unwrap().is_empty());
    let a = c
        .create_namespace(&CreateNamespaceRequest {
            drive: Some("d0".into()),
            size_bytes: 8 * MIB,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (a.nsid, a.size_bytes, a.block_size_bytes),
        (1, 8 * MIB, 512)
    );
    let host = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    let b = c
        .create_namespace(&CreateNamespaceRequest {
            subsystem_nqn: Some(d0.clone()),
            size_bytes: 16 * MIB,
            block_size_bytes: Some(4096),
            attach: Some(AttachmentView {
                all: false,
                hosts: vec![],
            }),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        (
            b.nsid,
            b.block_size_bytes,
            b.attachment.all,
            b.attachment.hosts.len()
        ),
        (2, 4096, false, 0)
    );
    let b = c
        .attach_namespace(
            &d0,
            2,
            &AttachRequest {
                all: false,
                hosts: vec![host.into()],
            },
        )
        .await
        .unwrap();
    assert_eq!(b.attachment.hosts, [host]);
    let tb = node
        .target()
        .namespaces(&d0)
        .unwrap()
        .into_iter()
        .find(|n| n.nsid == 2)
        .unwrap();
    assert!(!tb.attachment.all && tb.attachment.hosts.contains(host));
    assert_eq!(tb.block_size_bytes, 4096);

    // Errors come back as one-line JSON messages with fitting status codes.
    let too_big = CreateNamespaceRequest {
        drive: Some("d0".into()),
        size_bytes: 64 * MIB,
        ..Default::default()
    };
    match c.create_namespace(&too_big).await {
        Err(ClientError::Api {
            status: 507,
            message,
        }) => {
            assert!(
                message.starts_with("drive d0: not enough free space"),
                "{message}"
            )
        }
        other => panic!("expected 507, got {other:?}"),
    }
    match c.delete_namespace(&d0, 9).await {
        Err(ClientError::Api {
            status: 404,
            message,
        }) => assert_eq!(message, format!("no namespace 9 in {d0}")),
        other => panic!("expected 404, got {other:?}"),
    }
    match c
        .attach_namespace(
            &d0,
            2,
            &AttachRequest {
                all: false,
                hosts: vec![host.into()],
            },
        )
        .await
    {
        Err(ClientError::Api { status: 409, .. }) => {}
        other => panic!("expected 409, got {other:?}"),
    }
    match c.request("GET", "/api/v1/nothing", None).await.unwrap() {
        (404, body) => assert!(String::from_utf8(body).unwrap().contains("\"error\"")),
        other => panic!("expected 404, got {other:?}"),
    }

    // Host access control.
    let s = c.allow_host(&d0, host).await.unwrap();
    assert!(!s.allow_any_host && s.allowed_hosts == [host]);

    // Metrics and health.
    let metrics = c.metrics().await.unwrap();
    assert!(
        metrics.contains(&format!(
            "ferrobay_namespace_read_ops_total{{node=\"n1\",subsystem=\"{d0}\",nsid=\"2\"}} 0"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("ferrobay_connections{node=\"n1\"} 0"));
    let health = c.health().await.unwrap();
    assert_eq!(
        (
            health.power_cycles,
            health.unsafe_shutdowns,
            health.drives.len()
        ),
        (1, 0, 2)
    );
    assert_eq!(health.drives[0].allocated_bytes, 24 * MIB);
    assert_eq!(health.drives[0].free_bytes, 40 * MIB);
    assert_eq!(health.drives[0].status, "ok");

    let before_ns = c.list_namespaces().await.unwrap();
    let before_subs = c.subsystems().await.unwrap();
    node.shutdown().await.unwrap();
    assert!(
        c.info().await.is_err(),
        "HTTP port still open after shutdown"
    );

    // Restart from the same data dir: everything comes back identical.
    let node = StorageNode::start(config(dir.path(), &drives(dir.path())))
        .await
        .unwrap();
    let c = client(&node);
    assert_eq!(c.list_namespaces().await.unwrap(), before_ns);
    let after_subs = c.subsystems().await.unwrap();
    for (x, y) in before_subs.iter().zip(&after_subs) {
        assert_eq!(
            (&x.nqn, &x.serial, &x.allowed_hosts, x.allow_any_host),
            (&y.nqn, &y.serial, &y.allowed_hosts, y.allow_any_host)
        );
    }
    let tb = node
        .target()
        .namespaces(&d0)
        .unwrap()
        .into_iter()
        .find(|n| n.nsid == 2)
        .unwrap();
    assert_eq!(
        hex::encode(tb.nguid),
        before_ns
            .iter()
            .find(|n| n.subsystem_nqn == d0 && n.nsid == 2)
            .unwrap()
            .nguid
    );
    assert!(!tb.attachment.all && tb.attachment.hosts.contains(host));
    let health = c.health().await.unwrap();
    assert_eq!((health.power_cycles, health.unsafe_shutdowns), (2, 0));
    node.shutdown().await.unwrap();

    // Restart with no drives given: brought up from the state alone.
    let node = StorageNode::start(config(dir.path(), &[])).await.unwrap();
    assert_eq!(client(&node).list_namespaces().await.unwrap(), before_ns);
    node.shutdown().await.unwrap();
}

/// `default_namespace: false` (what `ferrobay node run --meta` uses): new drives come up
/// with their subsystem and no namespace, the whole capacity free; drives already in the
/// state keep what they have whichever way the option is set on a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_drives_without_a_default_namespace() {
    let dir = tempfile::tempdir().unwrap();
    assert!(NodeConfig::new("n1", dir.path()).default_namespace);
    let mut cfg = config(dir.path(), &drives(dir.path()));
    cfg.default_namespace = false;
    let node = StorageNode::start(cfg).await.unwrap();
    let c = client(&node);
    let subs = c.subsystems().await.unwrap();
    assert_eq!(subs.len(), 2);
    assert!(
        subs.iter()
            .all(|s| s.namespaces.is_empty() && s.allow_any_host),
        "{subs:?}"
    );
    assert!(c.list_namespaces().await.unwrap().is_empty());
    for s in &subs {
        assert!(node.target().namespaces(&s.nqn).unwrap().is_empty());
    }
    let health = c.health().await.unwrap();
    let space: Vec<(u64, u64, u32)> = health
        .drives
        .iter()
        .map(|d| (d.allocated_bytes, d.free_bytes, d.namespaces))
        .collect();
    assert_eq!(space, [(0, 64 * MIB, 0), (0, 32 * MIB, 0)]);
    // All of it is there to carve: one namespace of the whole drive fits.
    let d0 = subs[0].nqn.clone();
    let whole = c
        .create_namespace(&CreateNamespaceRequest {
            subsystem_nqn: Some(d0.clone()),
            size_bytes: 64 * MIB,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!((whole.nsid, whole.size_bytes), (1, 64 * MIB));
    node.shutdown().await.unwrap();

    // Restart with the default and a new drive: only the new drive gets a namespace.
    let mut more = drives(dir.path());
    more.push("ram:16M".into());
    let node = StorageNode::start(config(dir.path(), &more)).await.unwrap();
    let c = client(&node);
    let subs = c.subsystems().await.unwrap();
    let per_sub: Vec<(&str, &[u32])> = subs
        .iter()
        .map(|s| (s.drive.as_str(), s.namespaces.as_slice()))
        .collect();
    assert_eq!(
        per_sub,
        [("d0", &[1][..]), ("d1", &[][..]), ("d2", &[1][..])]
    );
    let nss = c.list_namespaces().await.unwrap();
    assert_eq!(nss[0].nguid, whole.nguid);
    assert_eq!((nss[1].drive.as_str(), nss[1].size_bytes), ("d2", 16 * MIB));
    node.shutdown().await.unwrap();

    // And without it again: the namespaces of known drives stay.
    let mut cfg = config(dir.path(), &more);
    cfg.default_namespace = false;
    let node = StorageNode::start(cfg).await.unwrap();
    assert_eq!(client(&node).list_namespaces().await.unwrap(), nss);
    node.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_changed_or_vanished_drives_and_a_second_node() {
    let dir = tempfile::tempdir().unwrap();
    let node = StorageNode::start(config(dir.path(), &drives(dir.path())))
        .await
        .unwrap();
    let e = StorageNode::start(config(dir.path(), &drives(dir.path())))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is in use by another process"), "{e}");
    node.shutdown().await.unwrap();

    let img = dir.path().join("d1.img");
    let grown = vec!["ram:64M".to_string(), format!("file:{}:48M", img.display())];
    let e = StorageNode::start(config(dir.path(), &grown))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "the node state has file:{}:32M as drive d1",
            img.display()
        )),
        "{e}"
    );
    let e = StorageNode::start(config(dir.path(), &drives(dir.path())[..1]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("drives in the node state were not given: d1=file:"),
        "{e}"
    );

    std::fs::remove_file(&img).unwrap();
    let e = StorageNode::start(config(dir.path(), &drives(dir.path())))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("has vanished"), "{e}");
    assert!(!img.exists(), "a vanished drive was re-created");

    let mut other = config(dir.path(), &[]);
    other.name = "n2".into();
    let e = StorageNode::start(other).await.unwrap_err().to_string();
    assert_eq!(e, "data dir belongs to node \"n1\", not \"n2\"");
}
