//! Network namespaces as separate hosts: a private bridge with its own /24 in the root
//! namespace, one namespace per node with a veth into the bridge, processes started
//! inside a namespace, and cutting a namespace off the network (link down).
//!
//! Everything is named `fb<pid hex>-<n>...` so that parallel test processes never
//! collide, and removed on drop (also when the test panics). Leftovers of test
//! processes that no longer exist (killed before their drops ran) are swept at start.
//! Needs root (`ip netns add`) and iproute2; [`Net::unavailable`] says why not.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::ferrobay_bin;

/// Prefix of every netns and link this module creates.
const PREFIX: &str = "fb";
/// Host numbers handed to namespaces: .1 is the bridge (root namespace).
const FIRST_HOST: u8 = 10;
/// How long a spawned daemon may take to write its endpoints file.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

static SEQ: AtomicU32 = AtomicU32::new(0);

fn run_ip(args: &[&str]) -> Result<Output, String> {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))
}

/// `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = run_ip(args)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn ip_stdout(args: &[&str]) -> Result<String, String> {
    let out = run_ip(args)?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Holds an exclusive lock on a file in the target dir while a subnet is picked and
/// its bridge addressed, so that two test processes never pick the same /24.
struct SubnetLock(std::fs::File);

impl SubnetLock {
    fn take() -> Result<SubnetLock, String> {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("netns-subnet.lock");
        let _ = std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        flock(&f, libc::LOCK_EX)?;
        Ok(SubnetLock(f))
    }
}

impl Drop for SubnetLock {
    fn drop(&mut self) {
        let _ = flock(&self.0, libc::LOCK_UN);
    }
}

#[allow(unsafe_code)]
fn flock(f: &std::fs::File, op: libc::c_int) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a file descriptor we own for the duration of the call.
    let rc = unsafe { libc::flock(f.as_raw_fd(), op) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("flock: {}", std::io::Error::last_os_error()))
    }
}

/// kill(2); callers pass only pids of processes this test started.
#[allow(unsafe_code)]
fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, sig);
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid encoded in one of our names (`fb<pid hex>-...`), if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (hex, _) = rest.split_once('-')?;
    u32::from_str_radix(hex, 16).ok()
}

