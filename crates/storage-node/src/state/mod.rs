//! The node's persistent state in its data dir: types, file format and update protocol.

pub mod codec;
#[cfg(test)]
mod crashsim;
mod hex;
mod store;
#[cfg(test)]
mod tests;
mod types;

pub use codec::{DecodeError, FORMAT_VERSION, OLDEST_READ_VERSION};
pub use hex::{decode as hex_decode, encode as hex_encode};
pub use store::{
    CURRENT_FILE, DataDirLock, FsStore, LOCK_FILE, LoadSource, Loaded, PREVIOUS_FILE, StateError,
    StateFile, StateStore, TEMP_FILE,
};
pub use types::{
    Attachment, DhchapHostRecord, DriveRecord, Extent, KvParams, NamespaceKind, NamespaceRecord,
    NodeState, QosRecord, Registrant, ReservationState, SmartCounters, SubsystemRecord,
    TlsPskHostRecord,
};
