//! NVMe over Fabrics commands (NVMe-oF 1.1, NVMe Base 2.0 "Fabrics Command Set"): Connect and its data,
//! Property Get/Set with the controller registers they reach, Disconnect, and NQNs.
//!
//! All fabrics commands use opcode 0x7F with the command type (FCTYPE) at SQE byte 4;
//! see [`crate::opcode::fctype`].

pub mod connect;
pub mod nqn;
pub mod property;
pub mod regs;

pub use connect::{
    ConnectCommand, ConnectData, ConnectResponse, Disconnect, InvalidParameter, connect_data_off,
    connect_sqe_off,
};
pub use nqn::{DISCOVERY_NQN, NQN_FIELD_BYTES, NQN_MAX_BYTES, NqnError, validate_nqn};
pub use property::{PropertyGet, PropertySet, PropertySize};
pub use regs::{Cap, Cc, Crto, Csts, Vs, reg};

/// Controller ID a host sends in Connect data on the admin queue to ask for any
/// (dynamically allocated) controller.
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// Lowest controller ID valid on fabrics (0 is reserved).
pub const CNTLID_MIN: u16 = 0x0001;
/// Highest controller ID a subsystem may allocate (0xFFF0..0xFFFF are reserved).
pub const CNTLID_MAX: u16 = 0xFFEF;
