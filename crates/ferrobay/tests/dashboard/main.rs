//! The web dashboard in a real browser (headless Chromium from Debian's packages, driven
//! over WebDriver by chromedriver), against real clusters:
//!
//! - `ferrobay up` (one process): the page loads with no console error and shows the
//!   three storage nodes, the processor node, vol0 healthy with its owner; I/O from a
//!   host draws the throughput chart; a volume created through the form appears in the
//!   page and in `ferrobay volume list`; a refused create shows the server's message.
//! - a cluster of processes (etcd, three `node run`, two `processor run`), the page
//!   served by p1: a volume moved to p2 through the page changes owner; `kill -9` of a
//!   storage node under load shows the volume degraded, the node down and the
//!   `member_failed` event.
//!
//! Screenshots (PNG) of every step are kept in `target/dashboard-screenshots/` and
//! inspected: the health badge's colour, a chart line above zero.

#[path = "../common/mod.rs"]
mod common;

mod browser;
mod shot;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use blockdev::{BlockDevice, IoBuf, WriteFlags};
use browser::Browser;
use common::cluster::{Daemon, node_run_args, processor_run_args, run_cli};
use common::up::Up;
use common::{ferrobay_bin, scratch_dir};
use nvmf_host::{ConnectOptions, HostIdentity, NvmeTcpUrl};
use serde_json::Value;

const PAGE_TIMEOUT: Duration = Duration::from_secs(20);
const LEASE_TTL_MS: &str = "2000";
const HOST_UUID: [u8; 16] = *b"ferrobay-dash-t1";

fn skip() -> bool {
    if let Some(why) = browser::missing() {
        testkit::prereq::missing(why);
        return true;
    }
    false
}

/// A host writing 128 KiB blocks to `url` until stopped (the charts' load).
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<u64>,
}

impl Load {
    async fn start(url: &str) -> Load {
        let host = HostIdentity::from_uuid(HOST_UUID);
        let dev: Arc<dyn BlockDevice> = NvmeTcpUrl::parse(url)
            .expect("volume url")
            .open_device(&host, &ConnectOptions::default())
            .await
            .expect("connect to the volume");
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let block = 128 << 10;
            let data = IoBuf::from_slice(&vec![0x5a; block]);
            let mut written = 0u64;
            let mut off = 0u64;
            while !s.load(Ordering::Relaxed) {
                // Errors are expected while a member dies: the volume goes degraded and
                // the next write succeeds.
                if dev
                    .write(off, data.clone(), WriteFlags::default())
                    .await
                    .is_ok()
                {
                    written += block as u64;
                }
                off = (off + block as u64) % (32 << 20);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            written
        });
        Load { stop, task }
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("load task")
    }
}

async fn wait_volume_state(b: &Browser, volume: &str, want: &str) {
    b.wait_js(
        &format!("{volume} {want} in the page"),
        &format!(
            "const r = document.querySelector('tr[data-volume=\"{volume}\"]'); return !!r && r.dataset.state === '{want}';"
        ),
        PAGE_TIMEOUT,
    )
    .await;
}

/// The health badge of `volume` covers mostly `colour` in `shot`.
async fn assert_badge_colour(b: &Browser, shot: &shot::Shot, volume: &str, colour: shot::Rgb) {
    let rect = b
        .rect(&format!("tr[data-volume=\"{volume}\"] td.state .badge"))
        .await;
    let share = shot.share_of(rect, colour, 24);
    assert!(
        share > 0.5,
        "{}: the {volume} badge at {rect:?} is {:.0} % {colour:?}",
        shot.path.display(),
        share * 100.0
    );
}

/// The URL of member `slot` of `volume`, from `ferrobay volume status --json`.
fn member_url(api: &str, token_file: &str, volume: &str, slot: usize) -> String {
    let out = run_cli(
        Path::new(ferrobay_bin()),
        &[
            "volume",
            "status",
            volume,
            "--json",
            "--api",
            api,
            "--api-token-file",
            token_file,
        ],
    )
    .expect("volume status");
    let v: Value = serde_json::from_str(&out).expect("JSON");
    v["record"]["members"][slot]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("no member {slot}: {v:#}"))
        .to_string()
}

