//! `ferrobay volume` as a user drives it: create a RAID-5 over files, write with
//! verification through `ferrobay bench`, fail a member, verify degraded, rebuild onto the
//! spare, scrub, and verify again; member files deleted (degraded within the tolerance, a
//! clear refusal beyond it); an operator's fail that sticks until re-add; `status` that
//! changes nothing; one line per error on stderr.

mod common;

use std::path::Path;
use std::process::Command;

use common::{ferrobay_bin, scratch_dir};

/// What one run printed.
struct Run {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run(reg: &Path, args: &[&str]) -> Run {
    let out = Command::new(ferrobay_bin())
        .args(args)
        .env("FERROBAY_VOLUMES_DIR", reg)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run ferrobay");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ferrobay(reg: &Path, args: &[&str]) -> (bool, String) {
    let r = run(reg, args);
    (r.ok, format!("{}{}", r.stdout, r.stderr))
}

/// `file:DIR/NAME:SIZE`.
fn file_spec(dir: &Path, name: &str, size: &str) -> String {
    format!("file:{}:{size}", dir.join(name).display())
}

/// A full pass of stamped writes over volume `name`.
fn write_all(reg: &Path, name: &str) {
    let target = format!("volume:{name}");
    let (ok, out) = ferrobay(
        reg,
        &[
            "bench",
            "--target",
            &target,
            "--bs",
            "64k",
            "--iodepth",
            "8",
            "--rw",
            "write",
            "--verify",
            "--json",
        ],
    );
    assert!(ok, "write pass failed:\n{out}");
}

/// Reads every block back and checks it against the stamps of `write_all`.
fn verify_all(reg: &Path, name: &str) {
    let target = format!("volume:{name}");
    let (ok, out) = ferrobay(
        reg,
        &[
            "bench",
            "--target",
            &target,
            "--bs",
            "64k",
            "--iodepth",
            "8",
            "--rw",
            "read",
            "--verify-only",
            "--json",
        ],
    );
    assert!(
        ok && out.contains("\"corrupt\": 0")
            && out.contains("\"lost\": 0")
            && out.contains("\"sectors_unwritten\": 0"),
        "verify pass failed:\n{out}"
    );
}

/// The bytes of every file in `dir` (member images and the registry), to show that a
/// command wrote nothing.
fn snapshot(dirs: &[&Path]) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in dirs {
        for e in std::fs::read_dir(dir).expect("read dir") {
            let p = e.expect("dir entry").path();
            if p.is_file() {
                out.push((p.clone(), std::fs::read(&p).expect("read file")));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The value of a `Key : value` line of the detail view.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key} : ");
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} line in:\n{text}"))
}

/// The state column of member `i` in the detail view.
fn member_state(text: &str, i: usize) -> String {
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&i.to_string()))
        .unwrap_or_else(|| panic!("no member {i} row in:\n{text}"));
    let rest = row.trim_start()[i.to_string().len()..].trim_start();
    rest.split("  ").next().unwrap_or("").trim().to_string()
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
    assert_eq!(field(&out, "State"), "healthy, clean", "{out}");
    // A refused command leaves the volume as it found it: clean, not to be resynced.
    let (ok, out) = ferrobay(&reg, &["volume", "rebuild", "v"]);
    assert!(!ok && out.contains("nothing to rebuild"), "{out}");
    let (_, st) = ferrobay(&reg, &["volume", "status", "v"]);
    assert_eq!(field(&st, "State"), "healthy, clean", "{st}");

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
    let elsewhere = dir.path().join("other-registry");
    let (ok, out) = ferrobay(
        &elsewhere,
        &[
            "volume",
            "--volumes-dir",
            &reg.display().to_string(),
            "create",
            "vx",
            "--level",
            "raid6",
            "--members",
            &members,
        ],
    );
    assert!(ok, "{out}");

    // The node finds the volume in the registry `--volumes-dir` names (the environment
    // points elsewhere), as `ferrobay volume --volumes-dir` does.
    let data = dir.path().join("node");
    let env = [("FERROBAY_VOLUMES_DIR", elsewhere.as_path())];
    let reg_arg = reg.display().to_string();
    let flag = ["--volumes-dir", reg_arg.as_str()];
    let mut node = common::NodeProcess::start_with(
        "vn",
        &data,
        &["volume:vx".to_string()],
        (0, 0, 0),
        &flag,
        &env,
    );
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

    let mut node = common::NodeProcess::start_with("vn", &data, &[], (0, 0, 0), &flag, &env);
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

