//! Test support: boot the real Linux kernel (Debian bookworm's stock 6.1, with
//! the NVMe/TCP host `nvme-tcp` and target `nvmet-tcp`, and nvme-cli) under
//! QEMU and run shell jobs in it. Use it as a **dev-dependency** only.
//!
//! # Flavours
//!
//! [`Flavour`] picks the image ([`GuestConfig::flavour`]): the bookworm base
//! image (default), the same with fio ([`GuestConfig::with_fio`]), or Debian
//! trixie ([`GuestConfig::trixie`]): kernel 6.12 with DH-HMAC-CHAP
//! (`CONFIG_NVME_HOST_AUTH`) and NVMe/TCP TLS (`CONFIG_NVME_TCP_TLS`; `tls`,
//! `nvme-keyring` loaded), nvme-cli 2.13, `tlshd` and `keyctl`, for the tests of
//! in-band authentication and TLS that the 6.1 kernel cannot run. Each flavour
//! is built on first use (`build.sh`, `--fio`, `--trixie`); a trixie boot takes
//! ~8 s under TCG, about three times the base image's.
//!
//! # What a test gets
//!
//! * [`run_job`]: boot, run a job, power off; the outcome as a [`GuestRun`]
//!   (`PASS`/`FAIL`/`RESULT` lines parsed). Fails with an error quoting the
//!   FAIL lines and the log tail when the job exits non-zero or prints `FAIL`.
//! * [`spawn`]: the same in the background, as a [`RunningGuest`]: wait for a
//!   `READY` line ([`RunningGuest::wait_ready`]), act in step with the job
//!   (`host_sync NAME` in the guest ⇄ [`RunningGuest::wait_for`] /
//!   [`RunningGuest::release`] in the test), reach forwarded guest ports
//!   ([`RunningGuest::host_port`]), then [`RunningGuest::finish`]. Dropping
//!   it kills QEMU, also when the test panics; QEMU also dies with the test
//!   process (parent-death signal) and at [`GuestConfig::timeout`].
//!
//! Every run writes its merged log to `<cache>/runs/<name>-<time>-<pid>-<n>.log`
//! (job lines as printed, `console| ` kernel console, `qemu| ` QEMU's stderr,
//! `host| ` harness events, first line the QEMU command) and the job to
//! `<name>-….job.sh` next to it. Logs older than 3 days are deleted.
//!
//! # Requirements
//!
//! `scripts/install-deps.sh` (as root) installs qemu-system-x86, busybox-static,
//! cpio, kmod, file. Without QEMU every entry point fails with
//! [`GuestError::QemuMissing`], which says so: tests fail rather than skip.
//! The first use in a process runs `scripts/guest/build.sh` (kernel and
//! package download with `apt-get download`, ~10 s; then a no-op stamp
//! check) under a file lock, so parallel test binaries build once.
//!
//! A test that chooses to skip where QEMU (or anything else) is missing goes through
//! `testkit::prereq`: it says plainly that it did not run, and fails under
//! `FERROBAY_REQUIRE_ALL=1`. Every test crate uses that module for its skips.
//!
//! Environment: `FERROBAY_GUEST_DIR` (cache, default `<repo>/target/guest`),
//! `FERROBAY_GUEST_ACCEL=kvm` (default TCG: a `/dev/kvm` that cannot run a
//! stock kernel exists on some hosts, so KVM is never auto-detected).
//!
//! # The guest
//!
//! 2 vCPUs, 1 GiB by default; QEMU user networking: the guest is `10.0.2.15`
//! and reaches the host's `127.0.0.1` as `10.0.2.2` ([`HOST_ADDR_FROM_GUEST`];
//! `$HOST_ADDR` in jobs). A target the test runs on `127.0.0.1:PORT` is
//! therefore `nvme connect -t tcp -a 10.0.2.2 -s PORT` in the guest. Boot
//! takes ~2.5 s under TCG on an idle 2-core host.
//!
//! Jobs are busybox `ash`, sourced after `scripts/guest/guest/harness.sh`;
//! read that file for the full list. The main helpers:
//!
//! | helper | does |
//! |---|---|
//! | `pass NAME k=v`, `fail NAME k=v`, `result k=v`, `info TEXT`, `ready k=v` | records |
//! | `check NAME CMD...` | runs CMD, prints PASS or (with CMD's output) FAIL |
//! | `capture TAG CMD...` | runs CMD, its output as `INFO TAG\| ...` lines |
//! | `host_sync NAME [MSG]` | blocks until the test releases NAME; prints the payload |
//! | `nvme_connect_tcp ADDR PORT NQN [opts]` | `nvme connect`, prints `/dev/nvmeXnY` |
//! | `nvme_ns_dev NQN`, `nvme_ctrl_dev NQN`, `nvme_ctrl_state NQN`, `wait_ctrl_state NQN live` | find devices / states |
//! | `nvme_disc_ctrl ADDR PORT` | the (persistent) discovery controller connected to ADDR:PORT |
//! | `host_loopback_routed` | the host's 127.0.0.1 becomes reachable as 127.0.0.1 (the guest gives up its own IPv4 loopback) |
//! | `uevent_log FILE` | records kernel uevents (e.g. `NVME_AEN=0x70f002`) in FILE; there is no udev |
//! | `io_write / io_check / io_verify DEV OFFSET SIZE [TAG]` | one O_DIRECT request, data kept for later re-checks |
//! | `io_matrix DEV [BASE] [PREFIX]`, `io_matrix_check ...` | 512 B..1 MiB at sector-aligned odd offsets, 16 MiB |
//! | `wait_path PATH [S]`, `wait_path_gone PATH [S]`, `dev_size DEV` | block devices appearing / disappearing |
//! | `nvmet_ramdisk MB`, `nvmet_setup NQN ADDR PORT DEV`, `nvmet_unexport NQN` | the kernel target |
//! | `verify_rw`, `verify_ro`, `host_scenario`, `dmesg_tail`, `kmsg_follow` | from the reference harness |
//!
//! # Example: nvme-cli against a target on the host
//!
//! ```no_run
//! use std::time::Duration;
//! use test_guest::{GuestConfig, run_job};
//!
//! // Start the target under test on 127.0.0.1:0 and read its port, e.g.:
//! let port: u16 = 4420;
//! let job = r#"
//! dev=$(nvme_connect_tcp "$HOST_ADDR" "$PORT" "$NQN" -i 1) || { fail connect; exit 1; }
//! pass connect dev=$dev
//! capture id-ctrl nvme id-ctrl "$(nvme_ctrl_dev "$NQN")"
//! io_matrix "$dev" 0
//! check disconnect nvme disconnect -n "$NQN"
//! "#;
//! let cfg = GuestConfig::new("kernel-host-basic", job)
//!     .env("PORT", port)
//!     .env("NQN", "nqn.2026-01.io.ferrobay:n1:d0")
//!     .timeout(Duration::from_secs(180));
//! let run = run_job(&cfg).expect("kernel host against our target"); // Err quotes FAILs + log
//! assert!(run.passed("io_1048576_at_14680576").is_some());
//! ```
//!
//! Mid-job host actions (restart the target while the kernel is connected):
//!
//! ```no_run
//! # use std::time::Duration;
//! # use test_guest::{GuestConfig, spawn};
//! let job = r#"
//! dev=$(nvme_connect_tcp "$HOST_ADDR" "$PORT" "$NQN" -l 60 -c 1) || exit 1
//! io_matrix "$dev" 0 || exit 1
//! host_sync written "dev=$dev"          # the test restarts the target now
//! check reconnected wait_ctrl_state "$NQN" live 60
//! io_matrix_check "$dev" 0
//! "#;
//! let guest = spawn(&GuestConfig::new("restart", job).env("PORT", 4420).env("NQN", "nqn.x:y"))
//!     .expect("boot");
//! let msg = guest.wait_for("written", Duration::from_secs(120)).expect("guest wrote");
//! // ... restart the target process here ...
//! guest.release("written").expect("release");
//! let run = guest.finish(Duration::from_secs(120)).expect("data intact after restart");
//! # let _ = (msg, run);
//! ```

mod config;
mod error;
mod guest;
mod image;
mod output;
mod qemu;
mod record;
mod sync;

pub use config::{DEFAULT_TIMEOUT, GuestConfig, shell_quote};
pub use error::{GuestError, Result};
pub use guest::{RunningGuest, free_port, run_job, spawn};
pub use image::{
    Flavour, GuestImage, QEMU, find_qemu, repo_root, unavailable, unavailable_flavour,
};
pub use qemu::{GUEST_ADDR, HOST_ADDR_FROM_GUEST};
pub use record::{GuestRun, LOG_TAIL_LINES, Record};
