//! Store, Retrieve, List, Delete and Exist: typed decode and encode of the 64-byte SQE
//! (KV Command Set 1.0, "Store command", "Retrieve command", "List command", "Delete
//! command", "Exist command").
//!
//! | command | CDW10 | CDW11 7:0 | CDW11 15:8 | data |
//! |---|---|---|---|---|
//! | Store 01h | value size, bytes | KL | store option: 0 SIKE, 1 SINKE, 2 no compression | value, host to controller |
//! | Retrieve 02h | host buffer size, bytes | KL | retrieve option: 0 raw | value, controller to host; DW0 = value size |
//! | List 06h | host buffer size, bytes | KL, 0 = from the first key | reserved | key list ([`super::list`]) |
//! | Delete 10h | reserved | KL | reserved | none |
//! | Exist 14h | reserved | KL | reserved | none |
//!
//! The key is in CDW2-3 and CDW14-15 ([`super::key`]); CDW11 bits 31:16 are reserved.
//!
//! [`KvCommand::decode`] checks, in this order, and answers each failure with DNR set:
//! 1. the opcode is one of the five: else Invalid Command Opcode (byte 0);
//! 2. FUSE (byte 1, bits 1:0) is 0, as the KV command set has no fused operations: else
//!    Invalid Field in Command (byte 1);
//! 3. KL ≤ 16: else Invalid Field in Command (byte 44) — KL is defined for 1..16 only;
//! 4. KL ≠ 0 except for List: else Invalid Key Size (byte 44);
//! 5. not both SIKE and SINKE, no reserved option bit: else Invalid Field (byte 45);
//! 6. CDW11 bits 31:16 clear: else Invalid Field (byte 46).
//!
//! Limits that depend on the namespace (KVKML, KVVML) are checked with
//! [`super::KvFormat::check`].

use crate::command::Command;
use crate::completion::Completion;
use crate::opcode::{DataDirection, direction, kv};
use crate::status::Status;

use super::key::{KL_SQE_BYTE, KvKey};

/// SQE byte of FUSE (bits 1:0) and PSDT.
pub const FUSE_SQE_BYTE: usize = 1;
/// SQE byte of the store / retrieve option (CDW11 bits 15:8).
pub const OPTION_SQE_BYTE: usize = 45;
/// First SQE byte of CDW11 bits 31:16 (reserved).
pub const CDW11_RESERVED_SQE_BYTE: usize = 46;

const _: () = assert!(KL_SQE_BYTE == 4 * 11 && OPTION_SQE_BYTE == KL_SQE_BYTE + 1);

/// Store option bits (CDW11 bits 15:8 of Store).
pub mod store_option {
    /// SIKE, "store if key exists": store only if the key exists (an overwrite);
    /// an absent key fails with KV Key Does Not Exist.
    pub const SIKE: u8 = 1 << 0;
    /// SINKE, "store if no key exists": store only if the key does not exist (a create);
    /// a present key fails with Key Exists.
    pub const SINKE: u8 = 1 << 1;
    /// The controller shall not compress the value. A hint: Ferrobay never compresses.
    /// (xNVMe names this bit `COMPRESS`; SPDK's KV header and FEMU call it "no
    /// compression".)
    pub const NO_COMPRESSION: u8 = 1 << 2;
    /// Every bit the command set defines; the others are reserved.
    pub const DEFINED: u8 = SIKE | SINKE | NO_COMPRESSION;
}

/// Retrieve option bits (CDW11 bits 15:8 of Retrieve).
pub mod retrieve_option {
    /// Return the value as stored, without decompressing it. Ferrobay stores values
    /// uncompressed, so raw and decompressed reads are the same bytes.
    pub const RAW: u8 = 1 << 0;
    /// Every bit the command set defines; the others are reserved.
    pub const DEFINED: u8 = RAW;
}