/// A RAID-5 on four files with one member file deleted runs degraded: `status` reports
/// the missing member and changes nothing, `assemble` and `bench` work and every byte
/// reads back; with a second file gone assembly refuses, saying which members are there
/// and which are not, on one line with each cause once.
#[test]
fn raid5_with_a_member_file_deleted_runs_degraded() {
    let dir = scratch_dir("volume-missing");
    let reg = dir.path().join("registry");
    let d = dir.path();
    let members: Vec<String> = (0..4)
        .map(|i| file_spec(d, &format!("m{i}.img"), "40M"))
        .collect();
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "v",
            "--level",
            "raid5",
            "--members",
            &members.join(","),
        ],
    );
    assert!(ok, "{out}");
    write_all(&reg, "v");
    std::fs::remove_file(d.join("m2.img")).unwrap();

    let before = snapshot(&[d, &reg]);
    let st = run(&reg, &["volume", "status", "v"]);
    assert!(st.ok, "{}{}", st.stdout, st.stderr);
    let text = &st.stdout;
    assert_eq!(member_state(text, 2), "missing", "{text}");
    assert_eq!(member_state(text, 1), "active", "{text}");
    assert_eq!(
        field(text, "State"),
        "degraded (1 of 4 members out of service)",
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{}: cannot open: no such file or device",
            members[2]
        )),
        "{text}"
    );
    // Human output: humanized sizes, no Rust Debug, every line complete.
    let size = field(text, "Size");
    assert!(
        size.ends_with(" bytes)") && size.contains("MiB ("),
        "{size}"
    );
    assert_eq!(
        field(text, "Level"),
        "raid5 (3+1), 4 members, stripe unit 64 KiB"
    );
    assert!(
        !text.contains("LayoutParams") && !text.contains("Raid5"),
        "{text}"
    );
    assert!(text.ends_with('\n'), "{text:?}");
    let json = run(&reg, &["volume", "status", "v", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let bytes = v["size_bytes"].as_u64().unwrap();
    assert!(size.ends_with(&format!("({bytes} bytes)")), "{size} / {v}");
    assert_eq!(v["members"][2]["missing"], true, "{v}");
    assert_eq!(
        snapshot(&[d, &reg]),
        before,
        "volume status wrote something"
    );

    let (ok, out) = ferrobay(&reg, &["volume", "assemble", "v"]);
    assert!(ok, "{out}");
    assert_eq!(member_state(&out, 2), "failed", "{out}");
    verify_all(&reg, "v");

    // A second member gone: more than raid5 survives.
    std::fs::remove_file(d.join("m3.img")).unwrap();
    for args in [
        &["volume", "assemble", "v"][..],
        &[
            "bench",
            "--target",
            "volume:v",
            "--rw",
            "read",
            "--verify-only",
        ][..],
    ] {
        let r = run(&reg, args);
        assert!(!r.ok, "{args:?} succeeded:\n{}", r.stdout);
        let err = r.stderr.trim_end();
        assert_eq!(err.lines().count(), 1, "{args:?}: not one line:\n{err}");
        let m = |i: usize| d.join(format!("m{i}.img")).display().to_string();
        assert!(
            err.starts_with(
                "ferrobay: cannot assemble volume v: 2 of 4 members are missing or out of \
                 date, raid5 survives 1 (present: "
            ) && err.contains(&format!("present: 0 {}, 1 {};", m(0), m(1)))
                && err.contains(&format!(
                    "3 {} (cannot open: no such file or device)",
                    members[3]
                ))
                && err.contains("bring the missing members back"),
            "{args:?}: {err}"
        );
        // Each cause once.
        assert_eq!(err.matches(&m(3)).count(), 1, "{err}");
        assert_eq!(err.matches("no such file").count(), 2, "{err}");
    }
}

/// An error from below the volume layer (an I/O error opening a device) is printed once,
/// not once per layer of the error chain.
#[test]
fn error_chains_print_each_cause_once() {
    let dir = scratch_dir("volume-errors");
    let reg = dir.path().join("registry");
    let gone = dir.path().join("nope.img");
    let members = format!(
        "file:{},{},{}",
        gone.display(),
        file_spec(dir.path(), "b.img", "40M"),
        file_spec(dir.path(), "c.img", "40M")
    );
    let r = run(
        &reg,
        &[
            "volume",
            "create",
            "w",
            "--level",
            "raid5",
            "--members",
            &members,
        ],
    );
    assert!(!r.ok);
    let err = r.stderr.trim_end();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("ferrobay: device file:{}: ", gone.display())),
        "{err}"
    );
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// RAID-6 with two member files deleted serves every byte; the two members are replaced
/// by new devices (named by the old spec and by index), rebuilt, and the volume verifies
/// and scrubs clean.
#[test]
fn raid6_with_two_member_files_deleted_rebuilds_onto_new_devices() {
    let dir = scratch_dir("volume-raid6");
    let reg = dir.path().join("registry");
    let d = dir.path();
    let members: Vec<String> = (0..5)
        .map(|i| file_spec(d, &format!("r{i}.img"), "40M"))
        .collect();
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "v6",
            "--level",
            "raid6",
            "--members",
            &members.join(","),
        ],
    );
    assert!(ok, "{out}");
    write_all(&reg, "v6");
    std::fs::remove_file(d.join("r1.img")).unwrap();
    std::fs::remove_file(d.join("r3.img")).unwrap();
    verify_all(&reg, "v6");

    let old1 = format!("file:{}", d.join("r1.img").display());
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "replace-member",
            "v6",
            &old1,
            &file_spec(d, "n1.img", "40M"),
            "--throttle",
            "unlimited",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("rebuild of member 1 finished"), "{out}");
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "replace-member",
            "v6",
            "3",
            &file_spec(d, "n3.img", "40M"),
            "--throttle",
            "unlimited",
        ],
    );
    assert!(ok, "{out}");
    let st = run(&reg, &["volume", "status", "v6"]).stdout;
    assert_eq!(field(&st, "State"), "healthy, clean", "{st}");
    for (i, f) in [(1, "n1.img"), (3, "n3.img")] {
        assert_eq!(member_state(&st, i), "active", "{st}");
        assert!(st.contains(&d.join(f).display().to_string()), "{st}");
    }
    verify_all(&reg, "v6");
    let (ok, out) = ferrobay(&reg, &["volume", "scrub", "v6", "--throttle", "unlimited"]);
    assert!(ok && out.contains(" 0 mismatches"), "{out}");
}

