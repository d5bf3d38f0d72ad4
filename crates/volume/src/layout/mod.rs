//! Layout math as pure functions: RAID-0/1/10 (md "near") and rotating-parity
//! RAID-5/6 and k+m (md left-symmetric).

mod geometry;
mod params;

pub use geometry::{Geometry, MemberExtent, Piece, Role, Unmapped};
pub use params::{
    DEFAULT_STRIPE_UNIT_BYTES, Family, LayoutError, LayoutParams, Level, LevelSpec, MAX_PARITY,
    MAX_SLOTS, MAX_STRIPE_UNIT_BYTES, STRIPE_UNIT_ALIGN_BYTES,
};