/// When a Store may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StoreMode {
    /// Create or overwrite.
    #[default]
    Always,
    /// Overwrite only (SIKE): an absent key fails with KV Key Does Not Exist.
    OnlyIfExists,
    /// Create only (SINKE): a present key fails with Key Exists.
    OnlyIfAbsent,
}

impl StoreMode {
    const fn option_bits(self) -> u8 {
        match self {
            StoreMode::Always => 0,
            StoreMode::OnlyIfExists => store_option::SIKE,
            StoreMode::OnlyIfAbsent => store_option::SINKE,
        }
    }
}

/// A Key Value command, decoded from or to be encoded into an SQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvCommand {
    /// Store `value_size_bytes` bytes (the data) under `key`.
    Store {
        key: KvKey,
        value_size_bytes: u32,
        mode: StoreMode,
        /// Store option bit 2: the host asks that the value not be compressed.
        no_compression: bool,
    },
    /// Read the value of `key` into a host buffer of `host_buffer_bytes`. The controller
    /// transfers min(value size, buffer) bytes and reports the whole value size in DW0.
    Retrieve {
        key: KvKey,
        host_buffer_bytes: u32,
        /// Retrieve option bit 0: return the value as stored (not decompressed).
        raw: bool,
    },
    /// List keys, starting at `start` (inclusive) or at the first key when `None` (KL 0),
    /// into a host buffer of `host_buffer_bytes`.
    List {
        start: Option<KvKey>,
        host_buffer_bytes: u32,
    },
    /// Remove `key` and its value.
    Delete { key: KvKey },
    /// Succeeds if `key` exists, else KV Key Does Not Exist.
    Exist { key: KvKey },
}

/// Why an SQE is not a valid KV command: the status to complete it with, the SQE byte
/// of the offending field (for the Error Information log's parameter error location),
/// and a reason for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid KV command: {reason} (SQE byte {sqe_byte}, status {status})")]
pub struct KvCommandError {
    pub status: Status,
    pub sqe_byte: u16,
    pub reason: &'static str,
}

impl KvCommandError {
    const fn new(status: Status, sqe_byte: usize, reason: &'static str) -> Self {
        KvCommandError {
            status: status.dnr(),
            sqe_byte: sqe_byte as u16,
            reason,
        }
    }
}

impl From<KvCommandError> for Status {
    fn from(e: KvCommandError) -> Status {
        e.status
    }
}

impl KvCommand {
    /// Decodes a KV I/O command (opcodes 01h, 02h, 06h, 10h, 14h) from `c`. Flush and the
    /// reservation commands, which the KV command set shares with NVM, are not KV
    /// commands here and get Invalid Command Opcode like any other opcode.
    pub fn decode(c: &Command) -> Result<KvCommand, KvCommandError> {
        let op = c.opcode();
        if !matches!(
            op,
            kv::STORE | kv::RETRIEVE | kv::LIST | kv::DELETE | kv::EXIST
        ) {
            return Err(KvCommandError::new(
                Status::INVALID_OPCODE,
                0,
                "not a Key Value command opcode",
            ));
        }
        if c.fuse() != 0 {
            return Err(KvCommandError::new(
                Status::INVALID_FIELD,
                FUSE_SQE_BYTE,
                "fused operation on a Key Value command",
            ));
        }
        let cdw10 = c.cdw10();
        let cdw11 = c.cdw11();
        let kl = (cdw11 & 0xFF) as usize;
        let option = (cdw11 >> 8) as u8;
        if kl > KvKey::MAX_BYTES {
            return Err(KvCommandError::new(
                Status::INVALID_FIELD,
                KL_SQE_BYTE,
                "key length above 16",
            ));
        }
        let key = KvKey::read_from(c, kl);
        let require_key = || {
            key.ok_or(KvCommandError::new(
                Status::KV_INVALID_KEY_SIZE,
                KL_SQE_BYTE,
                "key length 0",
            ))
        };
        let defined_options = match op {
            kv::STORE => store_option::DEFINED,
            kv::RETRIEVE => retrieve_option::DEFINED,
            _ => 0,
        };
        let cmd = match op {
            kv::STORE => KvCommand::Store {
                key: require_key()?,
                value_size_bytes: cdw10,
                mode: match option & (store_option::SIKE | store_option::SINKE) {
                    0 => StoreMode::Always,
                    store_option::SIKE => StoreMode::OnlyIfExists,
                    store_option::SINKE => StoreMode::OnlyIfAbsent,
                    _ => {
                        return Err(KvCommandError::new(
                            Status::INVALID_FIELD,
                            OPTION_SQE_BYTE,
                            "store options SIKE and SINKE both set",
                        ));
                    }
                },
                no_compression: option & store_option::NO_COMPRESSION != 0,
            },
            kv::RETRIEVE => KvCommand::Retrieve {
                key: require_key()?,
                host_buffer_bytes: cdw10,
                raw: option & retrieve_option::RAW != 0,
            },
            kv::LIST => KvCommand::List {
                start: key,
                host_buffer_bytes: cdw10,
            },
            kv::DELETE => KvCommand::Delete {
                key: require_key()?,
            },
            _ => KvCommand::Exist {
                key: require_key()?,
            },
        };
        if option & !defined_options != 0 {
            return Err(KvCommandError::new(
                Status::INVALID_FIELD,
                OPTION_SQE_BYTE,
                "reserved option bit set",
            ));
        }
        if cdw11 >> 16 != 0 {
            return Err(KvCommandError::new(
                Status::INVALID_FIELD,
                CDW11_RESERVED_SQE_BYTE,
                "reserved bits 31:16 of CDW11 set",
            ));
        }
        Ok(cmd)
    }

