//! Sizes from users, at the extremes (0, odd, 2^k ± a little, just below 2^64, 16383P,
//! beyond), through every entry point that takes one. Properties on the library entry
//! points the CLI calls: the size parser, drive specs `ram:`/`null:`/`file:SIZE` parsed
//! and opened, the stripe unit, volume layout geometry and member areas, provisioning
//! sizing, local volume creation, bench `--bs/--size/--offset/--range`. Then the binary:
//! every size-taking flag given impossible sizes answers with one line and exit status 1
//! or 2, never a panic, an abort or a signal, and changes nothing.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::BenchConfig;
use blockdev::{BlockDevice, DriveSpec, IoEngine, NullDevice, parse_drive_spec, parse_size_bytes};
use common::{NodeProcess, ferrobay_bin, scratch_dir};
use control::provision::sizing::{MEMBER_ALIGN_BYTES, member_bytes_for, volume_bytes_for};
use proptest::prelude::*;
use volume::format::{DEFAULT_REGION_BYTES, plan_areas};
use volume::layout::{Family, Geometry, LayoutError};
use volume::{LevelSpec, Volume, VolumeConfig};

/// The sizes people get wrong, and any other.
fn extreme() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![
            0,
            1,
            511,
            512,
            4096,
            64 << 10,
            16 << 20,
            (16 << 20) + 4096,
            1 << 30,
            1 << 50,
            16383 << 50,
            i64::MAX as u64,
            1 << 63,
            18_446_744_073_709_420_544,
            u64::MAX - 511,
            u64::MAX,
        ]),
        (0u32..64).prop_map(|s| 1u64 << s),
        (9u32..64, -4096i64..=4096).prop_map(|(s, d)| (1u64 << s).wrapping_add_signed(d)),
        any::<u64>(),
    ]
}

/// Levels with member counts, as `volume create` takes them.
fn level() -> impl Strategy<Value = (LevelSpec, usize)> {
    prop::sample::select(vec![
        ("raid0", 1),
        ("raid0", 32),
        ("raid1", 2),
        ("raid1", 3),
        ("raid10", 4),
        ("raid10:3", 5),
        ("raid5", 3),
        ("raid6", 6),
        ("4+2", 6),
        ("10+4", 14),
        ("28+4", 32),
    ])
    .prop_map(|(l, n)| (l.parse().expect("level"), n))
}

