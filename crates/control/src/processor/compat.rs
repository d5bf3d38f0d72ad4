//! The block errors of fencing, in one place.

use blockdev::BlockError;

/// What a fenced member I/O fails with.
pub(crate) fn fenced_error() -> BlockError {
    BlockError::ReservationConflict
}

/// What host I/O to a volume that is not served here fails with (the target turns it
/// into the ANA Inaccessible path status, so multipath hosts retry on another path).
pub(crate) fn unavailable(why: &str) -> BlockError {
    BlockError::Unavailable(format!("not served here: {why}"))
}

/// The dedicated Reservation Conflict variant.
pub(crate) fn is_conflict_variant(e: &BlockError) -> bool {
    matches!(e, BlockError::ReservationConflict)
}
