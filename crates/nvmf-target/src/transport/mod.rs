//! NVMe/TCP transport: one task per connection, PDU receive/send buffers.

pub(crate) mod conn;
pub(crate) mod handle;
pub(crate) mod rx;
pub(crate) mod tx;
