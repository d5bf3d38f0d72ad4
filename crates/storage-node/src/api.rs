//! JSON types of the node's control API, shared by the HTTP server and the client the
//! `ferrobay node ...` commands use. Sizes are bytes; identifiers are lower-case hex.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::state::Extent;

mod telemetry;

pub use self::telemetry::{
    DrivePrediction, DriveTelemetry, ErrorCountsView, IoTelemetry, LatencyView, MediaView,
    NamespaceTelemetry, OpClassView, Prediction, PredictionReason, PredictionReport,
    TelemetryReport,
};

/// Suggested HTTP port of a node (`/metrics` and this API), used by `ferrobay node ...`
/// when no address is given.
pub const DEFAULT_HTTP_PORT: u16 = 9420;

/// Version prefix of every control API path.
pub const API_PREFIX: &str = "/api/v1";

/// The node itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeInfo {
    pub name: String,
    pub uuid: String,
    /// NVMe/TCP listeners (I/O and discovery).
    pub nvme_listeners: Vec<String>,
    /// The discovery-only listener (port 8009 by default), if separate.
    pub discovery_listener: Option<String>,
    pub http_listener: Option<String>,
    pub state_generation: u64,
}

/// Which hosts see a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AttachmentView {
    /// Every host, present and future.
    pub all: bool,
    /// Otherwise these host NQNs.
    #[serde(default)]
    pub hosts: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NamespaceView {
    pub subsystem_nqn: String,
    pub nsid: u32,
    /// Name of the drive it lives on (`d0`, ...).
    pub drive: String,
    pub size_bytes: u64,
    pub block_size_bytes: u32,
    pub extents: Vec<Extent>,
    pub nguid: String,
    pub eui64: String,
    pub uuid: String,
    pub attachment: AttachmentView,
    pub created_unix_ms: u64,
    /// Command set: `nvm` (blocks) or `kv` (Key Value).
    #[serde(default = "nvm_kind")]
    pub kind: String,
    /// A Key Value namespace's format and usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvNamespaceView>,
}

fn nvm_kind() -> String {
    "nvm".to_string()
}

/// A Key Value namespace: how its store was formatted and what it holds now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KvNamespaceView {
    /// Largest value, bytes.
    pub max_value_bytes: u32,
    /// Most keys.
    pub max_keys: u64,
    pub segment_bytes: u32,
    /// "ok", or why the store is not serving (it could not be opened).
    pub status: String,
    pub key_count: u64,
    /// Bytes the live values take in the log (Identify NUSE).
    pub used_bytes: u64,
    /// Bytes of values the store accepts (Identify NSZE).
    pub capacity_bytes: u64,
    /// Overwritten and deleted values not yet compacted away.
    pub garbage_bytes: u64,
}

/// `POST /api/v1/namespaces`. Give the subsystem or the drive (its default subsystem).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateNamespaceRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subsystem_nqn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drive: Option<String>,
    pub size_bytes: u64,
    /// 512 or 4096; default: the drive's (512 unless 4K-native).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size_bytes: Option<u32>,
    /// Default: the lowest free NSID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    /// Default (`None`): attached to every host. `Some` with `all: false`: only these hosts
    /// (none = created detached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach: Option<AttachmentView>,
    /// A Key Value namespace (`None`: NVM). Its size is rounded up to whole MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvCreateOptions>,
}

/// Format parameters of a new Key Value namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KvCreateOptions {
    /// Largest value, bytes: 1 to the node's MDTS (4 MiB); default 2 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_value_bytes: Option<u32>,
    /// Most keys; default one per 8 KiB of the namespace (at least 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_keys: Option<u64>,
}

