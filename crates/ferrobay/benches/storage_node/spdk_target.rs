//! SPDK's `nvmf_tgt` as a child process for section C: a binary built outside this repo
//! (nothing here fetches or builds SPDK), started with a config this file writes (one
//! Malloc bdev, the TCP transport with SPDK's defaults, one subsystem listening on a free
//! port of 127.0.0.1) and asked for its reactors' busy time over its JSON-RPC socket.

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use testkit::process::die_with_parent;

pub const SPDK_NQN: &str = "nqn.2016-06.io.spdk:ferrobay-bench";
const BDEV: &str = "Malloc0";
/// Same logical block size as ferrobay's RAM drive.
const BLOCK_BYTES: u64 = 512;
/// DPDK memory on top of the Malloc bdev: the TCP transport's shared buffers (511 x 128 KiB
/// by default), per-queue PDU pools, the message mempool.
const MEM_HEADROOM_MB: u64 = 1024;
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
const START_ATTEMPTS: u32 = 3;
/// Longest path a Unix socket address takes (sun_path less its NUL).
const MAX_SOCKET_PATH_BYTES: usize = 107;
const MAX_RPC_RESPONSE_BYTES: u64 = 16 << 20;

/// Ticks (TSC) SPDK's reactors spent in loop iterations that did work (busy) and that
/// did none (idle), so far (`framework_get_reactors`).
#[derive(Debug, Clone, Copy)]
pub struct ReactorTicks {
    pub busy: u64,
    pub idle: u64,
}

impl ReactorTicks {
    /// The share of the reactors' loop time between `earlier` and `self` that was busy.
    /// Ticks count wall time, including time the OS gave the core to someone else, so
    /// this share (times the CPU the process really got) is the fair figure on a shared
    /// machine, not the busy ticks themselves.
    pub fn busy_fraction_since(&self, earlier: &ReactorTicks) -> Option<f64> {
        let busy = self.busy.saturating_sub(earlier.busy) as f64;
        let idle = self.idle.saturating_sub(earlier.idle) as f64;
        (busy + idle > 0.0).then(|| busy / (busy + idle))
    }
}

pub struct SpdkChild {
    child: Child,
    log_path: PathBuf,
    rpc_socket: PathBuf,
    pub addr: SocketAddr,
    /// "SPDK v24.01 / DPDK 22.11.11", from its start-up line.
    pub version: String,
    pub args: Vec<String>,
    paused: bool,
}

