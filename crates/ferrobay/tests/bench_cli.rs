//! `ferrobay bench` as a user runs it (issue 9, points 4 and 6):
//! - a multipath URL whose first path is down opens, picks that path up when it comes
//!   back, and survives the second path dying with no I/O error; with every path down,
//!   one line names each path and its cause;
//! - a write run with `--verify` reads back and checks what it wrote; `--verify-only`
//!   takes any block size and still finds corruption and torn writes.
//!
//! Paths are TCP forwarders in this process (`testkit::proxy`: cut = every
//! connection drops and the port refuses) in front of a `ferrobay node run` process
//! with a RAM drive.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    NodeProcess, ferrobay_bin, ferrobay_output as ferrobay, output_text as text, scratch_dir,
};
use serde_json::Value;
use testkit::proxy::Proxy;

const NQN: &str = "nqn.2026-01.io.ferrobay:n1:d0";

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {path} in {v:#}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Waits until `f` holds; fails with `what` and the bench's output if it exits first.
fn wait_for(bench: &mut std::process::Child, what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        if let Ok(Some(_)) = bench.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = bench.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            panic!("bench exited before {what}:\n{err}");
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn node(dir: &Path) -> (NodeProcess, SocketAddr) {
    let node = NodeProcess::start("n1", dir, &["ram:64M".to_string()], (0, 0, 0));
    let addr = node.endpoints.nvme_tcp[0].parse().expect("node address");
    (node, addr)
}

/// Issue 9.4: `--target nvme+tcp://A,B/NQN` with A down at the start: the bench runs on
/// B, A joins when it comes back, B dies, and the run ends with no error and every block
/// it wrote read back intact.
#[test]
fn a_multipath_target_opens_with_its_first_path_down_and_survives_the_second_dying() {
    let dir = scratch_dir("bench-mp");
    let (mut node, upstream) = node(&dir.path().join("node"));
    let rt = runtime();
    let (a, b) =
        rt.block_on(async { (Proxy::start(upstream).await, Proxy::start(upstream).await) });
    a.cut();
    let url = format!(
        "nvme+tcp://{},{}/{NQN}/1?reconnect_delay=1&queues=2",
        a.addr, b.addr
    );
    let mut bench = Command::new(ferrobay_bin())
        .args(["bench", "--target", &url, "--rw", "randrw", "--mix", "50"])
        .args(["--bs", "4k", "--iodepth", "8", "--range", "16M"])
        .args(["--runtime", "8s", "--verify", "--json"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferrobay bench");
    let connections = |p: &Proxy| p.connections.load(std::sync::atomic::Ordering::Relaxed);
    wait_for(&mut bench, "the bench connects through B", || {
        connections(&b) > 0
    });
    rt.block_on(a.restore());
    wait_for(&mut bench, "A joins", || connections(&a) > 0);
    // A is first in the URL: I/O moves to it. Then B dies.
    std::thread::sleep(Duration::from_millis(1000));
    b.cut();
    let out = bench.wait_with_output().expect("bench output");
    assert!(out.status.success(), "{}\n{}", text(&out), node.log());
    let r = json(&out);
    assert_eq!(u(&r, "/errors"), 0, "{r:#}");
    assert!(
        u(&r, "/write_ios") > 1000 && u(&r, "/read_ios") > 1000,
        "{r:#}"
    );
    assert!(u(&r, "/verify/blocks_read_back") > 0, "{r:#}");
    for kind in ["lost", "misdirected", "torn", "corrupt", "blocks_failed"] {
        assert_eq!(u(&r, &format!("/verify/{kind}")), 0, "{kind}: {r:#}");
    }
    drop((a, b));
    assert!(node.stop().success(), "{}", node.log());
}

/// Every path down: one line that names each path once, with its cause.
#[test]
fn a_multipath_target_with_every_path_down_names_each_one() {
    let refused = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let (a, b) = (refused(), refused());
    let url = format!("nvme+tcp://{a},{b}/{NQN}/1");
    let out = ferrobay(&["bench", "--target", &url, "--runtime", "1s"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.trim_end();
    assert_eq!(line.lines().count(), 1, "{err}");
    let causes = line
        .split_once(&format!("no path to namespace 1 of {NQN} connects: "))
        .unwrap_or_else(|| panic!("{err}"))
        .1;
    for addr in [a, b] {
        assert_eq!(causes.matches(&addr.to_string()).count(), 1, "{err}");
    }
    assert_eq!(causes.matches("refused").count(), 2, "{err}");
}

fn bench_file(image: &str, extra: &[&str]) -> Output {
    let mut args = vec!["bench", "--target", image, "--iodepth", "8"];
    args.extend_from_slice(extra);
    ferrobay(&args)
}

/// Issue 9.6: a write run with --verify checks what it wrote (fio's verify phase), and
/// --verify-only with other block sizes finds good blocks good.
#[test]
fn a_verify_write_run_reads_back_and_verify_only_takes_any_block_size() {
    let dir = scratch_dir("bench-verify");
    let image = format!("file:{}:16M", dir.path().join("x.img").display());
    let out = bench_file(
        &image,
        &["--rw", "write", "--bs", "8k", "--verify", "--json"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let r = json(&out);
    assert_eq!(u(&r, "/write_ios"), 2048, "{r:#}");
    for (field, want) in [
        // The defect: "0 sectors checked".
        ("sectors_checked", 32768),
        ("blocks_checked", 2048),
        ("blocks_written", 2048),
        ("sectors_written", 32768),
        ("blocks_read_back", 2048),
        ("blocks_failed", 0),
        ("torn", 0),
        ("lost", 0),
    ] {
        assert_eq!(u(&r, &format!("/verify/{field}")), want, "{field}: {r:#}");
    }

    for bs in ["4k", "12k", "64k", "1M"] {
        let out = bench_file(
            &image,
            &["--rw", "read", "--bs", bs, "--verify-only", "--json"],
        );
        assert!(out.status.success(), "--bs {bs}: {}", text(&out));
        let r = json(&out);
        let checked = u(&r, "/verify/sectors_checked");
        let bs_sectors = blockdev::parse_size_bytes(bs).expect("size") / 512;
        assert_eq!(checked, 32768 / bs_sectors * bs_sectors, "--bs {bs}: {r:#}");
        for kind in [
            "torn",
            "lost",
            "corrupt",
            "misdirected",
            "sectors_unwritten",
        ] {
            assert_eq!(
                u(&r, &format!("/verify/{kind}")),
                0,
                "--bs {bs} {kind}: {r:#}"
            );
        }
    }

    // The text report says what was written, checked and failed, by kind.
    let out = bench_file(&image, &["--rw", "write", "--bs", "8k", "--verify"]);
    assert!(out.status.success(), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    for line in [
        "      written : 2048 blocks (32768 sectors)",
        "      checked : 2048 blocks (32768 sectors), 2048 read back after the load in ",
        "       failed : 0 blocks",
        "         torn : 0 writes",
        "      corrupt : 0 sectors",
    ] {
        assert!(t.contains(line), "{line:?} missing:\n{t}");
    }
}

/// --verify-only at another block size still finds a corrupt sector and a torn write,
/// and exits non-zero.
#[test]
fn verify_only_at_another_block_size_finds_corruption_and_tears() {
    use std::os::unix::fs::FileExt;
    let dir = scratch_dir("bench-tear");
    let path = dir.path().join("x.img");
    let image = format!("file:{}:4M", path.display());
    let out = bench_file(&image, &["--rw", "write", "--bs", "8k", "--verify"]);
    assert!(out.status.success(), "{}", text(&out));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("image");
    // The write at 1 MiB is torn: its second half holds another write of that extent.
    let mut other = vec![0u8; 8192];
    bench::stamp_block(&mut other, 1 << 20, 1, 0xdead);
    f.write_all_at(&other[4096..], (1 << 20) + 4096)
        .expect("tear");
    // One byte flipped at 3 MiB + 100.
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, (3 << 20) + 100).expect("read");
    byte[0] ^= 0x40;
    f.write_all_at(&byte, (3 << 20) + 100).expect("corrupt");
    f.sync_all().expect("sync");
    drop(f);

    for bs in ["4k", "8k", "64k"] {
        let out = bench_file(
            &image,
            &["--rw", "read", "--bs", bs, "--verify-only", "--json"],
        );
        assert!(!out.status.success(), "--bs {bs}: {}", text(&out));
        let r = json(&out);
        assert_eq!(u(&r, "/verify/torn"), 1, "--bs {bs}: {r:#}");
        assert_eq!(u(&r, "/verify/corrupt"), 1, "--bs {bs}: {r:#}");
        assert_eq!(u(&r, "/verify/blocks_failed"), 2, "--bs {bs}: {r:#}");
        assert_eq!(u(&r, "/verify/lost"), 0, "--bs {bs}: {r:#}");
    }
}

fn node_cli(data: &Path, args: &[&str]) -> String {
    let out = Command::new(ferrobay_bin())
        .arg("node")
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .output()
        .expect("run ferrobay node");
    assert!(
        out.status.success(),
        "ferrobay node {args:?}: {}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ferrobay bench --kv` against a KV namespace of a real node: a store run with
/// --verify reads back every key, a retrieve run then checks every value and a mixed run
/// keeps them right; the report has the block mode's figures; an NVM namespace and
/// block-only flags are refused with a message that says why.
#[test]
fn kv_mode_stores_retrieves_and_verifies_every_value() {
    let dir = scratch_dir("bench-kv");
    let data = dir.path().join("node");
    let (mut node, addr) = node(&data);
    node_cli(&data, &["ns", "delete", NQN, "1"]);
    node_cli(&data, &["ns", "create", "--drive", "d0", "--size", "8M"]);
    node_cli(
        &data,
        &["ns", "create", "--drive", "d0", "--size", "52M", "--kv"],
    );
    let url = format!("nvme+tcp://{addr}/{NQN}/2");
    let kv = |extra: &[&str]| {
        let mut args = vec!["bench", "--target", url.as_str(), "--kv"];
        args.extend_from_slice(extra);
        ferrobay(&args)
    };
    let common = [
        "--value-size",
        "4k",
        "--keys",
        "2000",
        "--iodepth",
        "16",
        "--jobs",
        "2",
    ];

    let out = kv(&[&common[..], &["--rw", "store", "--verify", "--json"]].concat());
    assert!(out.status.success(), "{}\n{}", text(&out), node.log());
    let r = json(&out);
    assert_eq!(r["pattern"], "store", "{r:#}");
    assert_eq!((u(&r, "/write_ios"), u(&r, "/errors")), (2000, 0), "{r:#}");
    assert_eq!(u(&r, "/write_bytes"), 2000 * 4096, "{r:#}");
    assert!(r["iops"].as_f64().unwrap_or(0.0) > 0.0, "{r:#}");
    assert!(
        r["write_latency"]["p99_us"].as_f64().unwrap_or(0.0) > 0.0,
        "{r:#}"
    );
    assert!(
        r["cpu_s_per_million_ios"].as_f64().unwrap_or(0.0) > 0.0,
        "{r:#}"
    );
    for (field, want) in [
        ("keys", 2000),
        ("value_size_bytes", 4096),
        ("verify/values_stored", 2000),
        ("verify/values_read_back", 2000),
        ("verify/values_checked", 2000),
        ("verify/values_failed", 0),
        ("verify/lost", 0),
        ("verify/corrupt", 0),
    ] {
        assert_eq!(u(&r, &format!("/kv/{field}")), want, "{field}: {r:#}");
    }

    let out = kv(&[&common[..], &["--rw", "retrieve", "--verify", "--json"]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let r = json(&out);
    assert_eq!(
        (u(&r, "/read_ios"), u(&r, "/read_bytes")),
        (2000, 2000 * 4096),
        "{r:#}"
    );
    assert_eq!(u(&r, "/kv/verify/values_checked"), 2000, "{r:#}");
    assert_eq!(u(&r, "/kv/verify/values_failed"), 0, "{r:#}");

    // Text report, a mixed run bounded by time.
    let out = kv(&[
        &common[..],
        &[
            "--rw",
            "mixed",
            "--mix",
            "50",
            "--runtime",
            "1s",
            "--verify",
        ],
    ]
    .concat());
    assert!(out.status.success(), "{}", text(&out));
    let t = String::from_utf8_lossy(&out.stdout);
    for want in [
        "kv mixed value=4096 keys=2000",
        "retrieve lat (us)",
        "store lat (us)",
        "lost : 0 values",
    ] {
        assert!(t.contains(want), "{want:?} missing:\n{t}");
    }

    // Refusals: an NVM namespace, a value above the namespace's largest, block flags.
    let nvm = format!("nvme+tcp://{addr}/{NQN}/1");
    let out = ferrobay(&["bench", "--target", &nvm, "--kv", "--keys", "10"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("not a Key Value namespace"),
        "{}",
        text(&out)
    );
    let out = kv(&["--value-size", "4M", "--keys", "10"]);
    assert!(
        text(&out).contains("--value-size 4194304 is outside 1..=2097152"),
        "{}",
        text(&out)
    );
    let out = kv(&["--verify-only"]);
    assert!(
        text(&out)
            .contains("--verify-only (use --rw retrieve --verify) is not available with --kv"),
        "{}",
        text(&out)
    );
    let out = ferrobay(&["bench", "--target", "ram:1M", "--kv"]);
    assert!(
        text(&out).contains("--kv needs an nvme+tcp://"),
        "{}",
        text(&out)
    );
    assert!(node.stop().success(), "{}", node.log());
}
