//! blockdev
