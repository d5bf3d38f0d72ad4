//! The cluster REST API over real HTTP: three storage nodes in this process (loopback,
//! sparse-file drives, their own HTTP APIs), the embedded store, the API server. Checks
//! the token (401 without or with a wrong one, public paths open), every route family,
//! bad input answered with 4xx JSON, telemetry and failure predictions (a storage node's
//! drive returning media errors, a processor node's slow volume member copied out), and
//! that the committed OpenAPI documents are current.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use blockdev::{
    BlockDevice, FaultAction, FaultHandle, FaultOps, FaultRule, FaultyDevice, IoBuf, RamDevice,
    WriteFlags,
};
use control::health::{HealthMonitor, ProactivePolicy};
use telemetry::{Grade, MonotonicClock, PredictionConfig, Retention};
use volume::Volume;

use control::api::{ApiClient, ApiConfig, ApiServer};
use control::provision::CreateVolume;
use control::records::{NodeRecord, NodeRole};
use control::registration::{Registration, register_node};
use httpapi::auth::Token;
use httpapi::{ClientError, HttpClient};
use meta::MetaStore;
use meta::schema::{Severity, SubjectKind};
use nvmf_host::HostIdentity;
use storage_node::{DriveWrapper, StorageNode};

use common::{TTL, embedded_store, local0, node_config, register_storage_node, watched_raid5};

const MIB: u64 = 1 << 20;

struct Cluster {
    store: Arc<dyn MetaStore>,
    nodes: Vec<(StorageNode, Registration)>,
    token: Token,
    api: ApiServer,
    /// Faults of n0's drive d0 (inside its telemetry meter).
    n0_faults: FaultHandle,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let store = embedded_store(&dir.path().join("meta")).await;
        let token = control::auth::cluster_token(store.as_ref()).await.unwrap();
        let mut nodes = Vec::new();
        let n0_faults: Arc<Mutex<Option<FaultHandle>>> = Arc::default();
        for i in 0..3 {
            let name = format!("n{i}");
            let mut cfg = node_config(&name, &dir.path().join(&name), 64, &token);
            if i == 0 {
                let h = n0_faults.clone();
                cfg.wrap_drive = Some(DriveWrapper(Arc::new(move |_, dev| {
                    let faulty = Arc::new(FaultyDevice::new(dev));
                    *h.lock().unwrap() = Some(faulty.handle());
                    faulty
                })));
            }
            let node = StorageNode::start(cfg).await.unwrap();
            let reg = register_storage_node(&store, &name, &node).await;
            nodes.push((node, reg));
        }
        let api = ApiServer::start(
            local0(),
            ApiConfig {
                store: store.clone(),
                host: HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:api").unwrap(),
                token: token.clone(),
                node_name: "p1".into(),
                metrics: None,
                health: None,
                upgrade: None,
            },
        )
        .await
        .unwrap();
        let n0_faults = n0_faults.lock().unwrap().clone().unwrap();
        Cluster {
            store,
            nodes,
            token,
            api,
            n0_faults,
            _dir: dir,
        }
    }

    fn http(&self, token: Option<&str>) -> HttpClient {
        HttpClient::new(self.api.local_addr().to_string()).with_token(token.map(str::to_string))
    }

    fn client(&self) -> ApiClient {
        ApiClient::new(self.api.local_addr().to_string())
            .with_token(Some(self.token.as_str().to_string()))
    }

    async fn stop(self) {
        self.api.stop().await;
        for (node, reg) in self.nodes {
            reg.stop().await;
            node.shutdown().await.unwrap();
        }
    }
}

/// `(status, error message)` of a call expected to fail.
async fn refused(c: &HttpClient, method: &str, path: &str, body: Option<&[u8]>) -> (u16, String) {
    match c
        .call::<serde_json::Value>(method, path, body.map(<[u8]>::to_vec))
        .await
    {
        Err(ClientError::Api { status, message }) => (status, message),
        other => panic!("{method} {path}: expected an error, got {other:?}"),
    }
}