/// `POST .../attach` and `POST .../detach`: every host (`all`) or the listed host NQNs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachRequest {
    #[serde(default)]
    pub all: bool,
    #[serde(default)]
    pub hosts: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubsystemView {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    pub drive: String,
    pub allow_any_host: bool,
    pub allowed_hosts: Vec<String>,
    /// Hosts that must authenticate with DH-HMAC-CHAP (their secrets are never shown).
    #[serde(default)]
    pub dhchap_hosts: Vec<String>,
    pub namespaces: Vec<u32>,
    /// Controllers connected now: (cntlid, host NQN).
    #[schema(value_type = Vec<Vec<Object>>)]
    pub controllers: Vec<(u16, String)>,
}

/// `POST /api/v1/subsystems/{nqn}/hosts`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HostRequest {
    pub host_nqn: String,
    /// The host's DH-HMAC-CHAP secret (`DHHC-1:..`): the host must then authenticate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_secret: Option<String>,
    /// The controller's secret, for hosts that authenticate the controller too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dhchap_ctrl_secret: Option<String>,
    /// Accepted hash functions, preferred first (default: sha256, sha384, sha512).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhchap_hashes: Vec<String>,
    /// Accepted DH groups, preferred first (default: ffdhe2048..ffdhe8192, null).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhchap_dhgroups: Vec<String>,
    /// Secure channel concatenation: the host authenticates on a plain-TCP admin queue,
    /// then connects over TLS (a TLS listener) with the PSK that generated. Needs
    /// `dhchap_secret`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dhchap_concat: bool,
    /// The host's configured TLS PSK (`NVMeTLSkey-1:..`): the host must then connect over
    /// TLS (a TLS listener).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_psk: Option<String>,
}

impl std::fmt::Debug for HostRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRequest")
            .field("host_nqn", &self.host_nqn)
            .field(
                "dhchap_secret",
                &self.dhchap_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "dhchap_ctrl_secret",
                &self.dhchap_ctrl_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("tls_psk", &self.tls_psk.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl HostRequest {
    pub fn new(host_nqn: &str) -> Self {
        HostRequest {
            host_nqn: host_nqn.to_string(),
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
            dhchap_hashes: Vec::new(),
            dhchap_dhgroups: Vec::new(),
            dhchap_concat: false,
            tls_psk: None,
        }
    }
}

/// `PUT /api/v1/subsystems/{nqn}/allow_any_host`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllowAnyHostRequest {
    pub allow_any_host: bool,
}

/// SMART-like summary of one drive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DriveHealth {
    pub name: String,
    pub spec: String,
    pub uuid: String,
    pub serial: String,
    pub kind: String,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub namespaces: u32,
    /// "ok", or why not (e.g. media errors seen).
    pub status: String,
    /// Host commands through the target, summed over the drive's namespaces.
    pub host_read_commands: u64,
    pub host_write_commands: u64,
    /// SMART data units (1000 × 512 bytes, rounded up).
    pub data_units_read: u64,
    pub data_units_written: u64,
    pub command_errors: u64,
    /// Key Value namespaces on the drive and what their stores hold.
    #[serde(default)]
    pub kv_namespaces: u32,
    #[serde(default)]
    pub kv_keys: u64,
    #[serde(default)]
    pub kv_used_bytes: u64,
    #[serde(default)]
    pub kv_capacity_bytes: u64,
    /// From the drive itself (all I/O since the node started).
    pub device_read_ops: u64,
    pub device_write_ops: u64,
    pub device_read_bytes: u64,
    pub device_write_bytes: u64,
    pub device_flushes: u64,
    pub media_errors: u64,
    /// The failure-prediction grade (`docs/prediction.md`); absent until the drive was
    /// graded once (a second after the node started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<Prediction>,
}

/// `GET /api/v1/health`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HealthReport {
    pub node_name: String,
    pub uptime_seconds: u64,
    pub power_cycles: u64,
    pub power_on_hours: u64,
    pub unsafe_shutdowns: u64,
    pub controller_busy_minutes: u64,
    pub error_log_entries: u64,
    pub connections: u64,
    pub drives: Vec<DriveHealth>,
}

/// Body of every error response.
pub use httpapi::ErrorBody;

