//! nvme-proto