/// `fail-member` sticks: `status` (twice) changes nothing, `bench` does not bring the
/// member back; `re-add` does, with a rebuild, and the data verifies.
#[test]
fn fail_member_sticks_until_re_add() {
    let dir = scratch_dir("volume-fail");
    let reg = dir.path().join("registry");
    let d = dir.path();
    let members: Vec<String> = (0..4)
        .map(|i| file_spec(d, &format!("m{i}.img"), "40M"))
        .collect();
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "v",
            "--level",
            "raid5",
            "--members",
            &members.join(","),
        ],
    );
    assert!(ok, "{out}");
    write_all(&reg, "v");

    // Named by its device.
    let m1 = format!("file:{}", d.join("m1.img").display());
    let (ok, out) = ferrobay(&reg, &["volume", "fail-member", "v", &m1]);
    assert!(ok, "{out}");
    assert_eq!(member_state(&out, 1), "failed (operator)", "{out}");

    let before = snapshot(&[d, &reg]);
    let first = run(&reg, &["volume", "status", "v"]);
    let second = run(&reg, &["volume", "status", "v"]);
    assert!(first.ok && second.ok, "{}{}", first.stdout, first.stderr);
    assert_eq!(first.stdout, second.stdout);
    assert_eq!(
        snapshot(&[d, &reg]),
        before,
        "volume status wrote something"
    );
    assert_eq!(
        member_state(&first.stdout, 1),
        "failed (operator)",
        "{}",
        first.stdout
    );
    let generation = field(&first.stdout, "Generation").to_string();

    verify_all(&reg, "v");
    let st = run(&reg, &["volume", "status", "v"]).stdout;
    assert_eq!(member_state(&st, 1), "failed (operator)", "{st}");
    assert_eq!(field(&st, "Generation"), generation, "{st}");
    assert!(!st.contains("stale"), "{st}");

    let (ok, out) = ferrobay(
        &reg,
        &["volume", "re-add", "v", "1", "--throttle", "unlimited"],
    );
    assert!(ok, "{out}");
    assert!(out.contains("rebuild of member 1 finished"), "{out}");
    assert_eq!(member_state(&out, 1), "active", "{out}");
    assert_eq!(field(&out, "State"), "healthy, clean", "{out}");
    verify_all(&reg, "v");
    let (ok, out) = ferrobay(&reg, &["volume", "scrub", "v", "--throttle", "unlimited"]);
    assert!(ok && out.contains(" 0 mismatches"), "{out}");
    // Re-adding an active member is refused with a reason.
    let r = run(&reg, &["volume", "re-add", "v", "1"]);
    assert!(
        !r.ok && r.stderr.contains("member 1 is active"),
        "{}",
        r.stderr
    );
    // ... and leaves the volume as it found it: clean, nothing to resync.
    let st = run(&reg, &["volume", "status", "v"]).stdout;
    assert_eq!(field(&st, "State"), "healthy, clean", "{st}");
}