impl SpdkChild {
    /// Starts `nvmf_tgt` as the settings say (a RAM namespace of `ram_ns_mb` MiB, the
    /// reactor mask, more arguments) on a free port. Tries a few ports, since a port found
    /// free can be taken before the target binds it.
    pub fn start(
        binary: &Path,
        dir: &Path,
        settings: &crate::Settings,
    ) -> Result<SpdkChild, String> {
        let (ram_mb, cpumask, extra) = (
            settings.ram_ns_mb,
            settings.spdk_cpumask.as_str(),
            settings.spdk_args.as_slice(),
        );
        if !binary.is_file() {
            return Err(format!(
                "FERROBAY_BENCH_SPDK_TGT={}: no such file",
                binary.display()
            ));
        }
        let mut last = String::new();
        for attempt in 0..START_ATTEMPTS {
            let port = testkit::net::free_port().map_err(|e| format!("free port: {e}"))?;
            match Self::start_on(binary, dir, ram_mb, cpumask, extra, port, attempt) {
                Ok(c) => return Ok(c),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_on(
        binary: &Path,
        dir: &Path,
        ram_mb: u64,
        cpumask: &str,
        extra: &[String],
        port: u16,
        attempt: u32,
    ) -> Result<SpdkChild, String> {
        let config_path = dir.join(format!("spdk-{attempt}.json"));
        let config = config(ram_mb, port);
        std::fs::write(&config_path, config.to_string())
            .map_err(|e| format!("{}: {e}", config_path.display()))?;
        let rpc_socket = rpc_socket_path(dir, attempt);
        let _ = std::fs::remove_file(&rpc_socket);
        let log_path = dir.join(format!("spdk-{attempt}.log"));
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let err_log = log
            .try_clone()
            .map_err(|e| format!("{}: {e}", log_path.display()))?;

        let mut args: Vec<String> = vec![
            "-m".into(),
            cpumask.into(),
            // No hugepages here: DPDK takes anonymous memory (fine for TCP, which never
            // needs physical addresses).
            "--no-huge".into(),
            "-s".into(),
            (ram_mb + MEM_HEADROOM_MB).to_string(),
            "--no-pci".into(),
            // No lock files in /var/tmp (several benches may run at once) and no trace
            // buffer in /dev/shm.
            "--disable-cpumask-locks".into(),
            "--num-trace-entries".into(),
            "0".into(),
            "-r".into(),
            rpc_socket.display().to_string(),
            "--json".into(),
            config_path.display().to_string(),
        ];
        args.extend(extra.iter().cloned());
        let mut cmd = Command::new(binary);
        cmd.args(&args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log);
        use_spdk_libs(&mut cmd, binary);
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let mut spdk = SpdkChild {
            child,
            log_path,
            rpc_socket,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            version: String::new(),
            args,
            paused: false,
        };
        spdk.wait_ready()?;
        spdk.version = spdk.read_version();
        Ok(spdk)
    }

    /// Ready when the NVMe/TCP port accepts and the RPC socket answers.
    fn wait_ready(&mut self) -> Result<(), String> {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "nvmf_tgt exited at start ({status})\n{}",
                    self.log_tail()
                ));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok()
                && self.reactor_ticks().is_ok()
            {
                return Ok(());
            }
            if t0.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "nvmf_tgt did not listen on {} within {READY_TIMEOUT:?}\n{}",
                    self.addr,
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn read_version(&self) -> String {
        let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        log.lines()
            .find_map(|l| {
                let rest = &l[l.find("Starting SPDK ")? + "Starting ".len()..];
                Some(rest.trim_end_matches(" initialization...").to_string())
            })
            .unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `framework_get_reactors`: busy and idle ticks summed over the reactors.
    pub fn reactor_ticks(&self) -> Result<ReactorTicks, String> {
        let r = self.rpc("framework_get_reactors")?;
        let reactors = r
            .get("reactors")
            .and_then(Value::as_array)
            .ok_or("framework_get_reactors: no reactors")?;
        let sum = |k: &str| {
            reactors
                .iter()
                .filter_map(|x| x.get(k).and_then(Value::as_u64))
                .sum::<u64>()
        };
        Ok(ReactorTicks {
            busy: sum("busy"),
            idle: sum("idle"),
        })
    }

    /// One JSON-RPC 2.0 call on the target's Unix socket (what its rpc.py does).
    fn rpc(&self, method: &str) -> Result<Value, String> {
        if self.paused {
            return Err(format!("{method}: nvmf_tgt is stopped"));
        }
        let what =
            |e: std::io::Error| format!("rpc {method} on {}: {e}", self.rpc_socket.display());
        let mut s = UnixStream::connect(&self.rpc_socket).map_err(what)?;
        s.set_read_timeout(Some(RPC_TIMEOUT)).map_err(what)?;
        s.set_write_timeout(Some(RPC_TIMEOUT)).map_err(what)?;
        let req = json!({"jsonrpc": "2.0", "method": method, "id": 1});
        s.write_all(req.to_string().as_bytes()).map_err(what)?;
        let reader = std::io::Read::take(&s, MAX_RPC_RESPONSE_BYTES);
        let resp: Value = serde_json::Deserializer::from_reader(reader)
            .into_iter::<Value>()
            .next()
            .ok_or_else(|| format!("rpc {method}: connection closed without an answer"))?
            .map_err(|e| format!("rpc {method}: {e}"))?;
        if let Some(err) = resp.get("error") {
            return Err(format!("rpc {method}: {err}"));
        }
        resp.get("result")
            .cloned()
            .ok_or_else(|| format!("rpc {method}: answer without result: {resp}"))
    }

    /// SIGSTOP: its reactor polls a whole core even when idle, which would take CPU from
    /// the other target's runs on this small machine.
    pub fn pause(&mut self) -> Result<(), String> {
        signal(self.child.id(), libc::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    pub fn resume(&mut self) -> Result<(), String> {
        signal(self.child.id(), libc::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Its log's error and warning lines (at most `max`): what it disliked in our traffic.
    pub fn log_problems(&self, max: usize) -> Vec<String> {
        let s = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        s.lines()
            .filter(|l| l.contains("*ERROR*") || l.contains("*WARNING*"))
            .take(max)
            .map(str::to_string)
            .collect()
    }

    pub fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        format!(
            "nvmf_tgt log ({}), last lines:\n{}",
            self.log_path.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }

    /// SIGTERM (after SIGCONT), then SIGKILL if it is still there after a few seconds.
    pub fn stop(mut self) {
        let pid = self.child.id();
        let _ = signal(pid, libc::SIGCONT);
        self.paused = false;
        let _ = signal(pid, libc::SIGTERM);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Drop kills it.
    }
}

impl Drop for SpdkChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SIGKILL ends a stopped process too.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // DPDK leaves its (empty) runtime directory behind, named after the pid.
        let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/spdk_pid{}", self.child.id()));
        let _ = std::fs::remove_file(&self.rpc_socket);
    }
}

/// The `--json` config: one Malloc bdev, the TCP transport, one subsystem with it as
/// namespace 1, any host allowed, listening on 127.0.0.1:`port`.
fn config(ram_mb: u64, port: u16) -> Value {
    let listen = json!({
        "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": port.to_string()
    });
    json!({"subsystems": [
        {"subsystem": "bdev", "config": [
            {"method": "bdev_malloc_create", "params": {
                "name": BDEV,
                "num_blocks": (ram_mb << 20) / BLOCK_BYTES,
                "block_size": BLOCK_BYTES
            }}
        ]},
        {"subsystem": "nvmf", "config": [
            {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
            {"method": "nvmf_create_subsystem", "params": {
                "nqn": SPDK_NQN,
                "allow_any_host": true,
                "serial_number": "FERROBAYBENCH0001",
                "model_number": "SPDK bdev Controller"
            }},
            {"method": "nvmf_subsystem_add_ns", "params": {
                "nqn": SPDK_NQN, "namespace": {"bdev_name": BDEV, "nsid": 1}
            }},
            {"method": "nvmf_subsystem_add_listener", "params": {
                "nqn": SPDK_NQN, "listen_address": listen
            }}
        ]}
    ]})
}

/// `DIR/spdk-N.sock`, or one in the temp dir when that path is too long for a socket.
fn rpc_socket_path(dir: &Path, attempt: u32) -> PathBuf {
    let p = dir.join(format!("spdk-{attempt}.sock"));
    if p.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
        return p;
    }
    std::env::temp_dir().join(format!(
        "ferrobay-bench-spdk-{}-{attempt}.sock",
        std::process::id()
    ))
}

/// Lets `cmd` (an SPDK tool) find SPDK's shared libraries beside `binary`: a build
/// against a packaged DPDK is a shared build, its libspdk_*.so live in build/lib beside
/// build/bin.
pub fn use_spdk_libs(cmd: &mut Command, binary: &Path) {
    if let Some(lib) = shared_lib_dir(binary) {
        let mut path = lib.into_os_string();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(old);
        }
        cmd.env("LD_LIBRARY_PATH", path);
    }
}

/// `<bin>/../lib` when it holds SPDK's shared libraries.
fn shared_lib_dir(binary: &Path) -> Option<PathBuf> {
    let lib = binary.parent()?.parent()?.join("lib");
    let has_spdk = std::fs::read_dir(&lib).ok()?.flatten().any(|e| {
        let n = e.file_name();
        let n = n.to_string_lossy();
        n.starts_with("libspdk_") && n.contains(".so")
    });
    has_spdk.then_some(lib)
}

#[allow(unsafe_code)]
fn signal(pid: u32, sig: libc::c_int) -> Result<(), String> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
    // SAFETY: kill(2) only sends a signal to our own child (its pid cannot be reused
    // before we wait for it); it touches no memory of ours.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        return Err(format!(
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
