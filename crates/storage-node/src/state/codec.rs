//! The state file's byte layout: a 32-byte header and a JSON body, checksummed with CRC32C.
//!
//! ```text
//! offset size field
//!  0      8   magic "FBNODEST"
//!  8      4   format version, u32 LE (FORMAT_VERSION; 1 to 6 are read)
//! 12      4   reserved, zero
//! 16      8   generation, u64 LE (1 for the first save, +1 per save)
//! 24      4   body length in bytes, u32 LE
//! 28      4   CRC32C (Castagnoli) of bytes 0..28 followed by the body, u32 LE
//! 32      n   body: UTF-8 JSON of NodeState
//! ```

use super::NodeState;

pub const MAGIC: [u8; 8] = *b"FBNODEST";
/// The version this program writes. 2 added namespace kinds (Key Value namespaces):
/// a version 1 program must not read a KV namespace's store as blocks. 3 added QoS
/// limits: a version 2 program would drop them silently and destroy them at its next save.
/// 4 added DH-HMAC-CHAP hosts: a version 3 program would let those hosts in unauthenticated.
/// 5 added TLS PSK hosts: a version 4 program would let those hosts in over plain TCP.
/// 6 added secure channel concatenation (`concat` of a DH-HMAC-CHAP host): a version 5
/// program would let those hosts do I/O over plain TCP.
pub const FORMAT_VERSION: u32 = 6;
/// The oldest version this program reads (every version since 1: a v1 body is a v2 body
/// whose namespaces are all NVM, a v2 body a v3 body without QoS limits).
pub const OLDEST_READ_VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 32;
/// A body above this is refused on both save and load (the state is small: kilobytes).
pub const MAX_BODY_BYTES: usize = 64 << 20;

const _: () = assert!(MAX_BODY_BYTES <= u32::MAX as usize);
const _: () = assert!(HEADER_BYTES == 8 + 4 + 4 + 8 + 4 + 4);

/// Why bytes are not a valid state file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("file is {0} bytes, shorter than the {HEADER_BYTES}-byte header")]
    Short(usize),
    #[error("bad magic (not a ferrobay node state file)")]
    Magic,
    #[error(
        "format version {found} is newer than this program supports ({FORMAT_VERSION}); upgrade ferrobay"
    )]
    Newer { found: u32 },
    #[error("unknown format version {0}")]
    UnknownVersion(u32),
    #[error("length mismatch: header says {body_bytes} body bytes, file has {actual_bytes}")]
    Length { body_bytes: u64, actual_bytes: u64 },
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { stored: u32, computed: u32 },
    #[error("bad body: {0}")]
    Body(String),
}

impl DecodeError {
    /// A newer format is not corruption: the caller must not fall back past it.
    pub fn is_newer(&self) -> bool {
        matches!(self, DecodeError::Newer { .. })
    }
}

/// A decoded state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    pub generation: u64,
    pub state: NodeState,
}

/// Encodes `state` as generation `generation`.
pub fn encode(state: &NodeState, generation: u64) -> Result<Vec<u8>, String> {
    let body = serde_json::to_vec_pretty(state).map_err(|e| e.to_string())?;
    if body.len() > MAX_BODY_BYTES {
        return Err(format!(
            "state body of {} bytes exceeds {MAX_BODY_BYTES}",
            body.len()
        ));
    }
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    // Cannot truncate: checked against MAX_BODY_BYTES above.
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&out), &body);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decodes and verifies a state file. Never panics on any input.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    if bytes.len() < HEADER_BYTES {
        return Err(DecodeError::Short(bytes.len()));
    }
    let (header, body) = bytes.split_at(HEADER_BYTES);
    if header[..8] != MAGIC {
        return Err(DecodeError::Magic);
    }
    let version = le_u32(header, 8);
    let body_bytes = le_u32(header, 24);
    let stored = le_u32(header, 28);
    // Checksum first: a torn or bit-flipped file must read as corrupt, not as "newer".
    if u64::from(body_bytes) != body.len() as u64 {
        return Err(DecodeError::Length {
            body_bytes: u64::from(body_bytes),
            actual_bytes: body.len() as u64,
        });
    }
    let computed = crc32c::crc32c_append(crc32c::crc32c(&header[..28]), body);
    if computed != stored {
        return Err(DecodeError::Checksum { stored, computed });
    }
    if version > FORMAT_VERSION {
        return Err(DecodeError::Newer { found: version });
    }
    if version < OLDEST_READ_VERSION || le_u32(header, 12) != 0 {
        return Err(DecodeError::UnknownVersion(version));
    }
    let generation = le_u64(header, 16);
    let state: NodeState =
        serde_json::from_slice(body).map_err(|e| DecodeError::Body(e.to_string()))?;
    state.validate().map_err(DecodeError::Body)?;
    if version < 2 && state.namespaces.iter().any(|n| n.kind.is_kv()) {
        return Err(DecodeError::Body(
            "a version 1 state names a Key Value namespace".into(),
        ));
    }
    if version < 3 && !state.qos.is_empty() {
        return Err(DecodeError::Body(format!(
            "a version {version} state holds QoS limits"
        )));
    }
    if version < 4 && state.subsystems.iter().any(|s| !s.dhchap.is_empty()) {
        return Err(DecodeError::Body(format!(
            "a version {version} state holds DH-HMAC-CHAP hosts"
        )));
    }
    if version < 5 && state.subsystems.iter().any(|s| !s.tls_psks.is_empty()) {
        return Err(DecodeError::Body(format!(
            "a version {version} state holds TLS PSK hosts"
        )));
    }
    if version < 6
        && state
            .subsystems
            .iter()
            .any(|s| s.dhchap.iter().any(|d| d.concat))
    {
        return Err(DecodeError::Body(format!(
            "a version {version} state holds secure channel concatenation hosts"
        )));
    }
    Ok(Decoded { generation, state })
}