fn stripe_unit() -> impl Strategy<Value = u64> {
    prop_oneof![
        prop::sample::select(vec![4096, 64 << 10, 16 << 20]),
        (1u64..=4096).prop_map(|u| u * 4096),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `64G`, `1P`, `4096`: the exact product, or a reason (never a wrapped value).
    #[test]
    fn size_parser_is_exact_or_refuses(n in extreme(), unit in 0usize..6) {
        let (suffix, shift) = [("", 0), ("K", 10), ("M", 20), ("G", 30), ("T", 40), ("P", 50)][unit];
        let text = format!("{n}{suffix}");
        match parse_size_bytes(&text) {
            Ok(v) => prop_assert_eq!(u128::from(v), u128::from(n) << shift),
            Err(e) => {
                prop_assert!(u128::from(n) << shift > u128::from(u64::MAX), "{text}: {e}");
                prop_assert!(!e.to_string().contains('\n'));
            }
        }
    }

    #[test]
    fn size_parser_takes_any_text(s in "\\PC{0,24}") {
        let _ = parse_size_bytes(&s);
        let _ = parse_drive_spec(&s);
    }

    /// `ram:N`, `null:N`, `file:PATH:N` parse to exactly N or say why not; opened, they are
    /// a device of N bytes or a one-line error: RAM beyond this machine's memory and files
    /// beyond what the filesystem holds are refused, nothing aborts, no file is left.
    #[test]
    fn drive_specs_parse_and_open(n in extreme()) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("d.img");
        let rt = runtime();
        for text in [format!("ram:{n}"), format!("null:{n}"), format!("file:{}:{n}", path.display())] {
            let spec = match parse_drive_spec(&text) {
                Ok(spec) => spec,
                Err(e) => {
                    prop_assert!(n == 0 || n % 512 != 0, "{text}: {e}");
                    continue;
                }
            };
            let size = match &spec {
                DriveSpec::Ram { size_bytes } | DriveSpec::Null { size_bytes } => *size_bytes,
                DriveSpec::File { create_size_bytes, .. } => create_size_bytes.unwrap_or(0),
                other => panic!("{text} parsed as {other:?}"),
            };
            prop_assert_eq!(size, n);
            match rt.block_on(blockdev::open_drive(&spec, IoEngine::ThreadPool)) {
                Ok(dev) => prop_assert_eq!(dev.info().size_bytes, n, "{}", text),
                Err(e) => {
                    prop_assert!(!matches!(spec, DriveSpec::Null { .. }), "{text}: {e}");
                    prop_assert!(!e.to_string().contains('\n'), "{e}");
                    if matches!(spec, DriveSpec::File { .. }) {
                        prop_assert!(!path.exists(), "{text}: failed but left a file");
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }

    /// `--stripe-unit N`: 4 KiB multiples up to 16 MiB, anything else a reason.
    #[test]
    fn stripe_units_are_checked((spec, n) in level(), su in extreme()) {
        let ok = su.is_multiple_of(4096) && (4096..=16 << 20).contains(&su);
        prop_assert_eq!(spec.params(n, su).is_ok(), ok, "{} {}", su, n);
    }

    /// Members of any size: a geometry whose volume size is exact, or TooSmall/TooLarge.
    #[test]
    fn layout_geometry_takes_any_member_size((spec, n) in level(), su in stripe_unit(), member in extreme()) {
        let params = spec.params(n, su).expect("valid params");
        let rows = u128::from(member / su);
        let chunks = match params.family() {
            Family::Near { copies } => n as u128 * rows / copies as u128,
            Family::Rotating { k, .. } => k as u128 * rows,
        };
        let exact = chunks * u128::from(su);
        match Geometry::new(params, member) {
            Ok(g) => prop_assert_eq!(u128::from(g.volume_bytes()), exact),
            Err(LayoutError::TooSmall { .. }) => prop_assert_eq!(rows, 0),
            Err(LayoutError::TooLarge { .. }) => prop_assert!(exact > u128::from(u64::MAX)),
            Err(e) => panic!("unexpected {e}"),
        }
        if let Ok(plan) = plan_areas(member, su, DEFAULT_REGION_BYTES, 8 << 20) {
            prop_assert!(u128::from(plan.data_offset_bytes) + u128::from(plan.usable_member_bytes) <= u128::from(member));
        }
    }

    /// `volume create --size N`: the smallest members that hold N, or "too large".
    #[test]
    fn provisioning_sizes_members_or_refuses((spec, n) in level(), su in stripe_unit(), size in extreme()) {
        let params = spec.params(n, su).expect("valid params");
        match member_bytes_for(&params, size, None) {
            Ok(m) => {
                prop_assert!(m.is_multiple_of(MEMBER_ALIGN_BYTES));
                prop_assert!(volume_bytes_for(&params, m).expect("volume") >= size);
                prop_assert!(volume_bytes_for(&params, m - MEMBER_ALIGN_BYTES).map_or(true, |v| v < size));
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.contains("too large") || (size == 0 && msg.contains("above 0")), "{}", msg);
            }
        }
    }

    /// `ferrobay bench` sizes against a device of any size: a region inside the device
    /// and allocations within the limits, or a reason.
    #[test]
    fn bench_sizes_are_checked(
        device in extreme(), bs in extreme(), offset in extreme(), range in extreme(),
        size in extreme(), verify in any::<bool>(), iodepth in 1u32..=4096, jobs in 1u32..=256,
    ) {
        let cfg = BenchConfig {
            block_size_bytes: bs,
            offset_bytes: offset,
            range_bytes: range,
            size_bytes: size,
            verify,
            iodepth,
            jobs,
            ..BenchConfig::default()
        };
        match cfg.validate(device, 512) {
            Ok((start, len)) => {
                prop_assert!(u128::from(start) + u128::from(len) <= u128::from(device));
                prop_assert!(u128::from(bs) * u128::from(iodepth) * u128::from(jobs) <= u128::from(bench::MAX_BUFFER_BYTES));
                prop_assert!(len / bs >= u64::from(jobs));
            }
            Err(e) => prop_assert!(!e.0.contains('\n'), "{}", e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// `volume create --members null:N,...`: local volumes over members of any size are
    /// created (and hold what the geometry says) or refused with a reason.
    #[test]
    fn local_volumes_over_members_of_any_size(member in extreme(), su in stripe_unit()) {
        let rt = runtime();
        let members: Vec<Arc<dyn BlockDevice>> = (0..3)
            .map(|i| Arc::new(NullDevice::new(format!("m{i}"), member)) as Arc<dyn BlockDevice>)
            .collect();
        let mut cfg = VolumeConfig::new(LevelSpec::Raid5);
        cfg.stripe_unit_bytes = su;
        cfg.assume_clean = true;
        match rt.block_on(Volume::create("v", cfg, members, Vec::new())) {
            Ok(vol) => {
                prop_assert!(u128::from(vol.size_bytes()) <= 2 * u128::from(member));
                rt.block_on(vol.stop()).expect("stop");
            }
            Err(e) => prop_assert!(!e.to_string().contains('\n'), "{e}"),
        }
    }
}

/// Runs the binary; returns its output, killing it if it outlives `timeout` (an
/// impossible size must be refused at once, not after a daemon started).
fn ferrobay(dir: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(ferrobay_bin())
        .args(args)
        .env("FERROBAY_VOLUMES_DIR", dir.join("registry"))
        .env("RUST_LOG", "off")
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ferrobay");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferrobay {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The command failed as a command should: exit 1 or 2, one line on stderr naming the
/// problem (`expect`), no panic.
fn assert_refused(dir: &Path, args: &[&str], expect: &str) {
    let out = ferrobay(dir, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 2)),
        "ferrobay {args:?}: {} (a panic is 101, a signal has no code)\n{err}",
        out.status
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "ferrobay {args:?}: not one line:\n{err}");
    assert!(
        lines[0].starts_with("ferrobay: ") && lines[0].contains(expect),
        "ferrobay {args:?}: {:?} does not say {expect:?}",
        lines[0]
    );
}

/// Beyond any RAM, file, device or bench region here.
const TOO_BIG: [&str; 4] = [
    "16383P",
    "18446744073709420544",
    "18446744073709551104",
    "9223372036854775808",
];
/// Beyond any volume: its size is a whole number of stripe units and fits in 64 bits.
const TOO_BIG_FOR_A_VOLUME: [&str; 2] = ["18446744073709551104", "18446744073709551615"];
const UNPARSABLE: [&str; 3] = ["16384P", "99999999999999999999", "1E"];

#[test]
fn cli_refuses_impossible_drive_sizes() {
    let dir = scratch_dir("sizes-drives");
    let d = dir.path();
    let img = d.join("big.img");
    for size in TOO_BIG {
        for drive in [
            format!("ram:{size}"),
            format!("file:{}:{size}", img.display()),
        ] {
            let data = d.join("node");
            assert_refused(
                d,
                &[
                    "node",
                    "run",
                    "--name",
                    "n1",
                    "--data-dir",
                    data.to_str().expect("utf-8"),
                    "--listen",
                    "127.0.0.1:0",
                    "--discovery-listen",
                    "127.0.0.1:0",
                    "--http-listen",
                    "127.0.0.1:0",
                    "--drive",
                    &drive,
                ],
                "cannot open",
            );
            assert!(!img.exists(), "{drive}: left an image file behind");
            assert_refused(
                d,
                &["bench", "--target", &drive, "--runtime", "10ms"],
                "open",
            );
        }
    }
    // `ram:1P` aborted the process with a 32 GiB chunk-table allocation.
    assert_refused(
        d,
        &["bench", "--target", "ram:1P", "--runtime", "10ms"],
        "memory",
    );
    for size in UNPARSABLE {
        assert_refused(
            d,
            &[
                "bench",
                "--target",
                &format!("null:{size}"),
                "--runtime",
                "10ms",
            ],
            "invalid size",
        );
    }
}

#[test]
fn cli_refuses_impossible_bench_sizes() {
    let dir = scratch_dir("sizes-bench");
    let d = dir.path();
    let bench = |extra: &[&str]| {
        let mut args = vec!["bench", "--runtime", "10ms"];
        args.extend_from_slice(extra);
        if !extra.contains(&"--target") {
            args.extend_from_slice(&["--target", "null:1G"]);
        }
        args.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let run = |extra: &[&str], expect: &str| {
        let args = bench(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused(d, &args, expect);
    };
    for size in TOO_BIG {
        run(&["--bs", size], "--bs");
        run(&["--offset", size], "--offset");
        run(&["--range", size], "--range");
    }
    for size in UNPARSABLE {
        for flag in ["--bs", "--offset", "--range", "--size"] {
            run(&[flag, size], "invalid size");
        }
    }
    run(&["--bs", "0"], "--bs");
    run(&["--bs", "1G"], "I/O buffers");
    run(
        &["--bs", "512", "--verify", "--target", "null:16383P"],
        "--verify",
    );
    // A byte limit beyond the device is no error: the run stops at its runtime.
    let args = bench(&["--size", "16383P", "--json"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ferrobay(d, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cli_refuses_impossible_volume_sizes() {
    let dir = scratch_dir("sizes-volume");
    let d = dir.path();
    let meta = format!("embedded:{}", d.join("meta").display());
    let cluster = |level: &str, size: &str, su: &str| {
        vec![
            "volume".to_string(),
            "create".into(),
            "v".into(),
            "--level".into(),
            level.into(),
            "--size".into(),
            size.into(),
            "--stripe-unit".into(),
            su.into(),
            "--storage-nodes".into(),
            "a,b,c,d".into(),
            "--meta".into(),
            meta.clone(),
        ]
    };
    let refused = |args: Vec<String>, expect: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused(d, &args, expect);
    };
    // Refused before any storage node is looked up (none is registered here).
    // `--level raid1 --size 18446744073709420544` panicked (debug) or wrapped (release).
    refused(
        cluster("raid1", "18446744073709420544", "64k"),
        "volume size 18446744073709420544 bytes is too large",
    );
    for level in ["raid1", "raid10", "raid0", "raid6"] {
        for size in TOO_BIG_FOR_A_VOLUME {
            refused(cluster(level, size, "64k"), "too large");
        }
        refused(cluster(level, "0", "64k"), "above 0");
        for size in UNPARSABLE {
            refused(cluster(level, size, "64k"), "--size");
        }
        for su in ["0", "1000", "32M", "16383P"] {
            refused(cluster(level, "1G", su), "stripe unit");
        }
    }
    // Local volumes: members of impossible size, and impossible stripe units.
    let members = "null:16383P,null:16383P";
    refused(
        vec![
            "volume".into(),
            "create".into(),
            "v".into(),
            "--level".into(),
            "raid0".into(),
            "--members".into(),
            members.into(),
            "--assume-clean".into(),
        ],
        "too large",
    );
    for su in ["0", "1000", "16383P"] {
        refused(
            vec![
                "volume".into(),
                "create".into(),
                "v".into(),
                "--level".into(),
                "raid5".into(),
                "--stripe-unit".into(),
                su.into(),
                "--members".into(),
                "null:1G,null:1G,null:1G".into(),
            ],
            "stripe unit",
        );
    }
    for size in TOO_BIG_FOR_A_VOLUME {
        refused(
            vec![
                "up".into(),
                "--volume-size".into(),
                size.into(),
                "--data-dir".into(),
                d.join("up").display().to_string(),
            ],
            "too large",
        );
    }
    assert!(
        !d.join("up").exists(),
        "up started before refusing the size"
    );
}

#[test]
fn cli_refuses_impossible_namespace_sizes() {
    let dir = scratch_dir("sizes-ns");
    let d = dir.path();
    let mut node = NodeProcess::start_with(
        "n1",
        &d.join("node"),
        &["d0=null:1T".to_string()],
        (0, 0, 0),
        &["--no-default-namespace"],
        &[],
    );
    let api = node.endpoints.http.clone().expect("http endpoint");
    let token = d.join("node").join("api-token").display().to_string();
    let ns_create = |size: &str, expect: &str| {
        assert_refused(
            d,
            &[
                "node",
                "ns",
                "create",
                "--api",
                &api,
                "--api-token-file",
                &token,
                "--drive",
                "d0",
                "--size",
                size,
            ],
            expect,
        );
    };
    for size in TOO_BIG.iter().chain(&["2T", "1P"]) {
        ns_create(size, "not enough free space");
    }
    ns_create("0", "size");
    ns_create("511", "size");
    for size in UNPARSABLE {
        ns_create(size, "invalid size");
    }
    // Nothing was carved out, and the whole drive is still free for one that fits.
    let ok = |args: &[&str]| {
        let out = ferrobay(d, args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ferrobay {args:?}: {err}");
        out.stdout
    };
    let list = ok(&[
        "node",
        "ns",
        "list",
        "--api",
        &api,
        "--api-token-file",
        &token,
        "--json",
    ]);
    let list: serde_json::Value = serde_json::from_slice(&list).expect("json");
    assert_eq!(list.as_array().map(Vec::len), Some(0), "{list}");
    ok(&[
        "node",
        "ns",
        "create",
        "--api",
        &api,
        "--api-token-file",
        &token,
        "--drive",
        "d0",
        "--size",
        "1T",
    ]);
    node.stop();
}