fn dashboard_url(stdout: &[String]) -> String {
    stdout
        .iter()
        .find_map(|l| l.strip_prefix("Dashboard: "))
        .unwrap_or_else(|| panic!("no Dashboard line in the banner:\n{}", stdout.join("\n")))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_ferrobay_up() {
    if skip() {
        return;
    }
    let dir = scratch_dir("dashboard-up");
    let port = testkit::net::free_port().expect("port");
    let mut up = Up::start(&dir.path().join("data"), port, dir.path().join("up.log"));
    let connect = tokio::task::block_in_place(|| up.wait_connect_line());
    let url = dashboard_url(&up.stdout);
    // The token in the fragment: the one in the data dir.
    let token_file = dir.path().join("data").join("api-token");
    let token = std::fs::read_to_string(&token_file).expect("token file");
    assert!(
        url.ends_with(&format!("/ui/#token={}", token.trim())),
        "{url}"
    );
    let token_file = token_file.display().to_string();
    let api = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_string();

    let mut b = Browser::start(browser::shots_dir("ferrobay-up")).await;
    b.client.goto(&url).await.expect("open the dashboard");
    // The page keeps the token in the tab and drops it from the address bar.
    let left = b
        .wait_js(
            "the token moved out of the URL",
            "return location.hash === '' && sessionStorage.getItem('ferrobay.api-token') ? location.href : '';",
            PAGE_TIMEOUT,
        )
        .await;
    assert!(left.as_str().is_some_and(|u| u.ends_with("/ui/")), "{left}");
    b.wait_js(
        "first refresh",
        "return document.body.dataset.loaded === 'yes';",
        PAGE_TIMEOUT,
    )
    .await;
    wait_volume_state(&b, "vol0", "healthy").await;
    // The cluster at a glance.
    let nodes = b
        .wait_js(
            "four nodes up",
            "const rows = [...document.querySelectorAll('#nodes tr[data-node]')]; \
             const up = rows.filter(r => r.querySelector('.state').textContent === 'up'); \
             return up.length === 4 ? up.map(r => r.dataset.node + ':' + r.dataset.role) : null;",
            PAGE_TIMEOUT,
        )
        .await;
    assert_eq!(
        nodes,
        serde_json::json!(["p1:processor", "n1:storage", "n2:storage", "n3:storage"]),
    );
    // Every drive shows the grade its node's prediction gave it (through the drives route).
    let grades = b
        .wait_js(
            "drive grades",
            "const g = [...document.querySelectorAll('tr[data-drive] td.grade')].map(t => t.textContent); \
             return g.length >= 3 && g.every(t => t === 'ok') ? g : null;",
            PAGE_TIMEOUT,
        )
        .await;
    assert!(grades.as_array().is_some_and(|g| g.len() >= 3), "{grades}");
    let owner = b.text("tr[data-volume=\"vol0\"] td.owner").await;
    assert_eq!(owner, "p1 (epoch 1)");
    let members = b.text("tr[data-volume=\"vol0\"] .members").await;
    for n in ["n1", "n2", "n3"] {
        assert!(members.contains(n), "members of vol0: {members}");
    }
    b.assert_no_console_errors("after loading").await;

    // A host writes: the throughput chart draws vol0's writes above zero.
    let nqn = common::up::arg_after(&connect, "-n").expect("nqn");
    let nvme = format!("127.0.0.1:{port}");
    let load = Load::start(&format!("nvme+tcp://{nvme}/{nqn}/1")).await;
    b.wait_js(
        "vol0 writes charted",
        "const li = [...document.querySelectorAll('#throughput-chart .legend li')] \
           .find(l => l.textContent.startsWith('vol0 write: ')); \
         return !!li && !li.textContent.endsWith(': 0 B/s') && \
           document.querySelectorAll('#throughput-chart path[data-series=\"vol0 write\"]').length === 1;",
        PAGE_TIMEOUT,
    )
    .await;
    // Two more samples so the line has a rise in it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.scroll_top().await;
    let shot = b.screenshot("vol0-healthy-under-load").await;
    assert_badge_colour(&b, &shot, "vol0", shot::GOOD).await;
    let chart = b.rect("#throughput-chart svg").await;
    let (any, above) = shot.line_pixels(chart, &shot::SERIES, 30.0);
    assert!(
        any > 40 && above > 20,
        "{}: throughput chart at {chart:?} has {any} line pixels, {above} above its floor",
        shot.path.display()
    );
    let latency = b.text("#latency-chart .legend").await;
    assert!(latency.contains("vol0: "), "latency legend: {latency:?}");
    let written = load.stop().await;
    assert!(written > 0, "the host wrote nothing");

    // Create a volume through the form: a compressed log-layout volume.
    b.type_into("#create-form input[name=name]", "web1").await;
    b.type_into("#create-form input[name=size]", "32M").await;
    b.client
        .execute(
            "document.querySelector('#create-form select[name=layout]').value = 'log:zstd:3'; \
             return true;",
            vec![],
        )
        .await
        .expect("pick the layout");
    b.click("#create-form button[type=submit]").await;
    wait_volume_state(&b, "web1", "healthy").await;
    let level = b.text("tr[data-volume=\"web1\"] td.level").await;
    assert!(
        level.starts_with("raid5 · log zstd:3"),
        "level cell: {level:?}"
    );
    let notice = b.text("#notice").await;
    assert!(notice.contains("volume web1 created"), "{notice}");
    let listed = run_cli(
        Path::new(ferrobay_bin()),
        &[
            "volume",
            "list",
            "--json",
            "--api",
            &api,
            "--api-token-file",
            &token_file,
        ],
    )
    .expect("volume list");
    let listed: Value = serde_json::from_str(&listed).expect("JSON");
    let web1 = listed
        .as_array()
        .and_then(|a| a.iter().find(|v| v["record"]["name"] == "web1"))
        .unwrap_or_else(|| panic!("web1 not in volume list: {listed:#}"));
    assert_eq!(web1["record"]["level"], "raid5");
    assert_eq!(web1["record"]["size_bytes"], 32 << 20);
    assert_eq!(
        web1["record"]["log"]["compression"],
        serde_json::json!({"codec": "zstd", "level": 3}),
        "{web1:#}"
    );
    b.assert_no_console_errors("after creating web1").await;
    b.scroll_top().await;
    let shot = b.screenshot("web1-created").await;
    assert_badge_colour(&b, &shot, "web1", shot::GOOD).await;

    // Replace member 0 of web1 (on n1) through the dialog. Onto n2 is refused: n2
    // holds member 1 already (one failure domain per member).
    let before = member_url(&api, &token_file, "web1", 0);
    const N1_ALLOCATED: &str =
        "return document.querySelector('tr[data-drive=\"n1/d0\"] td:nth-child(5)').textContent;";
    let allocated = b
        .client
        .execute(N1_ALLOCATED, vec![])
        .await
        .expect("n1 allocated");
    b.click("tr[data-volume=\"web1\"] button.replace").await;
    b.client
        .execute(
            "const f = document.querySelector('#replace-dialog form'); \
             f.elements.slot.value = '0'; f.elements.storage_node.value = 'n2'; return true;",
            vec![],
        )
        .await
        .expect("pick slot and node");
    b.click("#replace-dialog button[type=submit]").await;
    let error = b
        .wait_js(
            "the replace error",
            "return document.querySelector('#replace-dialog .error').textContent;",
            PAGE_TIMEOUT,
        )
        .await;
    assert!(
        error
            .as_str()
            .is_some_and(|e| e.contains("n2 holds member 1")),
        "{error}"
    );
    b.screenshot("replace-refused").await;
    let _ = b.console().await; // the refused call's network error
    b.client
        .execute(
            "document.querySelector('#replace-dialog form').elements.storage_node.value = 'n1'; return true;",
            vec![],
        )
        .await
        .expect("pick n1");
    b.click("#replace-dialog button[type=submit]").await;
    b.wait_js(
        "member_replaced, then rebuild_done in the event log",
        "const ids = (k) => [...document.querySelectorAll(`#events li[data-kind=\"${k}\"]`)].map(l => Number(l.dataset.id)); \
         const r = ids('member_replaced'); \
         return r.length === 1 && ids('rebuild_done').some(d => d > r[0]);",
        PAGE_TIMEOUT,
    )
    .await;
    wait_volume_state(&b, "web1", "healthy").await;
    let after = member_url(&api, &token_file, "web1", 0);
    assert_ne!(before, after, "member 0 of web1 was not replaced");
    assert!(after.contains(":n1:"), "the new member is on n1: {after}");
    // The old member's namespace is deleted: n1 holds as much as before.
    b.wait_js(
        "n1's allocation back to its size before the replacement",
        &format!("const a = (() => {{ {N1_ALLOCATED} }})(); return a === {allocated};"),
        PAGE_TIMEOUT,
    )
    .await;
    b.assert_no_console_errors("after replacing a member").await;
    b.scroll_top().await;
    b.screenshot("web1-member-replaced").await;

    // A refused create: the server's own message, next to the form; nothing added.
    b.type_into("#create-form input[name=name]", "web1").await;
    b.click("#create-form button[type=submit]").await;
    let error = b
        .wait_js(
            "the create error",
            "return document.querySelector('#create-form .error').textContent;",
            PAGE_TIMEOUT,
        )
        .await;
    let error = error.as_str().unwrap_or_default().to_string();
    assert!(
        error.contains("web1") && error.contains("exists"),
        "create error shown: {error:?}"
    );
    let rows = b
        .client
        .execute(
            "return document.querySelectorAll('tr[data-volume=\"web1\"]').length;",
            vec![],
        )
        .await
        .expect("count rows");
    assert_eq!(rows, 1);
    b.screenshot("create-refused").await;
    // A bad size never reaches the server.
    b.type_into("#create-form input[name=name]", "web2").await;
    b.type_into("#create-form input[name=size]", "12MB").await;
    b.click("#create-form button[type=submit]").await;
    let error = b
        .wait_js(
            "the size error",
            "const t = document.querySelector('#create-form .error').textContent; \
             return t.includes('12MB') ? t : '';",
            PAGE_TIMEOUT,
        )
        .await;
    assert!(
        error.as_str().is_some_and(|e| e.contains("ambiguous unit")),
        "{error}"
    );
    // Moving needs another processor node: the dialog says so.
    b.click("tr[data-volume=\"vol0\"] button.move").await;
    let error = b.text("#move-dialog .error").await;
    assert!(error.contains("no other processor node"), "{error:?}");
    b.screenshot("move-needs-another-processor").await;
    b.click("#move-dialog button.cancel").await;

    // The page's modules on states this cluster did not pass through (a rebuild, a
    // resync, a stale owner, Prometheus escapes), run in the page itself.
    let checks = b
        .client
        .execute_async(MODULE_CHECKS, vec![])
        .await
        .expect("module checks");
    assert_eq!(checks, serde_json::json!("ok"), "module checks");

    b.close().await;
    let status = tokio::task::block_in_place(|| up.interrupt());
    assert!(status.success(), "ferrobay up: {status}\n{}", up.log());
}

/// Imports the dashboard's modules and checks what they make of given data; calls back
/// with "ok" or the first failure.
const MODULE_CHECKS: &str = r#"
const done = arguments[arguments.length - 1];
(async () => {
  const views = await import('/ui/views.js');
  const fmt = await import('/ui/format.js');
  const metrics = await import('/ui/metrics.js');
  const now = Date.now();
  const member = (index, state) => ({ index, state, uuid: '', device: null, failure_domain: `n${index + 1}`,
    rebuild_offset_bytes: 0, valid_bytes: 0 });
  const view = (name, state, extra = {}) => ({
    record: { name, level: 'raid5', size_bytes: 1 << 30, members: [0, 1, 2].map((i) => ({ url: `u${i}`, storage_node: `n${i + 1}`, failure_domain: `n${i + 1}` })) },
    owner: { node: 'p1', epoch: 2 },
    status: { owner: 'p1', epoch: 2, updated_unix_ms: now, status: { state, members: [member(0, 'active'), member(1, state === 'rebuilding' ? 'rebuilding' : 'active'), member(2, 'active')], read_bytes: 0, write_bytes: 0, ...extra } },
  });
  const rebuilding = view('r', 'rebuilding', { rebuild: { member: 1, partial: false, bytes_done: 40, bytes_total: 100, rate_bytes_per_sec: 1, eta_secs: 60, phase: 'running' } });
  const resyncing = view('s', 'healthy', { resync: { regions: 4, regions_pending: 2, bytes_total: 200, bytes_done: 50, phase: 'running' } });
  const stale = view('t', 'healthy');
  stale.status.updated_unix_ms = now - 60000;
  const unowned = view('u', 'healthy');
  unowned.owner = null;
  const tbody = document.createElement('tbody');
  const noop = { move() {}, replace() {} };
  views.renderVolumes(tbody, [rebuilding, resyncing, stale, unowned], new Map(), noop, now);
  const row = (n) => tbody.querySelector(`tr[data-volume="${n}"]`);
  const want = [
    [row('r').dataset.state, 'rebuilding'],
    [row('r').querySelector('.progress-cell').textContent, 'rebuild member 1 40 % (ETA 60 s)'],
    [row('r').querySelector('.fill').style.width, '40%'],
    [row('r').querySelector('.chip[data-slot="1"]').dataset.state, 'rebuilding'],
    [row('s').dataset.state, 'resyncing'],
    [row('s').querySelector('.progress-cell').textContent, 'resync 25 %'],
    [row('t').dataset.state, 'stale'],
    [row('u').dataset.state, 'offline'],
    [row('u').querySelector('td.owner').textContent, '—'],
    [fmt.bytes(1536 * 1024), '1.5 MiB'],
    [fmt.parseSize('64G'), 64 * 2 ** 30],
    [views.grade({}).grade, 'n/a'],
    [JSON.stringify(views.driveRows([{ node: 'n1', drives: [{ name: 'd0', status: 'ok' }] }, { node: 'n2', drives: [], error: 'timed out' }])),
      JSON.stringify([{ name: 'd0', status: 'ok', node: 'n1' }, { node: 'n2', name: '', status: 'unreachable: timed out', error: 'timed out' }])],
    [views.grade({ prediction: { grade: 'suspect', reason: 'latency' } }).grade, 'suspect'],
  ];
  let err = '';
  try { fmt.parseSize('12MB'); } catch (e) { err = e.message; }
  want.push([err, 'size "12MB": ambiguous unit "MB" (sizes are binary: use M or MiB)']);
  const samples = metrics.parse('# HELP x y\nx_total{a="q\\"uote",b="n"} 42\nbad line\ny 1.5e3\n');
  want.push([JSON.stringify(samples), JSON.stringify([{ name: 'x_total', labels: { a: 'q"uote', b: 'n' }, value: 42 }, { name: 'y', labels: {}, value: 1500 }])]);
  const bad = want.find(([got, exp]) => got !== exp);
  done(bad ? `got ${JSON.stringify(bad[0])}, want ${JSON.stringify(bad[1])}` : 'ok');
})().catch((e) => done(`error: ${e.message}`));
"#;

/// A daemon of the process cluster, waited for through its endpoints file.
fn daemon(name: &str, dir: &Path, args: &[String], endpoints: &Path) -> (Daemon, Value) {
    let mut d = Daemon::spawn(Path::new(ferrobay_bin()), name, dir, args, "info", |_| {})
        .expect("spawn ferrobay");
    let e = d
        .wait_json(endpoints, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e}:\n{}", d.log()));
    (d, e)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_on_processor_nodes_moves_and_shows_failures() {
    if skip() {
        return;
    }
    if let Err(why) = meta::testing::EtcdServer::find_binary() {
        testkit::prereq::missing(why);
        return;
    }
    let dir = scratch_dir("dashboard-cluster");
    let etcd = meta::testing::EtcdServer::start().await.expect("etcd");
    let meta_url = etcd.endpoint().replacen("http://", "etcd://", 1);
    let mut nodes = Vec::new();
    for name in ["n1", "n2", "n3"] {
        let d = dir.path().join(name);
        let drive = format!("d0=file:{}:128M", d.join("d0.img").display());
        let args = node_run_args(name, &meta_url, Some(LEASE_TTL_MS), &drive, &d);
        nodes.push(tokio::task::block_in_place(|| {
            daemon(name, &d, &args, &d.join("endpoints.json")).0
        }));
    }
    let mut procs = Vec::new();
    let mut nvme = Vec::new();
    let mut apis = Vec::new();
    for name in ["p1", "p2"] {
        let d = dir.path().join(name);
        let ep = d.join("endpoints.json");
        let args = processor_run_args(name, &meta_url, LEASE_TTL_MS, &ep);
        let (p, e) = tokio::task::block_in_place(|| daemon(name, &d, &args, &ep));
        nvme.push(e["nvme"][0].as_str().expect("nvme").to_string());
        apis.push(e["api"].as_str().expect("api").to_string());
        procs.push(p);
    }
    let bin = Path::new(ferrobay_bin());
    tokio::task::block_in_place(|| {
        run_cli(
            bin,
            &[
                "volume",
                "create",
                "vol1",
                "--level",
                "raid5",
                "--size",
                "32M",
                "--storage-nodes",
                "n1,n2,n3",
                "--preferred-owner",
                "p1",
                "--meta",
                &meta_url,
            ],
        )
        .expect("create vol1");
        common::cluster::wait_owner(bin, &meta_url, "vol1", "p1", None, PAGE_TIMEOUT)
            .expect("p1 owns vol1");
    });

    let mut b = Browser::start(browser::shots_dir("processor-nodes")).await;
    // The API port's root leads to the dashboard.
    b.client
        .goto(&format!("http://{}/", apis[0]))
        .await
        .expect("open the dashboard");
    b.wait_js(
        "the redirect to /ui/",
        "return location.pathname === '/ui/';",
        PAGE_TIMEOUT,
    )
    .await;
    // No token yet: the page asks for it; a wrong one is refused with the API's word.
    b.wait_js(
        "the token dialog",
        "return document.getElementById('token-dialog').open;",
        PAGE_TIMEOUT,
    )
    .await;
    b.type_into("#token-dialog input[name=token]", "not-the-cluster-token")
        .await;
    b.click("#token-dialog button[type=submit]").await;
    let refused = b
        .wait_js(
            "the wrong token refused",
            "const d = document.getElementById('token-dialog'); \
             const t = d.querySelector('.error').textContent; \
             return d.open && t.includes('wrong') ? t : '';",
            PAGE_TIMEOUT,
        )
        .await;
    assert!(
        refused
            .as_str()
            .is_some_and(|t| t.contains("wrong bearer token")),
        "{refused}"
    );
    b.screenshot("token-asked").await;
    // Storage nodes of the cluster keep its token in their data dir.
    let token =
        std::fs::read_to_string(dir.path().join("n1").join("api-token")).expect("cluster token");
    b.type_into("#token-dialog input[name=token]", token.trim())
        .await;
    b.click("#token-dialog button[type=submit]").await;
    wait_volume_state(&b, "vol1", "healthy").await;
    // Before the token: 401 answers, and nothing else.
    for e in b.console().await {
        assert!(
            e.message.contains("401"),
            "console before the token: {} {}",
            e.source,
            e.message
        );
    }
    assert_eq!(
        b.text("tr[data-volume=\"vol1\"] td.owner").await,
        "p1 (epoch 1)"
    );
    b.wait_js(
        "both processor nodes",
        "return document.querySelectorAll('#nodes tr[data-role=\"processor\"] .badge.good').length === 2;",
        PAGE_TIMEOUT,
    )
    .await;
    b.assert_no_console_errors("after the token").await;

    // Move vol1 to p2 through the dialog.
    b.click("tr[data-volume=\"vol1\"] button.move").await;
    let choices = b
        .client
        .execute(
            "return [...document.querySelectorAll('#move-dialog select[name=to] option')].map(o => o.value);",
            vec![],
        )
        .await
        .expect("options");
    assert_eq!(choices, serde_json::json!(["p2"]));
    b.click("#move-dialog button[type=submit]").await;
    b.wait_js(
        "vol1 owned by p2",
        "const r = document.querySelector('tr[data-volume=\"vol1\"]'); \
         return !!r && r.querySelector('td.owner').textContent.startsWith('p2 ') && r.dataset.state === 'healthy';",
        PAGE_TIMEOUT,
    )
    .await;
    b.wait_js(
        "the handoff in the event log",
        "return !!document.querySelector('#events li[data-kind=\"handoff\"]');",
        PAGE_TIMEOUT,
    )
    .await;
    b.assert_no_console_errors("after the move").await;
    b.scroll_top().await;
    let shot = b.screenshot("vol1-moved-to-p2").await;
    assert_badge_colour(&b, &shot, "vol1", shot::GOOD).await;

    // A storage node dies under load: degraded, the node down, the event logged.
    let url = format!(
        "nvme+tcp://{},{}/nqn.2026-01.io.ferrobay:vol:vol1/1",
        nvme[0], nvme[1]
    );
    let load = Load::start(&url).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    nodes[2].kill9();
    wait_volume_state(&b, "vol1", "degraded").await;
    b.wait_js(
        "member_failed in the event log",
        "return !!document.querySelector('#events li[data-kind=\"member_failed\"]');",
        PAGE_TIMEOUT,
    )
    .await;
    b.wait_js(
        "n3 down",
        "const r = document.querySelector('#nodes tr[data-node=\"n3\"]'); return !!r && r.querySelector('.state').textContent === 'down';",
        PAGE_TIMEOUT,
    )
    .await;
    let member = b
        .text("tr[data-volume=\"vol1\"] .chip[data-state=\"failed\"]")
        .await;
    assert!(member.contains("n3"), "failed member chip: {member:?}");
    b.scroll_top().await;
    let shot = b.screenshot("vol1-degraded").await;
    assert_badge_colour(&b, &shot, "vol1", shot::WARN).await;
    load.stop().await;
    b.close().await;
    for p in procs.iter_mut().chain(nodes.iter_mut()) {
        p.kill9();
    }
}