/// One QoS limit: its key (a subsystem; one namespace of it or all; one host or all),
/// its limits and what it did (`docs/qos.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QosEntry {
    pub subsystem_nqn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_nqn: Option<String>,
    #[serde(flatten)]
    pub limits: nvmf_target::QosLimits,
    /// What the limit did since the node started (in answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<QosEntryStats>,
}

/// Commands through one limit and those it made wait.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QosEntryStats {
    pub commands: u64,
    pub bytes: u64,
    pub throttled_commands: u64,
    pub throttled_seconds: f64,
}

/// A namespace the contention controller caps now, so that minimums elsewhere are met.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QosCapView {
    pub subsystem_nqn: String,
    pub nsid: u32,
    pub cap_iops: Option<u64>,
    pub cap_bytes_per_s: Option<u64>,
    pub measured_iops: f64,
    pub measured_bytes_per_s: f64,
    pub throttled_commands: u64,
    pub throttled_seconds: f64,
}

/// `GET /api/v1/qos`: every limit, and the caps in force.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct QosList {
    pub limits: Vec<QosEntry>,
    #[serde(default)]
    pub caps: Vec<QosCapView>,
}

/// QoS limits as a request sets them (`PUT` of a node's or a volume's limits): every limit
/// of the key, absent ones not limited (`{}` clears the key). Unknown fields are refused:
/// a misspelt limit must not silently clear one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QosLimitsRequest {
    /// Most commands per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iops: Option<u64>,
    /// Most data bytes per second (reads and writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_s: Option<u64>,
    /// Commands let through at once after an idle spell (default: a tenth of `max_iops`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_ios: Option<u64>,
    /// Bytes let through at once after an idle spell (default: a tenth of
    /// `max_bytes_per_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_bytes: Option<u64>,
    /// Commands per second guaranteed when the node is saturated (a namespace or volume
    /// as a whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_iops: Option<u64>,
    /// Bytes per second guaranteed when the node is saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_bytes_per_s: Option<u64>,
}

impl From<QosLimitsRequest> for nvmf_target::QosLimits {
    fn from(r: QosLimitsRequest) -> Self {
        nvmf_target::QosLimits {
            max_iops: r.max_iops,
            max_bytes_per_s: r.max_bytes_per_s,
            burst_ios: r.burst_ios,
            burst_bytes: r.burst_bytes,
            min_iops: r.min_iops,
            min_bytes_per_s: r.min_bytes_per_s,
        }
    }
}

impl From<nvmf_target::QosLimits> for QosLimitsRequest {
    fn from(l: nvmf_target::QosLimits) -> Self {
        QosLimitsRequest {
            max_iops: l.max_iops,
            max_bytes_per_s: l.max_bytes_per_s,
            burst_ios: l.burst_ios,
            burst_bytes: l.burst_bytes,
            min_iops: l.min_iops,
            min_bytes_per_s: l.min_bytes_per_s,
        }
    }
}

/// `POST /api/v1/node/upgrade` (storage and processor nodes): the binary the node
/// re-executes itself as (docs/upgrade.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UpgradeRequestBody {
    /// Absolute path of the new `ferrobay` binary on the node's machine.
    pub binary: String,
    /// Processor nodes: upgrade even while owning volumes (their hosts then wait for a
    /// takeover). Without it, a processor node that owns volumes refuses.
    #[serde(default)]
    pub force: bool,
}

/// A build: its version and the cluster protocols it speaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BuildView {
    pub version: String,
    pub protocol: u32,
    pub oldest_protocol: u32,
}

impl From<release::BuildInfo> for BuildView {
    fn from(b: release::BuildInfo) -> Self {
        BuildView {
            version: b.version,
            protocol: b.protocol,
            oldest_protocol: b.oldest_protocol,
        }
    }
}

/// The answer to an accepted upgrade: the node stops cleanly and re-executes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UpgradeAccepted {
    pub node: String,
    pub from: BuildView,
    pub to: BuildView,
}
