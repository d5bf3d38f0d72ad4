//! Configuration of the target, its subsystems and namespaces.

use std::sync::Arc;

use blockdev::BlockDevice;

/// Smallest MAXH2CDATA the Linux host accepts.
pub const MIN_MAXH2CDATA_BYTES: u32 = 4096;
/// NVMe/TCP requires at least 8 KiB of in-capsule data on the admin queue (Linux assumes it).
pub const ADMIN_IN_CAPSULE_BYTES: u32 = 8192;
/// Memory page size the target reports (CAP.MPSMIN = 0 → 4 KiB); MDTS is in these units.
pub const PAGE_BYTES: u32 = 4096;

/// Target-wide settings.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// Lowest controller ID handed out by Connect (≥ 1).
    pub cntlid_min: u16,
    /// Highest controller ID handed out by Connect (≤ 0xFFEF). Disjoint ranges let several
    /// nodes export one NQN.
    pub cntlid_max: u16,
    /// Largest data transfer of one command (MDTS); a power-of-two multiple of 4 KiB.
    /// A Key Value Store or Retrieve moves its whole value in one command, so this also
    /// bounds the largest value a KV namespace may accept. Default 4 MiB, the most Linux
    /// nvmet offers; Linux hosts still split block I/O at `max_sectors_kb` (1280 KiB).
    pub mdts_bytes: u32,
    /// In-capsule data accepted on I/O queues (IOCCSZ); at least 8 KiB.
    pub in_capsule_bytes: u32,
    /// MAXH2CDATA offered in ICResp: ≥ 4096 and a multiple of 4.
    pub maxh2cdata_bytes: u32,
    /// C2HData PDUs are split at this many bytes.
    pub c2h_chunk_bytes: u32,
    /// Most I/O queues one controller may create.
    pub max_io_queues: u16,
    /// Maximum queue entries supported, 0's based (CAP.MQES); ≥ 127.
    pub mqes: u16,
    /// Keep-alive timeout used when a Connect asks for 0 on an I/O subsystem, in ms
    /// (0 keeps keep-alive off for such hosts).
    pub default_kato_ms: u32,
    /// Most bytes of write data one connection buffers while soliciting it with R2T.
    pub max_r2t_buffer_bytes: usize,
    pub model: String,
    pub firmware: String,
    /// Prefix of generated serial numbers (subsystems without their own serial).
    pub serial_prefix: String,
    /// IEEE OUI reported in Identify Controller.
    pub ieee_oui: [u8; 3],
    /// How long a Reservation Acquire with "preempt and abort" waits for the preempted
    /// hosts' commands already on the device to finish before it completes. On timeout
    /// the Acquire completes with Command Interrupted (the reservation change stays), as
    /// in SPDK; Linux nvmet waits without a bound. Keep it below hosts' I/O timeouts.
    pub preempt_abort_timeout_ms: u32,
    /// Most connections one listener holds at once; a connection beyond it is closed at
    /// accept, before anything is read or allocated for it. Each queue is a connection:
    /// the default (16384) holds e.g. 128 controllers of 128 queues.
    pub max_connections_per_listener: u32,
    /// Most connections one host address holds on one listener at once (closed at accept
    /// like above). The default (4096) fits a host with 32 controllers of 128 queues (the
    /// most queues a Linux or SPDK target gives one controller).
    pub max_connections_per_host: u32,
    /// A connection must send ICReq and complete a Connect within this time, else it is
    /// closed (after ICReq with a C2HTermReq, PDU Sequence Error). Linux hosts connect all
    /// queues within milliseconds; the default (10 s) matches Linux nvmet's TLS
    /// handshake timeout.
    pub handshake_timeout_ms: u32,
    /// Opt-in busy polling (`blockdev::BusyPoll`): a connection that made progress keeps
    /// polling its socket for this long before it sleeps; 0 (the default) never polls.
    /// Lower latency at low queue depth for a core spent while I/O flows; the runtime
    /// needs a single worker thread for it to help.
    pub busy_poll_us: u32,
    /// What the discovery controller reports itself as (Identify Controller DCTYPE).
    pub discovery_controller_type: DiscoveryControllerType,
}

/// The kind of discovery controller a target runs (TP 8010 DCTYPE). Nodes leave it
/// unreported; a central discovery controller (`control::cdc`) says so, and Linux shows it
/// in `/sys/class/nvme/nvmeX/dctype`. Neither accepts Discovery Information Management
/// (registration) commands: a CDC here learns the cluster from its metadata store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiscoveryControllerType {
    #[default]
    NotReported,
    /// Lists the subsystems of its own target (a storage or processor node).
    Direct,
    /// Lists subsystems it does not host (through a [`crate::DiscoveryLogSource`]).
    Central,
}