    /// The SQE for this command with `cid` and `nsid`; the caller sets the data pointer
    /// (SGL1) for Store, Retrieve and List. Never allocates.
    pub fn to_command(&self, cid: u16, nsid: u32) -> Command {
        let mut c = Command::new(self.opcode(), cid, nsid);
        let (key, cdw10, option) = match *self {
            KvCommand::Store {
                key,
                value_size_bytes,
                mode,
                no_compression,
            } => (
                Some(key),
                value_size_bytes,
                mode.option_bits()
                    | if no_compression {
                        store_option::NO_COMPRESSION
                    } else {
                        0
                    },
            ),
            KvCommand::Retrieve {
                key,
                host_buffer_bytes,
                raw,
            } => (
                Some(key),
                host_buffer_bytes,
                if raw { retrieve_option::RAW } else { 0 },
            ),
            KvCommand::List {
                start,
                host_buffer_bytes,
            } => (start, host_buffer_bytes, 0),
            KvCommand::Delete { key } | KvCommand::Exist { key } => (Some(key), 0, 0),
        };
        c.set_cdw10(cdw10);
        c.set_cdw11(u32::from(option) << 8);
        if let Some(k) = key {
            k.write_to(&mut c);
        }
        c
    }

    pub const fn opcode(&self) -> u8 {
        match self {
            KvCommand::Store { .. } => kv::STORE,
            KvCommand::Retrieve { .. } => kv::RETRIEVE,
            KvCommand::List { .. } => kv::LIST,
            KvCommand::Delete { .. } => kv::DELETE,
            KvCommand::Exist { .. } => kv::EXIST,
        }
    }

    /// The key the command addresses (the start key for List, if any).
    pub const fn key(&self) -> Option<&KvKey> {
        match self {
            KvCommand::Store { key, .. }
            | KvCommand::Retrieve { key, .. }
            | KvCommand::Delete { key }
            | KvCommand::Exist { key } => Some(key),
            KvCommand::List { start, .. } => start.as_ref(),
        }
    }

    /// Bytes of data the command moves: the value for Store, the host buffer for
    /// Retrieve and List, none for Delete and Exist.
    pub const fn data_len_bytes(&self) -> u32 {
        match *self {
            KvCommand::Store {
                value_size_bytes, ..
            } => value_size_bytes,
            KvCommand::Retrieve {
                host_buffer_bytes, ..
            }
            | KvCommand::List {
                host_buffer_bytes, ..
            } => host_buffer_bytes,
            KvCommand::Delete { .. } | KvCommand::Exist { .. } => 0,
        }
    }