/// (method, path, body, status, text the error must contain).
type Case<'a> = (&'a str, &'a str, Option<&'a [u8]>, u16, &'a str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_is_required_except_on_public_paths() {
    let c = Cluster::start().await;
    let anon = c.http(None);
    let wrong = c.http(Some("not-the-token-0123456789"));
    for (method, path) in [
        ("GET", "/api/v1/volumes"),
        ("GET", "/api/v1/nodes"),
        ("GET", "/api/v1/events"),
        ("POST", "/api/v1/volumes"),
        ("DELETE", "/api/v1/volumes/x"),
        ("POST", "/api/v1/volumes/x/move"),
    ] {
        let (status, msg) = refused(&anon, method, path, Some(b"{}")).await;
        assert_eq!(status, 401, "{method} {path}");
        assert!(msg.contains("missing bearer token"), "{msg}");
        let (status, msg) = refused(&wrong, method, path, Some(b"{}")).await;
        assert_eq!((status, msg.as_str()), (401, "wrong bearer token"));
    }
    // The refusal says how to authenticate.
    let raw = tokio_raw(
        c.api.local_addr(),
        "GET /api/v1/volumes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 401"), "{raw}");
    assert!(
        raw.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{raw}"
    );
    // Public: the probe, the metrics, the document.
    let live: serde_json::Value = anon.call("GET", "/healthz", None).await.unwrap();
    assert_eq!(live["status"], "ok");
    assert_eq!(live["name"], "p1");
    let text = anon.text("/metrics").await.unwrap();
    assert!(
        text.contains("ferrobay_cluster_nodes{role=\"storage\"} 3"),
        "{text}"
    );
    let doc: serde_json::Value = anon
        .call("GET", "/api/v1/openapi.json", None)
        .await
        .unwrap();
    assert!(
        doc["paths"]["/api/v1/volumes"]["post"].is_object(),
        "{doc:#}"
    );
    // A public path is public to GET only.
    assert_eq!(refused(&anon, "POST", "/healthz", None).await.0, 401);

    // A storage node's own API: the same rules.
    let node = &c.nodes[0].0;
    let n_anon = HttpClient::new(node.http_addr().unwrap().to_string());
    assert_eq!(
        refused(&n_anon, "GET", "/api/v1/namespaces", None).await.0,
        401
    );
    assert_eq!(
        refused(&n_anon, "POST", "/api/v1/namespaces", Some(b"{}"))
            .await
            .0,
        401
    );
    let live: serde_json::Value = n_anon.call("GET", "/healthz", None).await.unwrap();
    assert_eq!(live["name"], "n0");
    assert!(
        n_anon
            .text("/metrics")
            .await
            .unwrap()
            .contains("ferrobay_drive_read_ops_total")
    );
    let doc: serde_json::Value = n_anon
        .call("GET", "/api/v1/openapi.json", None)
        .await
        .unwrap();
    assert!(doc["paths"]["/api/v1/namespaces"]["post"].is_object());
    // The node keeps its token 0600 in its data dir.
    use std::os::unix::fs::PermissionsExt as _;
    let dir = c._dir.path().join("n0").join("data");
    let path = StorageNode::api_token_path(&dir);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap().trim(),
        c.token.as_str()
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    c.stop().await;
}