impl DiscoveryControllerType {
    /// The DCTYPE byte of Identify Controller.
    pub fn dctype(self) -> u8 {
        use nvme_proto::identify::controller::bits;
        match self {
            DiscoveryControllerType::NotReported => bits::DCTYPE_NOT_REPORTED,
            DiscoveryControllerType::Direct => bits::DCTYPE_DDC,
            DiscoveryControllerType::Central => bits::DCTYPE_CDC,
        }
    }
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            cntlid_min: 1,
            cntlid_max: 0xFFEF,
            mdts_bytes: 4 << 20,
            in_capsule_bytes: 16 << 10,
            maxh2cdata_bytes: 128 << 10,
            c2h_chunk_bytes: 128 << 10,
            max_io_queues: 64,
            mqes: 127,
            default_kato_ms: 0,
            max_r2t_buffer_bytes: 32 << 20,
            model: "Ferrobay NVMe/TCP".to_string(),
            firmware: env!("CARGO_PKG_VERSION").to_string(),
            serial_prefix: "FB".to_string(),
            ieee_oui: [0, 0, 0],
            preempt_abort_timeout_ms: 10_000,
            max_connections_per_listener: 16_384,
            max_connections_per_host: 4096,
            handshake_timeout_ms: 10_000,
            busy_poll_us: 0,
            discovery_controller_type: DiscoveryControllerType::NotReported,
        }
    }
}

impl TargetConfig {
    /// Checks the limits the Linux host and the spec impose.
    pub fn validate(&self) -> Result<(), crate::TargetError> {
        let bad = |what: &'static str| Err(crate::TargetError::InvalidConfig(what));
        if self.cntlid_min == 0 || self.cntlid_min > self.cntlid_max || self.cntlid_max > 0xFFEF {
            return bad("cntlid range must lie in 1..=0xFFEF");
        }
        if self.mdts_bytes < PAGE_BYTES || !self.mdts_bytes.is_power_of_two() {
            return bad("mdts_bytes must be a power of two ≥ 4096");
        }
        if self.in_capsule_bytes < ADMIN_IN_CAPSULE_BYTES
            || !self.in_capsule_bytes.is_multiple_of(16)
        {
            return bad("in_capsule_bytes must be ≥ 8192 and a multiple of 16");
        }
        if self.in_capsule_bytes > (1 << 20) {
            return bad("in_capsule_bytes must be ≤ 1 MiB");
        }
        if self.maxh2cdata_bytes < MIN_MAXH2CDATA_BYTES
            || !self.maxh2cdata_bytes.is_multiple_of(4)
            || self.maxh2cdata_bytes > (16 << 20)
        {
            return bad("maxh2cdata_bytes must be in 4096..=16 MiB and a multiple of 4");
        }
        if self.c2h_chunk_bytes < 4096 || !self.c2h_chunk_bytes.is_multiple_of(4) {
            return bad("c2h_chunk_bytes must be ≥ 4096 and a multiple of 4");
        }
        if self.mqes < 127 {
            return bad("mqes must be ≥ 127");
        }
        if self.max_io_queues == 0 {
            return bad("max_io_queues must be ≥ 1");
        }
        if self.preempt_abort_timeout_ms == 0 {
            return bad("preempt_abort_timeout_ms must be ≥ 1");
        }
        if self.max_connections_per_listener == 0 || self.max_connections_per_host == 0 {
            return bad("max_connections_per_listener and max_connections_per_host must be ≥ 1");
        }
        if self.handshake_timeout_ms == 0 {
            return bad("handshake_timeout_ms must be ≥ 1");
        }
        if self.busy_poll_us > blockdev::MAX_BUSY_POLL_US {
            return bad("busy_poll_us must be at most 1000000 (one second)");
        }
        Ok(())
    }

    /// MDTS as Identify reports it: a power of two in units of the 4 KiB minimum page.
    pub fn mdts_field(&self) -> u8 {
        (self.mdts_bytes / PAGE_BYTES).trailing_zeros() as u8
    }
}

/// One NVM subsystem.
#[derive(Clone, Debug)]
pub struct SubsystemConfig {
    pub nqn: String,
    /// Serial number (≤ 20 ASCII characters); empty for a generated one.
    pub serial: String,
    /// Model number; empty for the target's model.
    pub model: String,
    /// When true every host may connect; otherwise only `allowed_hosts`.
    pub allow_any_host: bool,
    pub allowed_hosts: Vec<String>,
}

impl SubsystemConfig {
    pub fn new(nqn: impl Into<String>) -> Self {
        SubsystemConfig {
            nqn: nqn.into(),
            serial: String::new(),
            model: String::new(),
            allow_any_host: true,
            allowed_hosts: Vec::new(),
        }
    }
}