    /// The data direction, from the opcode's low two bits.
    pub const fn direction(&self) -> DataDirection {
        direction(self.opcode())
    }
}

/// The completion of a successful Retrieve: DW0 is the size of the whole value, which
/// tells a host whose buffer was too small how large a buffer to retry with.
pub const fn retrieve_completion(cid: u16, value_size_bytes: u32) -> Completion {
    let mut c = Completion::success(cid);
    c.dw0 = value_size_bytes;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::io;
    use proptest::prelude::*;

    fn key(b: &[u8]) -> KvKey {
        KvKey::new(b).unwrap()
    }

    /// A 64-byte SQE spelled out by hand from the spec tables.
    fn sqe(opcode: u8, cid: u16, nsid: u32, cdw10: u32, cdw11: u32, k: &[u8]) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0] = opcode;
        b[2..4].copy_from_slice(&cid.to_le_bytes());
        b[4..8].copy_from_slice(&nsid.to_le_bytes());
        let n = k.len().min(8);
        b[8..8 + n].copy_from_slice(&k[..n]);
        if k.len() > 8 {
            b[56..56 + k.len() - 8].copy_from_slice(&k[8..]);
        }
        b[40..44].copy_from_slice(&cdw10.to_le_bytes());
        b[44..48].copy_from_slice(&cdw11.to_le_bytes());
        b
    }

    #[test]
    fn store_bytes() {
        // Store, CID 7, NSID 2, 4096-byte value, 12-byte key, create only (SINKE):
        // byte 0 = 01h, CDW10 = 4096, CDW11 = KL 12 | SO 02h << 8.
        let c = KvCommand::Store {
            key: key(b"bucket/obj01"),
            value_size_bytes: 4096,
            mode: StoreMode::OnlyIfAbsent,
            no_compression: false,
        }
        .to_command(7, 2);
        let want = sqe(0x01, 7, 2, 4096, 0x0000_020C, b"bucket/obj01");
        assert_eq!(c.0, want);
        assert_eq!(&c.0[8..16], b"bucket/o");
        assert_eq!(&c.0[56..64], b"bj01\0\0\0\0");
        assert_eq!(&c.0[44..48], &[12, 0x02, 0, 0]);
        assert_eq!(
            KvCommand::decode(&Command(want)).unwrap().to_command(7, 2),
            c
        );
    }

    #[test]
    fn retrieve_list_delete_exist_bytes() {
        let r = KvCommand::Retrieve {
            key: key(b"k"),
            host_buffer_bytes: 0x1_0000,
            raw: true,
        };
        assert_eq!(
            r.to_command(1, 1).0,
            sqe(0x02, 1, 1, 0x1_0000, 0x0101, b"k")
        );
        let l = KvCommand::List {
            start: None,
            host_buffer_bytes: 4096,
        };
        assert_eq!(l.to_command(2, 1).0, sqe(0x06, 2, 1, 4096, 0, b""));
        let d = KvCommand::Delete {
            key: key(&[0xAA; 16]),
        };
        assert_eq!(d.to_command(3, 9).0, sqe(0x10, 3, 9, 0, 16, &[0xAA; 16]));
        let e = KvCommand::Exist { key: key(b"x") };
        assert_eq!(e.to_command(4, 9).0, sqe(0x14, 4, 9, 0, 1, b"x"));
        for cmd in [r, l, d, e] {
            assert_eq!(KvCommand::decode(&cmd.to_command(5, 6)), Ok(cmd));
        }
        assert_eq!(r.direction(), DataDirection::ControllerToHost);
        assert_eq!(d.data_len_bytes(), 0);
        assert_eq!(l.key(), None);
    }

    #[test]
    fn key_length_checks() {
        for op in [kv::STORE, kv::RETRIEVE, kv::DELETE, kv::EXIST] {
            let e = KvCommand::decode(&Command(sqe(op, 1, 1, 0, 0, b""))).unwrap_err();
            assert_eq!(e.status, Status::KV_INVALID_KEY_SIZE.dnr(), "op {op:#x}");
            assert_eq!(e.sqe_byte, 44);
            for kl in [17u32, 0xFF] {
                let e = KvCommand::decode(&Command(sqe(op, 1, 1, 0, kl, b""))).unwrap_err();
                assert_eq!(e.status, Status::INVALID_FIELD.dnr(), "op {op:#x} kl {kl}");
                assert_eq!(e.sqe_byte, 44);
            }
        }
        // List: KL 0 lists from the first key; KL 17 is still invalid.
        assert_eq!(
            KvCommand::decode(&Command(sqe(kv::LIST, 1, 1, 64, 0, b""))),
            Ok(KvCommand::List {
                start: None,
                host_buffer_bytes: 64
            })
        );
        let e = KvCommand::decode(&Command(sqe(kv::LIST, 1, 1, 64, 17, b""))).unwrap_err();
        assert_eq!(e.status, Status::INVALID_FIELD.dnr());
        // Key bytes past KL are ignored.
        let mut b = sqe(kv::EXIST, 1, 1, 0, 2, b"ab");
        b[10..16].fill(0x55);
        b[56..64].fill(0x55);
        assert_eq!(
            KvCommand::decode(&Command(b)),
            Ok(KvCommand::Exist { key: key(b"ab") })
        );
    }

    #[test]
    fn reserved_and_conflicting_options() {
        let both = sqe(kv::STORE, 1, 1, 8, 0x0301, b"a");
        let e = KvCommand::decode(&Command(both)).unwrap_err();
        assert_eq!((e.status, e.sqe_byte), (Status::INVALID_FIELD.dnr(), 45));
        for bit in 3..8 {
            let b = sqe(kv::STORE, 1, 1, 8, (1 << (8 + bit)) | 1, b"a");
            let e = KvCommand::decode(&Command(b)).unwrap_err();
            assert_eq!((e.status, e.sqe_byte), (Status::INVALID_FIELD.dnr(), 45));
        }
        let b = sqe(kv::RETRIEVE, 1, 1, 8, 0x0201, b"a");
        assert_eq!(KvCommand::decode(&Command(b)).unwrap_err().sqe_byte, 45);
        for op in [kv::LIST, kv::DELETE, kv::EXIST] {
            let b = sqe(op, 1, 1, 8, 0x0101, b"a");
            assert_eq!(KvCommand::decode(&Command(b)).unwrap_err().sqe_byte, 45);
        }
        let b = sqe(kv::DELETE, 1, 1, 0, 0x0001_0001, b"a");
        let e = KvCommand::decode(&Command(b)).unwrap_err();
        assert_eq!((e.status, e.sqe_byte), (Status::INVALID_FIELD.dnr(), 46));
        // The defined store bits all decode.
        let b = sqe(kv::STORE, 1, 1, 8, 0x0501, b"a");
        assert_eq!(
            KvCommand::decode(&Command(b)),
            Ok(KvCommand::Store {
                key: key(b"a"),
                value_size_bytes: 8,
                mode: StoreMode::OnlyIfExists,
                no_compression: true
            })
        );
    }

    #[test]
    fn fused_kv_commands_are_rejected() {
        for fuse in 1..4u8 {
            let mut b = sqe(kv::EXIST, 1, 1, 0, 1, b"a");
            b[1] = fuse | (1 << 6); // PSDT (SGL) stays legal
            let e = KvCommand::decode(&Command(b)).unwrap_err();
            assert_eq!((e.status, e.sqe_byte), (Status::INVALID_FIELD.dnr(), 1));
        }
        let mut b = sqe(kv::EXIST, 1, 1, 0, 1, b"a");
        b[1] = 1 << 6;
        assert!(KvCommand::decode(&Command(b)).is_ok());
    }

    #[test]
    fn other_opcodes_are_not_kv_commands() {
        // NVM Write (01h) and Read (02h) share opcodes with Store and Retrieve: the
        // namespace's command set decides which decoder applies.
        for op in [
            io::FLUSH,
            io::COMPARE,
            io::WRITE_ZEROES,
            io::DATASET_MANAGEMENT,
            io::RESERVATION_REGISTER,
            0x7F,
            0xFF,
        ] {
            let e = KvCommand::decode(&Command(sqe(op, 1, 1, 0, 1, b"a"))).unwrap_err();
            assert_eq!((e.status, e.sqe_byte), (Status::INVALID_OPCODE.dnr(), 0));
        }
    }

    #[test]
    fn retrieve_completion_dw0() {
        let c = retrieve_completion(9, 123_456);
        assert_eq!(c.encode()[..4], 123_456u32.to_le_bytes());
        assert!(c.status.is_success());
    }

    fn any_key() -> impl Strategy<Value = KvKey> {
        proptest::collection::vec(any::<u8>(), 1..=16).prop_map(|v| KvKey::new(&v).unwrap())
    }

    fn any_mode() -> impl Strategy<Value = StoreMode> {
        prop_oneof![
            Just(StoreMode::Always),
            Just(StoreMode::OnlyIfExists),
            Just(StoreMode::OnlyIfAbsent)
        ]
    }

    pub(crate) fn any_kv_command() -> impl Strategy<Value = KvCommand> {
        prop_oneof![
            (any_key(), any::<u32>(), any_mode(), any::<bool>()).prop_map(|(key, v, mode, nc)| {
                KvCommand::Store {
                    key,
                    value_size_bytes: v,
                    mode,
                    no_compression: nc,
                }
            }),
            (any_key(), any::<u32>(), any::<bool>()).prop_map(|(key, h, raw)| {
                KvCommand::Retrieve {
                    key,
                    host_buffer_bytes: h,
                    raw,
                }
            }),
            (proptest::option::of(any_key()), any::<u32>()).prop_map(|(start, h)| {
                KvCommand::List {
                    start,
                    host_buffer_bytes: h,
                }
            }),
            any_key().prop_map(|key| KvCommand::Delete { key }),
            any_key().prop_map(|key| KvCommand::Exist { key }),
        ]
    }

    proptest! {
        #[test]
        fn roundtrip(cmd in any_kv_command(), cid: u16, nsid: u32) {
            let c = cmd.to_command(cid, nsid);
            prop_assert_eq!((c.cid(), c.nsid()), (cid, nsid));
            prop_assert_eq!(KvCommand::decode(&c), Ok(cmd));
        }

        #[test]
        fn decode_never_panics_and_is_stable(b in proptest::array::uniform32(any::<u8>()),
                                             tail in proptest::array::uniform32(any::<u8>()),
                                             op in prop_oneof![Just(1u8), Just(2), Just(6), Just(0x10), Just(0x14), any::<u8>()]) {
            let mut raw = [0u8; 64];
            raw[..32].copy_from_slice(&b);
            raw[32..].copy_from_slice(&tail);
            raw[0] = op;
            let c = Command(raw);
            match KvCommand::decode(&c) {
                Ok(cmd) => {
                    // Re-encoding keeps every field the command defines.
                    let again = cmd.to_command(c.cid(), c.nsid());
                    prop_assert_eq!(KvCommand::decode(&again), Ok(cmd));
                    if !matches!(cmd, KvCommand::Delete { .. } | KvCommand::Exist { .. }) {
                        prop_assert_eq!(again.cdw10(), c.cdw10());
                    }
                    prop_assert_eq!(again.cdw11(), c.cdw11());
                }
                Err(e) => {
                    prop_assert!(e.status.dnr);
                    prop_assert!(usize::from(e.sqe_byte) < 64);
                }
            }
        }
    }
}