/// Removes namespaces and links left by test processes that are gone.
fn sweep_stale() {
    if let Ok(list) = ip_stdout(&["netns", "list"]) {
        for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if owner_pid(name).is_some_and(|p| !pid_alive(p)) {
                kill_ns_pids(name);
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(list) = ip_stdout(&["-o", "link", "show"]) {
        for l in list.lines() {
            // "12: fb1a2b-0b: <...>" or "13: fb1a2b-0v1@if2: <...>"
            let Some(name) = l.split(": ").nth(1) else {
                continue;
            };
            let name = name.split('@').next().unwrap_or(name);
            if owner_pid(name).is_some_and(|p| !pid_alive(p)) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

/// SIGKILLs every process inside namespace `ns` (only our own namespaces are passed).
fn kill_ns_pids(ns: &str) {
    if let Ok(pids) = ip_stdout(&["netns", "pids", ns]) {
        for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
            signal(pid, libc::SIGKILL);
        }
    }
}

#[allow(unsafe_code)]
fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Used /24s in the root namespace (routes and addresses), as their first three octets.
fn used_subnets() -> Vec<[u8; 3]> {
    let mut used = Vec::new();
    let text = ip_stdout(&["-4", "route", "show", "table", "all"]).unwrap_or_default()
        + &ip_stdout(&["-4", "-o", "addr", "show"]).unwrap_or_default();
    for word in text.split_whitespace() {
        let addr = word.split('/').next().unwrap_or(word);
        if let Ok(a) = addr.parse::<Ipv4Addr>() {
            let o = a.octets();
            used.push([o[0], o[1], o[2]]);
        }
    }
    used
}

/// One namespace ("host") on the bridge.
#[derive(Debug, Clone)]
pub struct Netns {
    /// What the test calls it (n1, p1, etcd, ...).
    pub label: String,
    /// The namespace name (`ip netns exec NAME`).
    pub name: String,
    /// Its address on the bridge.
    pub addr: Ipv4Addr,
    /// The root-namespace end of its veth (down = the namespace is cut off).
    pub host_veth: String,
}

impl Netns {
    /// `ADDR:PORT` in this namespace.
    pub fn sock(&self, port: u16) -> String {
        format!("{}:{port}", self.addr)
    }
}

/// A private bridge with a /24 and the namespaces on it; everything is removed on drop.
pub struct Net {
    id: String,
    bridge: String,
    prefix: [u8; 3],
    spaces: Mutex<Vec<Netns>>,
}

impl Net {
    /// Why namespaces cannot be used here (not root, no iproute2), or None.
    pub fn unavailable() -> Option<String> {
        if !is_root() {
            return Some("network namespaces need root".into());
        }
        match run_ip(&["netns", "list"]) {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "`ip netns list` fails: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Some(format!("iproute2 missing: {e}")),
        }
    }

    /// Creates the bridge with a free 10.X.Y.0/24 (X != 0: QEMU's user network is
    /// 10.0.2.0/24), the bridge holding .1.
    pub fn new() -> Result<Net, String> {
        sweep_stale();
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let id = format!("{PREFIX}{:x}-{n:x}", std::process::id());
        let bridge = format!("{id}b");
        let lock = SubnetLock::take()?;
        let used = used_subnets();
        let seed = std::process::id()
            .wrapping_mul(2_654_435_761)
            .wrapping_add(n.wrapping_mul(40_503))
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
        let prefix = (0..4096u32)
            .map(|i| {
                let v = seed.wrapping_add(i.wrapping_mul(7919));
                [10, 1 + (v % 254) as u8, ((v / 254) % 256) as u8]
            })
            .find(|p| !used.contains(p))
            .ok_or("no free 10.x.y.0/24")?;
        let net = Net {
            id,
            bridge,
            prefix,
            spaces: Mutex::new(Vec::new()),
        };
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.gateway()),
            "dev",
            &net.bridge,
        ])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        drop(lock);
        Ok(net)
    }

    /// The bridge's address (the root namespace, where the test and QEMU run).
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.prefix;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// A new namespace with a veth into the bridge, its own address and loopback up,
    /// the bridge as default route.
    pub fn add(&self, label: &str) -> Result<Netns, String> {
        let mut spaces = self.spaces.lock().map_err(|_| "netns list poisoned")?;
        let i = spaces.len();
        let host = FIRST_HOST
            .checked_add(u8::try_from(i).map_err(|_| "too many namespaces")?)
            .filter(|h| *h < 255)
            .ok_or("too many namespaces")?;
        let [a, b, c] = self.prefix;
        let ns = Netns {
            label: label.to_string(),
            name: format!("{}-{label}", self.id),
            addr: Ipv4Addr::new(a, b, c, host),
            host_veth: format!("{}v{i}", self.id),
        };
        let peer = format!("{}p{i}", self.id);
        ip(&["netns", "add", &ns.name])?;
        // Recorded before the rest so that drop removes whatever got created.
        spaces.push(ns.clone());
        ip(&[
            "link",
            "add",
            &ns.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])?;
        ip(&["link", "set", &ns.host_veth, "master", &self.bridge])?;
        ip(&["link", "set", &ns.host_veth, "up"])?;
        ip(&["link", "set", &peer, "netns", &ns.name])?;
        let n = ns.name.as_str();
        ip(&["-n", n, "link", "set", &peer, "name", "eth0"])?;
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{}/24", ns.addr),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", n, "link", "set", "eth0", "up"])?;
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        ip(&[
            "-n",
            n,
            "route",
            "add",
            "default",
            "via",
            &self.gateway().to_string(),
        ])?;
        Ok(ns)
    }

    /// Cuts `ns` off the network: its bridge port goes down (its own link and routes
    /// stay, as a pulled cable on the switch side; open TCP connections see silence).
    pub fn link_down(&self, ns: &Netns) -> Result<(), String> {
        ip(&["link", "set", &ns.host_veth, "down"])
    }

    /// Reconnects `ns` after [`Net::link_down`].
    pub fn link_up(&self, ns: &Netns) -> Result<(), String> {
        ip(&["link", "set", &ns.host_veth, "up"])
    }

    /// Starts `program args` inside `ns`, stdout and stderr appended to `log`.
    pub fn spawn(
        &self,
        ns: &Netns,
        label: &str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &str)],
        log: &Path,
    ) -> Result<NsProcess, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| format!("log fd: {e}"))?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns.name])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        testkit::process::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawning {} in {}: {e}", program.display(), ns.name))?;
        Ok(NsProcess {
            label: label.to_string(),
            ns: ns.clone(),
            child,
            log_path: log.to_path_buf(),
        })
    }

    /// `ferrobay ARGS` inside `ns` (RUST_LOG=info unless `envs` says otherwise).
    pub fn spawn_ferrobay(
        &self,
        ns: &Netns,
        label: &str,
        args: &[String],
        log: &Path,
    ) -> Result<NsProcess, String> {
        let log_level = std::env::var("FERROBAY_TEST_LOG").unwrap_or_else(|_| "info".into());
        self.spawn(
            ns,
            label,
            Path::new(ferrobay_bin()),
            args,
            &[("RUST_LOG", &log_level)],
            log,
        )
    }

    /// Runs `ferrobay ARGS` in the root namespace (it reaches every namespace through
    /// the bridge) and returns its output.
    pub fn ferrobay(&self, args: &[&str]) -> Output {
        Command::new(ferrobay_bin())
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("running ferrobay")
    }

    /// Every namespace created so far.
    pub fn namespaces(&self) -> Vec<Netns> {
        self.spaces.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let spaces = std::mem::take(&mut *self.spaces.lock().unwrap_or_else(|p| p.into_inner()));
        for ns in spaces.iter().rev() {
            // Processes keep a namespace alive after its name is gone: end ours first.
            kill_ns_pids(&ns.name);
            let _ = ip(&["netns", "del", &ns.name]);
            let _ = ip(&["link", "del", &ns.host_veth]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// A process inside a namespace, SIGKILLed on drop.
pub struct NsProcess {
    pub label: String,
    pub ns: Netns,
    pub child: Child,
    pub log_path: PathBuf,
}

impl NsProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `n` lines of the log, prefixed with the label.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| format!("{}| {l}\n", self.label))
            .collect()
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `kill -9`, as a crash or power cut would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then up to `timeout` for the exit (SIGKILL after); true on a clean exit.
    pub fn stop(&mut self, timeout: Duration) -> bool {
        signal(self.child.id() as i32, libc::SIGTERM);
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        false
    }

    /// Waits for `file` to hold JSON that parses as `T` (the daemon's endpoints file).
    pub fn wait_json<T: serde::de::DeserializeOwned>(&mut self, file: &Path) -> Result<T, String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(s) = std::fs::read_to_string(file)
                && let Ok(v) = serde_json::from_str::<T>(&s)
            {
                return Ok(v);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited early ({status}):\n{}",
                    self.label,
                    self.log_tail(40)
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{} wrote no {} within {READY_TIMEOUT:?}:\n{}",
                    self.label,
                    file.display(),
                    self.log_tail(40)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for NsProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// etcd (Debian's etcd-server) inside its own namespace: any port is free there.
pub struct NsEtcd {
    pub proc: NsProcess,
    /// `ADDR:PORT` of the client listener.
    pub client: String,
    _dir: tempfile::TempDir,
}

impl NsEtcd {
    pub const CLIENT_PORT: u16 = 2379;
    const PEER_PORT: u16 = 2380;

    /// Finds the etcd binary: `$FERROBAY_ETCD_BIN`, `/usr/bin/etcd`, or None.
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("FERROBAY_ETCD_BIN") {
            return Some(PathBuf::from(p));
        }
        let p = Path::new("/usr/bin/etcd");
        p.is_file().then(|| p.to_path_buf())
    }

    /// Starts etcd in `ns` and waits until `/health` answers.
    pub fn start(net: &Net, ns: &Netns) -> Result<NsEtcd, String> {
        let bin = Self::binary().ok_or("etcd not installed (Debian package etcd-server)")?;
        let dir = super::scratch_dir("netns-etcd");
        let client = ns.sock(Self::CLIENT_PORT);
        let peer = format!("http://{}", ns.sock(Self::PEER_PORT));
        let args = vec![
            "--name=default".to_string(),
            format!("--data-dir={}", dir.path().join("data").display()),
            format!("--listen-client-urls=http://{client}"),
            format!("--advertise-client-urls=http://{client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=default={peer}"),
            "--initial-cluster-state=new".into(),
            // Short election timeout: quick start, and a minimum lease TTL of 1 s.
            "--heartbeat-interval=50".into(),
            "--election-timeout=500".into(),
            "--logger=zap".into(),
            "--log-level=warn".into(),
        ];
        let mut proc = net.spawn(ns, "etcd", &bin, &args, &[], &dir.path().join("etcd.log"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_get(&client, "/health").is_ok_and(|b| b.contains("\"health\":\"true\"")) {
                return Ok(NsEtcd {
                    proc,
                    client,
                    _dir: dir,
                });
            }
            if !proc.running() {
                return Err(format!("etcd exited:\n{}", proc.log_tail(30)));
            }
            if Instant::now() > deadline {
                return Err(format!("etcd not healthy in 30 s:\n{}", proc.log_tail(30)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The `--meta` URL for ferrobay.
    pub fn meta_url(&self) -> String {
        format!("etcd://{}", self.client)
    }
}

/// A minimal HTTP/1.0 GET; the body on status 200.
pub fn http_get(addr: &str, path: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let sa: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(2))
        .map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(|e| e.to_string())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).map_err(|e| e.to_string())?;
    let (head, body) = resp.split_once("\r\n\r\n").ok_or("no HTTP header")?;
    if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") {
        Ok(body.to_string())
    } else {
        Err(head.lines().next().unwrap_or("").to_string())
    }
}