/// One namespace: a byte range of a block device.
#[derive(Clone)]
pub struct NamespaceConfig {
    /// 1-based namespace ID; 0 picks the lowest free one.
    pub nsid: u32,
    pub device: Arc<dyn BlockDevice>,
    /// Where the namespace starts on the device.
    pub offset_bytes: u64,
    /// Namespace size; a multiple of `block_size_bytes`.
    pub size_bytes: u64,
    /// LBA size: 512 or 4096, and a multiple of the device's logical block.
    pub block_size_bytes: u32,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    /// Attach to every controller of the subsystem (true) or to none until attached.
    pub attached: bool,
    /// Reservation state; `None` uses the target's factory
    /// ([`crate::Target::set_reservations_factory`]).
    pub reservations: Option<Arc<dyn crate::Reservations>>,
    /// ANA group ID, 1..=[`crate::ANA_MAX_GROUPS`] ([`DEFAULT_ANA_GROUP`] by default).
    /// Each listener holds a state per group ([`crate::Target::set_ana_state`]).
    pub ana_group: u32,
}

/// One Key Value namespace: keys and values in a [`crate::KvBackend`].
#[derive(Clone)]
pub struct KvNamespaceConfig {
    /// 1-based namespace ID; 0 picks the lowest free one.
    pub nsid: u32,
    pub backend: Arc<dyn crate::KvBackend>,
    /// Largest value (KV format 0 KVVML), 1 byte to the target's MDTS.
    pub max_value_bytes: u32,
    /// Most keys (MNKS; 0: not reported).
    pub max_keys: u64,
    /// Space the namespace occupies (for stats and Identify Controller TNVMCAP).
    pub size_bytes: u64,
    /// Name of what stores it (a drive), for stats.
    pub device: String,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub uuid: [u8; 16],
    /// Attach to every controller of the subsystem (true) or to none until attached.
    pub attached: bool,
    /// Reservation state; `None` uses the target's factory.
    pub reservations: Option<Arc<dyn crate::Reservations>>,
    pub ana_group: u32,
}

impl KvNamespaceConfig {
    /// A namespace over `backend` with random identifiers, attached to every host.
    pub fn new(nsid: u32, backend: Arc<dyn crate::KvBackend>, max_value_bytes: u32) -> Self {
        let (nguid, eui64, uuid) = random_ids();
        let u = backend.usage();
        KvNamespaceConfig {
            nsid,
            max_keys: u.max_keys,
            size_bytes: u.capacity_bytes,
            backend,
            max_value_bytes,
            device: "kv".to_string(),
            nguid,
            eui64,
            uuid,
            attached: true,
            reservations: None,
            ana_group: DEFAULT_ANA_GROUP,
        }
    }
}

impl std::fmt::Debug for KvNamespaceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvNamespaceConfig")
            .field("nsid", &self.nsid)
            .field("device", &self.device)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("max_keys", &self.max_keys)
            .field("ana_group", &self.ana_group)
            .finish()
    }
}

/// Random NGUID, EUI-64 (the NGUID's low half) and UUID for a new namespace.
fn random_ids() -> ([u8; 16], [u8; 8], [u8; 16]) {
    let uuid = *uuid::Uuid::new_v4().as_bytes();
    let mut nguid = *uuid::Uuid::new_v4().as_bytes();
    // NGUID must be non-zero; the random UUID practically guarantees it.
    nguid[0] |= 0x01;
    let mut eui64 = [0u8; 8];
    eui64.copy_from_slice(&nguid[8..16]);
    (nguid, eui64, uuid)
}

/// The ANA group of namespaces that name none.
pub const DEFAULT_ANA_GROUP: u32 = 1;

impl NamespaceConfig {
    /// A namespace spanning the whole device with its logical block size and random IDs.
    pub fn whole_device(nsid: u32, device: Arc<dyn BlockDevice>) -> Self {
        let info = device.info();
        let block_size_bytes = if info.logical_block_bytes == 4096 {
            4096
        } else {
            512
        };
        let size_bytes = info.size_bytes - info.size_bytes % u64::from(block_size_bytes);
        let (nguid, eui64, uuid) = random_ids();
        NamespaceConfig {
            nsid,
            device,
            offset_bytes: 0,
            size_bytes,
            block_size_bytes,
            nguid,
            eui64,
            uuid,
            attached: true,
            reservations: None,
            ana_group: DEFAULT_ANA_GROUP,
        }
    }

    /// The same namespace in ANA group `group`.
    pub fn with_ana_group(mut self, group: u32) -> Self {
        self.ana_group = group;
        self
    }
}

impl std::fmt::Debug for NamespaceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceConfig")
            .field("nsid", &self.nsid)
            .field("device", &self.device.info().name)
            .field("offset_bytes", &self.offset_bytes)
            .field("size_bytes", &self.size_bytes)
            .field("block_size_bytes", &self.block_size_bytes)
            .field("ana_group", &self.ana_group)
            .finish()
    }
}
