//! `ferrobay volume` as a user drives it: create a RAID-5 over files, write with
//! verification through `ferrobay bench`, fail a member, verify degraded, rebuild onto the
//! spare, scrub, and verify again.

mod common;

use std::process::Command;

use common::{ferrobay_bin, scratch_dir};

fn ferrobay(reg: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(ferrobay_bin())
        .args(args)
        .env("FERROBAY_VOLUMES_DIR", reg)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn raid5_lifecycle_keeps_data() {
    let dir = scratch_dir("volume-cli");
    let reg = dir.path().join("registry");
    let f = |n: &str| format!("file:{}:64M", dir.path().join(n).display());
    let members = [f("m0.img"), f("m1.img"), f("m2.img")].join(",");
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "v",
            "--level",
            "raid5",
            "--members",
            &members,
            "--spare",
            &f("s.img"),
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("Stopped") || out.contains("Healthy"), "{out}");

    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--target",
            "volume:v",
            "--bs",
            "16k",
            "--iodepth",
            "8",
            "--verify",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, out) = ferrobay(&reg, &args);
        assert!(ok, "bench {extra:?} failed:\n{out}");
        out
    };
    // One full pass of stamped writes, then a verify-only pass over everything.
    bench(&["--rw", "write"]);
    let v = bench(&["--rw", "read", "--verify-only"]);
    assert!(
        v.contains("\"lost\": 0") && v.contains("\"sectors_unwritten\": 0"),
        "{v}"
    );

    let (ok, out) = ferrobay(&reg, &["volume", "fail-member", "v", "1"]);
    assert!(ok, "{out}");
    // Degraded (the spare takes the slot): every block still reads back as written.
    let v = bench(&["--rw", "read", "--verify-only"]);
    assert!(
        v.contains("\"corrupt\": 0") && v.contains("\"sectors_unwritten\": 0"),
        "{v}"
    );

    let (ok, out) = ferrobay(&reg, &["volume", "rebuild", "v", "--throttle", "unlimited"]);
    assert!(ok, "{out}");
    let (ok, out) = ferrobay(&reg, &["volume", "status", "v", "--json"]);
    assert!(ok && out.contains("\"state\": \"healthy\""), "{out}");
    let (ok, out) = ferrobay(&reg, &["volume", "scrub", "v", "--throttle", "unlimited"]);
    assert!(ok && out.contains(" 0 mismatches"), "{out}");
    let v = bench(&["--rw", "read", "--verify-only"]);
    assert!(
        v.contains("\"corrupt\": 0") && v.contains("\"sectors_unwritten\": 0"),
        "{v}"
    );

    // Bad input gets a one-line reason.
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "w",
            "--level",
            "raid7",
            "--members",
            &members,
        ],
    );
    assert!(
        !ok && out.lines().count() == 1 && out.contains("raid7"),
        "{out}"
    );
    let (ok, out) = ferrobay(&reg, &["volume", "status", "nope"]);
    assert!(!ok && out.contains("no volume named"), "{out}");
}

/// `ferrobay node` exports a local volume as a namespace: data written over NVMe/TCP
/// survives a node restart, and the volume's parity agrees afterwards.
#[test]
fn node_exports_a_volume() {
    let dir = scratch_dir("volume-node");
    let reg = dir.path().join("registry");
    let f = |n: &str| format!("file:{}:48M", dir.path().join(n).display());
    let members = [f("a.img"), f("b.img"), f("c.img"), f("d.img")].join(",");
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "vx",
            "--level",
            "raid6",
            "--members",
            &members,
        ],
    );
    assert!(ok, "{out}");

    let data = dir.path().join("node");
    let env = [("FERROBAY_VOLUMES_DIR", reg.as_path())];
    let mut node =
        common::NodeProcess::start_env("vn", &data, &["volume:vx".to_string()], (0, 0, 0), &env);
    let url = format!(
        "nvme+tcp://127.0.0.1:{}/nqn.2026-01.io.ferrobay:vn:d0",
        node.endpoints.nvme_port()
    );
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--target",
            url.as_str(),
            "--bs",
            "8k",
            "--iodepth",
            "16",
            "--size",
            "16M",
            "--verify",
            "--json",
        ];
        args.extend_from_slice(extra);
        ferrobay(&reg, &args)
    };
    let (ok, out) = bench(&["--rw", "write"]);
    assert!(ok, "{out}\n{}", node.log());
    let (ok, out) = bench(&["--rw", "read", "--verify-only"]);
    assert!(ok && out.contains("\"sectors_unwritten\": 0"), "{out}");
    assert!(node.stop().success(), "{}", node.log());

    let mut node = common::NodeProcess::start_env("vn", &data, &[], (0, 0, 0), &env);
    let url2 = format!(
        "nvme+tcp://127.0.0.1:{}/nqn.2026-01.io.ferrobay:vn:d0",
        node.endpoints.nvme_port()
    );
    let (ok, out) = ferrobay(
        &reg,
        &[
            "bench",
            "--target",
            &url2,
            "--bs",
            "8k",
            "--size",
            "16M",
            "--rw",
            "read",
            "--verify-only",
            "--json",
        ],
    );
    assert!(
        ok && out.contains("\"sectors_unwritten\": 0") && out.contains("\"corrupt\": 0"),
        "{out}"
    );
    assert!(node.stop().success(), "{}", node.log());

    let (ok, out) = ferrobay(&reg, &["volume", "scrub", "vx", "--throttle", "unlimited"]);
    assert!(ok && out.contains(" 0 mismatches"), "{out}");
}