async fn tokio_raw(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_drives_namespaces_hosts_volumes_and_events() {
    let c = Cluster::start().await;
    let api = c.client();
    let http = c.http(Some(c.token.as_str()));

    // Nodes from the records; drives, namespaces and access lists from each node's API.
    let names: Vec<String> = api
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect();
    assert_eq!(names, ["n0", "n1", "n2"]);
    let n1: NodeRecord = http.call("GET", "/api/v1/nodes/n1", None).await.unwrap();
    assert_eq!(n1.api_addr, c.nodes[1].0.http_addr());
    assert_eq!(refused(&http, "GET", "/api/v1/nodes/zz", None).await.0, 404);
    let drives: Vec<storage_node::api::DriveHealth> = http
        .call("GET", "/api/v1/nodes/n0/drives", None)
        .await
        .unwrap();
    assert_eq!(drives.len(), 1);
    assert_eq!(
        (drives[0].name.as_str(), drives[0].size_bytes),
        ("d0", 64 * MIB)
    );
    let all = api.drives().await.unwrap();
    assert_eq!(all.len(), 3);
    assert!(
        all.iter().all(|d| d.error.is_none() && d.drives.len() == 1),
        "{all:?}"
    );
    let nss = api.namespaces().await.unwrap();
    assert!(nss.iter().all(|n| n.namespaces.is_empty()), "{nss:?}");

    // Access lists: allow a host on n0's subsystem through the cluster API, then deny it.
    let sub = "nqn.2026-01.io.ferrobay:n0:d0";
    let host = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000001";
    let allowed: storage_node::api::SubsystemView = http
        .call_json(
            "POST",
            &format!("/api/v1/nodes/n0/subsystems/{sub}/hosts"),
            &serde_json::json!({"host_nqn": host}),
        )
        .await
        .unwrap();
    assert_eq!(allowed.allowed_hosts, [host]);
    assert!(!allowed.allow_any_host);
    let hosts = api.hosts().await.unwrap();
    let n0 = hosts.iter().find(|h| h.node == "n0").unwrap();
    assert_eq!(n0.subsystems[0].allowed_hosts, [host]);
    let denied: storage_node::api::SubsystemView = http
        .call(
            "DELETE",
            &format!("/api/v1/nodes/n0/subsystems/{sub}/hosts/{host}"),
            None,
        )
        .await
        .unwrap();
    assert!(denied.allowed_hosts.is_empty());
    let open: storage_node::api::SubsystemView = http
        .call_json(
            "PUT",
            &format!("/api/v1/nodes/n0/subsystems/{sub}/allow_any_host"),
            &serde_json::json!({"allow_any_host": true}),
        )
        .await
        .unwrap();
    assert!(open.allow_any_host);
    // The node's refusal comes through with its status.
    let (status, msg) = refused(
        &http,
        "POST",
        "/api/v1/nodes/n0/subsystems/nqn.nope/hosts",
        Some(br#"{"host_nqn": "nqn.x"}"#),
    )
    .await;
    assert_eq!(status, 404, "{msg}");

    // Volumes: create, view, status (no owner yet), delete.
    let create = CreateVolume {
        name: "web".into(),
        level: "raid5".into(),
        size_bytes: 16 * MIB,
        storage_nodes: vec!["n0".into(), "n1".into(), "n2".into()],
        ..CreateVolume::default()
    };
    let rec = api.create_volume(&create).await.unwrap();
    assert_eq!(rec.members.len(), 3);
    let view = api.volume("web").await.unwrap().unwrap();
    assert_eq!(view.record, rec);
    let nss = api.namespaces().await.unwrap();
    assert!(nss.iter().all(|n| n.namespaces.len() == 1), "{nss:?}");
    let (status, msg) = refused(&http, "GET", "/api/v1/volumes/web/status", None).await;
    assert_eq!(status, 404);
    assert!(msg.contains("no processor node owns it"), "{msg}");
    assert_eq!(
        refused(&http, "GET", "/api/v1/volumes/nope/status", None)
            .await
            .0,
        404
    );
    let gone = api.delete_volume("web", false).await.unwrap();
    assert_eq!(gone.uuid, rec.uuid);

    // Events: newest first, pages, `since`.
    for i in 0..5u64 {
        let e = control::events::new_event(
            control::events::kind::MEMBER_FAILED,
            Severity::Error,
            SubjectKind::Volume,
            "web",
            format!("test event {i}"),
        );
        control::events::emit(c.store.as_ref(), control::events::with_field(e, "i", i))
            .await
            .unwrap();
    }
    let page = api.events(0, None, 2).await.unwrap();
    let ids: Vec<u64> = page.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, [5, 4]);
    assert_eq!(page.last_id, 5);
    assert_eq!(page.next_before, Some(4));
    let older = api.events(0, page.next_before, 10).await.unwrap();
    assert_eq!(
        older.events.iter().map(|e| e.id).collect::<Vec<_>>(),
        [3, 2, 1]
    );
    assert_eq!(older.next_before, None);
    let newer = api.events(3, None, 10).await.unwrap();
    assert_eq!(
        newer.events.iter().map(|e| e.id).collect::<Vec<_>>(),
        [5, 4]
    );
    assert_eq!(newer.events[0].event.message, "test event 4");
    assert_eq!(newer.events[0].event.fields["i"], 4);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_4xx_json() {
    let c = Cluster::start().await;
    let http = c.http(Some(c.token.as_str()));
    let cases: [Case; 12] = [
        ("POST", "/api/v1/volumes", Some(b"{"), 400, "bad JSON body"),
        ("POST", "/api/v1/volumes", Some(b"[1,2]"), 400, "bad JSON body"),
        (
            "POST",
            "/api/v1/volumes",
            Some(br#"{"name":"v","level":"raid5","size_bytes":1,"storage_nodes":["n0"],"colour":"red"}"#),
            400,
            "unknown field `colour`",
        ),
        ("POST", "/api/v1/volumes", None, 400, "empty"),
        ("POST", "/api/v1/volumes/web/move", Some(br#"{"to": 5}"#), 400, "bad JSON body"),
        ("GET", "/api/v1/events?limit=0", None, 400, "limit 0"),
        ("GET", "/api/v1/events?limit=abc", None, 400, "bad query"),
        ("GET", "/api/v1/events?sinse=3", None, 400, "unknown field `sinse`"),
        ("DELETE", "/api/v1/volumes/web?force=maybe", None, 400, "bad query"),
        ("GET", "/api/v1/volumes/%FF", None, 400, "bad path"),
        ("GET", "/api/v1/nothing", None, 404, "no such path"),
        ("PUT", "/api/v1/volumes", None, 405, "PUT is not allowed"),
    ];
    for (method, path, body, status, text) in cases {
        let (s, msg) = refused(&http, method, path, body).await;
        assert_eq!(s, status, "{method} {path}: {msg}");
        assert!(msg.contains(text), "{method} {path}: {msg}");
    }
    // Oversized body: 413 with a JSON error, and the server keeps serving.
    let big = vec![b' '; httpapi::server::MAX_REQUEST_BODY_BYTES + 1];
    let (status, body) = http
        .request("POST", "/api/v1/volumes", Some(big))
        .await
        .unwrap();
    assert_eq!(status, 413);
    serde_json::from_slice::<httpapi::ErrorBody>(&body).unwrap();
    // Bad requests to a storage node through the cluster API: a processor-node question.
    let (s, msg) = refused(&http, "GET", "/api/v1/nodes/zz/drives", None).await;
    assert_eq!((s, msg.contains("no live node")), (404, true), "{msg}");
    // A storage node that stopped answering: listed with its error, the others answer.
    let (node, reg) = c.nodes.last().unwrap();
    let _ = reg;
    node.shutdown().await.unwrap();
    let all = c.client().drives().await.unwrap();
    let n2 = all.iter().find(|d| d.node == "n2").unwrap();
    assert!(
        n2.error.as_deref().is_some_and(|e| !e.is_empty()),
        "{all:?}"
    );
    assert!(
        all.iter().filter(|d| d.error.is_none()).count() == 2,
        "{all:?}"
    );
    let (s, _) = refused(&http, "GET", "/api/v1/nodes/n2/drives", None).await;
    assert_eq!(s, 502);
    let live: serde_json::Value = http.call("GET", "/healthz", None).await.unwrap();
    assert_eq!(live["status"], "ok");
    c.api.stop().await;
}

/// Registers a processor node record named `name` whose API is at `api`.
async fn register_processor(c: &Cluster, name: &str, api: SocketAddr) -> Registration {
    let record = NodeRecord {
        api_addr: Some(api),
        version: "test".into(),
        started_unix_ms: 1,
        ..NodeRecord::new(name, NodeRole::Processor, vec![])
    };
    register_node(c.store.clone(), record, TTL).await.unwrap()
}

/// RAID-5 over 3 RAM members plus a spare, all metered, member 1 behind a fault injector,
/// watched by `monitor` as volume "web".
async fn watched_volume(monitor: &HealthMonitor) -> (Arc<Volume>, FaultHandle) {
    let slow = Arc::new(FaultyDevice::new(Arc::new(RamDevice::new("m1", 8 * MIB))));
    let faults = slow.handle();
    let drives: Vec<Arc<dyn BlockDevice>> = vec![
        Arc::new(RamDevice::new("m0", 8 * MIB)),
        slow,
        Arc::new(RamDevice::new("m2", 8 * MIB)),
        Arc::new(RamDevice::new("s0", 8 * MIB)),
    ];
    let (volume, _) = watched_raid5(monitor, "web", drives).await;
    (volume, faults)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_and_predictions_of_drives_and_volume_members() {
    let c = Cluster::start().await;
    let api = c.client();
    let http = c.http(Some(c.token.as_str()));
    let n0 = &c.nodes[0].0;

    // Real I/O over NVMe/TCP to a namespace on n0: 5 writes and 3 reads of 64 KiB.
    let ns = n0
        .create_namespace(storage_node::api::CreateNamespaceRequest {
            drive: Some("d0".into()),
            size_bytes: 8 * MIB,
            ..Default::default()
        })
        .await
        .unwrap();
    let url = format!(
        "nvme+tcp://{}/{}/{}",
        n0.nvme_addrs()[0],
        ns.subsystem_nqn,
        ns.nsid
    );
    let dev = nvmf_host::NvmeTcpUrl::parse(&url)
        .unwrap()
        .open(
            &HostIdentity::from_uuid([9; 16]),
            &nvmf_host::ConnectOptions::default(),
        )
        .await
        .unwrap();
    let chunk = 64u64 << 10;
    let mut buf = IoBuf::from_slice(&vec![0x3C; chunk as usize]);
    for i in 0..5 {
        buf = dev
            .write(i * chunk, buf, WriteFlags::default())
            .await
            .unwrap();
    }
    for i in 0..3 {
        buf = dev.read(i * chunk, buf).await.unwrap();
    }
    let t = api.node_telemetry("n0").await.unwrap();
    let nst = t
        .namespaces
        .iter()
        .find(|n| n.subsystem_nqn == ns.subsystem_nqn && n.nsid == ns.nsid)
        .unwrap();
    assert_eq!((nst.io.write.ops, nst.io.write.bytes), (5, 5 * chunk));
    assert_eq!((nst.io.read.ops, nst.io.read.bytes), (3, 3 * chunk));
    assert_eq!(nst.io.read.latency.count, 3);
    assert!(nst.io.read.latency.p50_us > 0, "{nst:?}");
    let d0 = &t.drives[0];
    assert!(d0.io.write.ops >= 5 && d0.io.read.ops >= 3, "{d0:?}");
    let all = api.telemetry().await.unwrap();
    assert_eq!(all.len(), 3);
    assert!(
        all.iter().all(|n| n.error.is_none() && n.drives.len() == 1),
        "{all:?}"
    );

    // n0's drive returns media errors: the host sees them, the cluster API the grade.
    c.n0_faults
        .add(FaultRule::new(FaultOps::READ, FaultAction::Media).times(8));
    for i in 0..8 {
        assert!(
            dev.read(i * chunk, IoBuf::new_zeroed(chunk as usize))
                .await
                .is_err()
        );
    }
    for (node, _) in &c.nodes {
        node.telemetry().tick();
    }
    let drives = api.drives().await.unwrap();
    let grade_of = |node: &str| {
        let d = &drives.iter().find(|d| d.node == node).unwrap().drives[0];
        d.prediction.clone().unwrap()
    };
    let failing = grade_of("n0");
    assert_eq!(failing.grade, Grade::Failing, "{failing:?}");
    assert!(
        failing.reason.starts_with("media_errors: 8 media errors"),
        "{failing:?}"
    );
    assert_eq!(grade_of("n1").grade, Grade::Ok);
    assert_eq!(grade_of("n2").reason, "");

    // Processor nodes: this API's own (p1, no volumes here) and p2's, asked through its
    // API. p2 owns volume "web" whose member 1 turns slow under load.
    let monitor = Arc::new(HealthMonitor::new(
        PredictionConfig {
            window_ms: 2_000,
            min_ops_per_sample: 3,
            min_judged_samples: 4,
            ..PredictionConfig::default()
        },
        ProactivePolicy::default(),
        Retention::default(),
        Arc::new(MonotonicClock::new()),
    ));
    let (volume, slow) = watched_volume(&monitor).await;
    let p2 = ApiServer::start(
        local0(),
        ApiConfig {
            store: c.store.clone(),
            host: HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:p2").unwrap(),
            token: c.token.clone(),
            node_name: "p2".into(),
            metrics: None,
            health: Some(monitor.clone()),
            upgrade: None,
        },
    )
    .await
    .unwrap();
    let r1 = register_processor(&c, "p1", c.api.local_addr()).await;
    let r2 = register_processor(&c, "p2", p2.local_addr()).await;
    slow.add(FaultRule::new(
        FaultOps::READ.union(FaultOps::WRITE),
        FaultAction::Delay(Duration::from_millis(4)),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..4u64)
        .map(|w| {
            let (volume, stop) = (volume.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let off = (w * 64 + i % 64) * (16 << 10);
                    let data = IoBuf::from_slice(&[w as u8; 16 << 10]);
                    volume
                        .write(off, data, WriteFlags::default())
                        .await
                        .unwrap();
                    i += 1;
                }
            })
        })
        .collect();
    // The monitor's rounds, until the slow member is failing and copied out.
    let start = std::time::Instant::now();
    let mut copying = None;
    while start.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let events = monitor.tick().await;
        if events.iter().any(|e| e.kind == "proactive_copy_started") {
            // Asked before the next round: the copy this round started still runs.
            copying = Some(api.predictions().await.unwrap());
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    for l in load {
        l.await.unwrap();
    }
    let all = copying.expect("the slow member was never copied out");
    let roles: Vec<(&str, NodeRole)> = all.iter().map(|n| (n.node.as_str(), n.role)).collect();
    assert_eq!(
        roles,
        [
            ("n0", NodeRole::Storage),
            ("n1", NodeRole::Storage),
            ("n2", NodeRole::Storage),
            ("p1", NodeRole::Processor),
            ("p2", NodeRole::Processor)
        ]
    );
    assert!(all.iter().all(|n| n.error.is_none()), "{all:?}");
    assert_eq!(all[0].drives[0].prediction.grade, Grade::Failing);
    assert!(all[3].members.is_empty(), "p1 owns no volume: {all:?}");
    let m1 = all[4].members.iter().find(|m| m.member == 1).unwrap();
    assert_eq!((m1.volume.as_str(), m1.device.as_str()), ("web", "m1"));
    assert_eq!(m1.prediction.grade, Grade::Failing, "{m1:?}");
    assert!(m1.prediction.reason.contains("fail_slow"), "{m1:?}");
    assert!(m1.proactive_copy, "{m1:?}");
    assert!(
        all[4]
            .members
            .iter()
            .filter(|m| m.member != 1)
            .all(|m| !m.proactive_copy),
        "{all:?}"
    );
    let one = api.node_predictions("p2").await.unwrap();
    assert_eq!(one.members.len(), all[4].members.len());
    // `ferrobay predictions` lists the failing ones first, the copy in progress said.
    let text = control::api::text::cluster_predictions_text(&all);
    let rows: Vec<&str> = text.lines().skip(1).collect();
    let failing = rows.iter().take_while(|l| l.contains(" failing ")).count();
    assert_eq!(failing, 2, "n0's drive and web's member 1 first:\n{text}");
    assert!(
        rows[..failing]
            .iter()
            .any(|l| l.starts_with("p2") && l.contains("web member 1 (copying)")),
        "{text}"
    );
    assert!(
        rows[failing..].iter().all(|l| !l.contains(" failing ")),
        "{text}"
    );

    // Bad questions get 4xx JSON.
    let cases: [(&str, u16, &str); 5] = [
        ("/api/v1/nodes/p2/telemetry", 400, "processor node"),
        ("/api/v1/nodes/zz/telemetry", 404, "no live node"),
        ("/api/v1/nodes/zz/predictions", 404, "no live node"),
        ("/api/v1/nodes/p2/predictions?local=maybe", 400, "bad query"),
        (
            "/api/v1/nodes/p2/predictions?locl=true",
            400,
            "unknown field `locl`",
        ),
    ];
    for (path, status, text) in cases {
        let (s, msg) = refused(&http, "GET", path, None).await;
        assert_eq!(s, status, "{path}: {msg}");
        assert!(msg.contains(text), "{path}: {msg}");
    }
    // A processor's API asked for another's members with `local` does not forward.
    let (s, msg) = refused(
        &http,
        "GET",
        "/api/v1/nodes/p2/predictions?local=true",
        None,
    )
    .await;
    assert_eq!(s, 502, "{msg}");
    r1.stop().await;
    r2.stop().await;
    p2.stop().await;
    c.stop().await;
}

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/api")
}

/// The committed documents are what the code generates. To update them:
/// `FERROBAY_UPDATE_OPENAPI=1 cargo test -p control --test api openapi`.
#[test]
fn openapi_documents_are_current() {
    let docs = [
        ("openapi.json", control::api::openapi()),
        ("node-openapi.json", storage_node::http::openapi()),
    ];
    let update = std::env::var_os("FERROBAY_UPDATE_OPENAPI").is_some();
    let mut stale = Vec::new();
    for (file, doc) in docs {
        let want = httpapi::openapi::to_json(&doc);
        let path = docs_dir().join(file);
        if update {
            std::fs::create_dir_all(docs_dir()).unwrap();
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            stale.push(path.display().to_string());
        }
        // Every operation but the public ones is behind the token, and says its errors.
        let v: serde_json::Value = serde_json::from_str(&want).unwrap();
        for (p, ops) in v["paths"].as_object().unwrap() {
            for (m, op) in ops.as_object().unwrap() {
                let public = ["/metrics", "/healthz"].contains(&p.as_str());
                assert_eq!(op.get("security").is_some(), public, "{m} {p}: {op:#}");
                if p.starts_with("/api/") {
                    assert!(
                        op["responses"]["default"].is_object(),
                        "{m} {p} has no error answer"
                    );
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "stale OpenAPI documents {stale:?}: run FERROBAY_UPDATE_OPENAPI=1 cargo test -p control --test api openapi"
    );
}

/// The API and the dashboard on its port over HTTPS (`ApiServer::start_tls`): a client
/// trusting the CA gets answers (the token still required), one without it is refused.
#[tokio::test]
async fn api_and_dashboard_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let store = embedded_store(&dir.path().join("meta")).await;
    let token = control::auth::cluster_token(store.as_ref()).await.unwrap();
    let g = httpapi::tls::generate(&["127.0.0.1".to_string()], 30, 30, None).unwrap();
    let (ca, cert, key) = (
        dir.path().join("ca.pem"),
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
    );
    std::fs::write(&ca, &g.ca_cert_pem).unwrap();
    std::fs::write(&cert, &g.cert_pem).unwrap();
    std::fs::write(&key, &g.key_pem).unwrap();
    let api = ApiServer::start_tls(
        local0(),
        ApiConfig {
            store: store.clone(),
            host: HostIdentity::from_hostnqn("nqn.2026-01.io.ferrobay:test:api").unwrap(),
            token: token.clone(),
            node_name: "p1".into(),
            metrics: None,
            health: None,
            upgrade: None,
        },
        Some(httpapi::tls::ServerTls::from_pem_files(&cert, &key).unwrap()),
    )
    .await
    .unwrap();
    let url = format!("https://{}", api.local_addr());
    let trusted = || {
        HttpClient::new(url.clone()).with_tls(httpapi::tls::ClientTls::from_ca_file(&ca).unwrap())
    };
    let (status, _) = trusted().request("GET", "/ui/", None).await.unwrap();
    assert_eq!(status, 200);
    let e = trusted()
        .call::<serde_json::Value>("GET", "/api/v1/nodes", None)
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");
    let nodes: serde_json::Value = trusted()
        .with_token(Some(token.as_str().to_string()))
        .call("GET", "/api/v1/nodes", None)
        .await
        .unwrap();
    assert!(nodes.is_array() || nodes.is_object(), "{nodes}");
    let e = HttpClient::new(url.clone())
        .request("GET", "/healthz", None)
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");
    api.stop().await;
}
