//! The central discovery controller with the real Linux host: `ferrobay up` (with its CDC)
//! as a user starts it, and a QEMU guest (nvme-cli 2.3, the 6.1 kernel's nvme-tcp,
//! `guest/cdc.sh`) that knows only the CDC's address: `nvme discover` lists the volume and
//! not the storage nodes' drives (they serve the processor node only), `nvme connect-all
//! --persistent` connects the volume (I/O checked) and keeps the discovery connection;
//! then the test creates a second volume, the kernel reports the discovery log change
//! (AEN 0x70f002) as a uevent on the CDC's controller, and `nvme connect-all --device`
//! over that persistent connection (what udev's nvmf-autoconnect rule runs) connects it.
//! Without QEMU or the guest image it says it did not run (`testkit::prereq`). ~40 s.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::up::{Up, arg_after, line_words};
use common::{ferrobay_bin, scratch_dir};
use test_guest::{GuestConfig, spawn};

const GUEST_TIMEOUT: Duration = Duration::from_secs(180);

#[test]
fn linux_host_finds_every_volume_through_the_cdc() {
    if let Some(why) = test_guest::unavailable() {
        testkit::prereq::missing(why);
        return;
    }
    let t0 = Instant::now();
    let dir = scratch_dir("cdc-guest");
    let port = test_guest::free_port().expect("free port");
    let cdc_port = test_guest::free_port().expect("free port");
    let data_dir = dir.path().join("data");
    let mut up = Up::start_with(
        &data_dir,
        port,
        data_dir.with_extension("log"),
        &["--cdc-port", &cdc_port.to_string()],
    );
    up.wait_connect_line();
    // The banner names the CDC with the two nvme-cli lines a person would paste.
    let banner = up.stdout.join("\n");
    let discover = line_words(&up.stdout, "nvme discover ")
        .unwrap_or_else(|| panic!("no nvme discover line:\n{banner}"));
    assert_eq!(arg_after(&discover, "-a"), Some("127.0.0.1"), "{banner}");
    assert_eq!(
        arg_after(&discover, "-s"),
        Some(cdc_port.to_string().as_str()),
        "{banner}"
    );
    let connect_all = line_words(&up.stdout, "nvme connect-all ")
        .unwrap_or_else(|| panic!("no nvme connect-all line:\n{banner}"));
    assert_eq!(arg_after(&connect_all, "-s"), arg_after(&discover, "-s"));
    let api = up
        .stdout
        .iter()
        .find_map(|l| l.strip_prefix("API: http://"))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|url| url.trim_end_matches("/api/v1").to_string())
        .unwrap_or_else(|| panic!("no API line:\n{banner}"));
    let token = data_dir.join("api-token").display().to_string();

    let cfg = GuestConfig::new("cdc", include_str!("guest/cdc.sh"))
        .env("CDC_PORT", cdc_port)
        .env("VOL0", "nqn.2026-01.io.ferrobay:vol:vol0")
        .env("VOL1", "nqn.2026-01.io.ferrobay:vol:vol1")
        .timeout(GUEST_TIMEOUT);
    let guest = spawn(&cfg).unwrap_or_else(|e| panic!("{e}\n{}", up.log()));
    guest
        .wait_for("connected", GUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\n{}", up.log()));
    // A new volume while the host holds its persistent discovery connection.
    let created = Command::new(ferrobay_bin())
        .args([
            "volume", "create", "vol1", "--level", "raid5", "--size", "32M",
        ])
        .args(["--storage-nodes", "n1,n2,n3", "--api", &api])
        .args(["--api-token-file", &token])
        .output()
        .expect("ferrobay volume create");
    assert!(
        created.status.success(),
        "volume create: {}\n{}",
        String::from_utf8_lossy(&created.stderr),
        up.log()
    );
    guest.release("connected").expect("release");
    let run = guest
        .finish(GUEST_TIMEOUT)
        .unwrap_or_else(|e| panic!("{e}\n{}", up.log()));
    for want in [
        "host_loopback",
        "discover_lists_vol0",
        "drives_hidden",
        "cdc_entry_and_referrals",
        "connect_all",
        "vol0_io",
        "persistent_cdc_dctype",
        "aen_uevent",
        "vol1_connected",
        "vol1_io",
        "disconnect_all",
    ] {
        assert!(
            run.passed(want).is_some(),
            "missing PASS {want}\n{}",
            run.diagnostics()
        );
    }
    let status = up.interrupt();
    assert!(status.success(), "exit {status}:\n{}", up.log());
    eprintln!("cdc guest test took {:?}", t0.elapsed());
}