/// `volume copy-member` (mdadm --replace): a member is copied onto the spare while it
/// stays in service; the spare takes its slot, the registry follows, every block verifies,
/// and the copied member carries its share (the others' files can go one at a time).
#[test]
fn copy_member_onto_the_spare_replaces_without_degrading() {
    let dir = scratch_dir("volume-copy");
    let reg = dir.path().join("registry");
    let f = |n: &str| format!("file:{}:32M", dir.path().join(n).display());
    let members = [f("m0.img"), f("m1.img"), f("m2.img")].join(",");
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "c",
            "--level",
            "raid5",
            "--members",
            &members,
            "--spare",
            &f("s.img"),
        ],
    );
    assert!(ok, "{out}");
    write_all(&reg, "c");
    let (ok, out) = ferrobay(
        &reg,
        &["volume", "copy-member", "c", "1", "--throttle", "unlimited"],
    );
    assert!(ok, "{out}");
    assert!(out.contains("member 1 copied onto"), "{out}");
    let (ok, status) = ferrobay(&reg, &["volume", "status", "c"]);
    assert!(ok, "{status}");
    assert_eq!(member_state(&status, 1), "active", "{status}");
    assert!(
        status.contains("s.img"),
        "the spare is member 1 now:\n{status}"
    );
    assert!(!status.contains("m1.img"), "the old member left:\n{status}");
    verify_all(&reg, "c");
    // The copy holds member 1's share: without m0 the volume still reads everything.
    std::fs::remove_file(dir.path().join("m0.img")).unwrap();
    verify_all(&reg, "c");
    // Only an active member is copied, and the reason says so.
    let (ok, out) = ferrobay(&reg, &["volume", "copy-member", "c", "9"]);
    assert!(!ok && out.lines().count() == 1, "{out}");
}

/// A compressed log-layout volume: created, written and verified through `bench`,
/// reported with its compression figures, and read back with a member file gone.
#[test]
fn log_layout_volume_with_compression() {
    let tmp = scratch_dir("volume-cli-log");
    let dir = tmp.path();
    let reg = dir.join("reg");
    let members: Vec<String> = (0..4)
        .map(|i| file_spec(dir, &format!("l{i}.img"), "48M"))
        .collect();
    let members = members.join(",");
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "c5",
            "--level",
            "raid5",
            "--compress",
            "lz4",
            "--members",
            &members,
        ],
    );
    assert!(
        !ok && out.contains("--compress needs --layout log"),
        "{out}"
    );
    let (ok, out) = ferrobay(
        &reg,
        &[
            "volume",
            "create",
            "c5",
            "--level",
            "raid5",
            "--layout",
            "log",
            "--compress",
            "zstd:5",
            "--log-block",
            "16k",
            "--members",
            &members,
        ],
    );
    assert!(ok, "create failed:\n{out}");
    assert!(
        field(&out, "Layout").starts_with("log, compression zstd:5, 16.0 KiB blocks"),
        "{out}"
    );
    write_all(&reg, "c5");
    verify_all(&reg, "c5");
    let (ok, out) = ferrobay(&reg, &["volume", "assemble", "c5"]);
    assert!(ok, "{out}");
    // The bench's stamps are pseudo-random: stored about as large as written.
    assert!(field(&out, "Compression").contains("logical in"), "{out}");
    assert!(field(&out, "Stripes").contains("free of"), "{out}");
    let (ok, out) = ferrobay(&reg, &["volume", "assemble", "c5", "--json"]);
    assert!(ok && out.contains("\"compression_ratio\""), "{out}");
    let (ok, out) = ferrobay(&reg, &["volume", "status", "c5"]);
    assert!(
        ok && out.contains("log layout, compression zstd:5"),
        "{out}"
    );
    std::fs::remove_file(dir.join("l2.img")).expect("remove member");
    verify_all(&reg, "c5");
}
