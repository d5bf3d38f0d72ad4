//! Controller registers reached through Property Get/Set on fabrics (NVMe Base 2.0
//! "Controller Properties"; Linux `NVME_REG_*`, `NVME_CC_*`, `NVME_CSTS_*`), with their bit fields.
//!
//! Each register type converts losslessly to and from its raw value for the fields it
//! names; reserved bits are dropped on decode and written as 0.

/// Register (property) offsets.
pub mod reg {
    /// Controller Capabilities, 8 bytes.
    pub const CAP: u32 = 0x00;
    /// Version, 4 bytes.
    pub const VS: u32 = 0x08;
    /// Interrupt Mask Set (reserved on fabrics), 4 bytes.
    pub const INTMS: u32 = 0x0C;
    /// Interrupt Mask Clear (reserved on fabrics), 4 bytes.
    pub const INTMC: u32 = 0x10;
    /// Controller Configuration, 4 bytes.
    pub const CC: u32 = 0x14;
    /// Controller Status, 4 bytes.
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset, 4 bytes.
    pub const NSSR: u32 = 0x20;
    /// Controller Ready Timeouts (NVMe 2.0), 4 bytes.
    pub const CRTO: u32 = 0x68;

    /// The value written to NSSR to reset the NVM subsystem ("NVMe").
    pub const NSSR_RESET_VALUE: u32 = 0x4E56_4D65;

    /// Size in bytes of a known register, `None` for an offset this crate does not define.
    pub const fn size_bytes(ofst: u32) -> Option<usize> {
        match ofst {
            CAP => Some(8),
            VS | INTMS | INTMC | CC | CSTS | NSSR | CRTO => Some(4),
            _ => None,
        }
    }
}

/// Extracts `width` bits of `v` starting at bit `lo`.
const fn bits(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}

/// Controller Capabilities (CAP, offset 0x00, 64 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cap {
    /// Maximum Queue Entries Supported, 0's based (bits 15:0). NVMe/TCP hosts want ≥ 127.
    pub mqes: u16,
    /// Contiguous Queues Required (bit 16). Fabrics controllers report 1.
    pub cqr: bool,
    /// Arbitration Mechanism Supported (bits 18:17).
    pub ams: u8,
    /// Timeout: worst-case time to CSTS.RDY change, in 500 ms units (bits 31:24).
    pub to_500ms: u8,
    /// Doorbell Stride (bits 35:32), 0 on fabrics.
    pub dstrd: u8,
    /// NVM Subsystem Reset Supported (bit 36).
    pub nssrs: bool,
    /// Command Sets Supported (bits 44:37): bit 0 NVM, bit 6 I/O command sets, bit 7 admin only.
    pub css: u8,
    /// Boot Partition Support (bit 45).
    pub bps: bool,
    /// Controller Power Scope (bits 47:46).
    pub cps: u8,
    /// Memory Page Size Minimum: 2^(12 + MPSMIN) bytes (bits 51:48).
    pub mpsmin: u8,
    /// Memory Page Size Maximum: 2^(12 + MPSMAX) bytes (bits 55:52).
    pub mpsmax: u8,
    /// Persistent Memory Region Supported (bit 56).
    pub pmrs: bool,
    /// Controller Memory Buffer Supported (bit 57).
    pub cmbs: bool,
    /// NVM Subsystem Shutdown Supported (bit 58).
    pub nsss: bool,
    /// Controller Ready Modes Supported (bits 60:59): bit 0 CRWMS, bit 1 CRIMS.
    pub crms: u8,
}

impl Cap {
    /// CAP.CSS bit: NVM command set.
    pub const CSS_NVM: u8 = 1 << 0;
    /// CAP.CSS bit: one or more I/O command sets (CC.CSS = 110b allowed).
    pub const CSS_IO_COMMAND_SETS: u8 = 1 << 6;
    /// CAP.CSS bit: no I/O command set (admin-only, e.g. discovery controllers).
    pub const CSS_NO_IO: u8 = 1 << 7;
    /// CAP.CRMS bit: Controller Ready With Media Support.
    pub const CRMS_CRWMS: u8 = 1 << 0;
    /// CAP.CRMS bit: Controller Ready Independent of Media Support.
    pub const CRMS_CRIMS: u8 = 1 << 1;

    /// Whether a controller with this CAP accepts `cc_css` in CC.CSS (NVMe Base 2.0
    /// "Controller Configuration"): 000b needs CAP.CSS bit 0 (NVM), 110b bit 6 (one or
    /// more I/O command sets), 111b bit 7 (admin only); 001b..101b are reserved.
    pub const fn accepts_cc_css(&self, cc_css: u8) -> bool {
        match cc_css {
            Cc::CSS_NVM => self.css & Self::CSS_NVM != 0,
            Cc::CSS_ALL_IO => self.css & Self::CSS_IO_COMMAND_SETS != 0,
            Cc::CSS_ADMIN_ONLY => self.css & Self::CSS_NO_IO != 0,
            _ => false,
        }
    }

    pub const fn from_u64(v: u64) -> Self {
        Cap {
            mqes: bits(v, 0, 16) as u16,
            cqr: bits(v, 16, 1) == 1,
            ams: bits(v, 17, 2) as u8,
            to_500ms: bits(v, 24, 8) as u8,
            dstrd: bits(v, 32, 4) as u8,
            nssrs: bits(v, 36, 1) == 1,
            css: bits(v, 37, 8) as u8,
            bps: bits(v, 45, 1) == 1,
            cps: bits(v, 46, 2) as u8,
            mpsmin: bits(v, 48, 4) as u8,
            mpsmax: bits(v, 52, 4) as u8,
            pmrs: bits(v, 56, 1) == 1,
            cmbs: bits(v, 57, 1) == 1,
            nsss: bits(v, 58, 1) == 1,
            crms: bits(v, 59, 2) as u8,
        }
    }

    pub const fn to_u64(&self) -> u64 {
        (self.mqes as u64)
            | ((self.cqr as u64) << 16)
            | (((self.ams & 0x3) as u64) << 17)
            | ((self.to_500ms as u64) << 24)
            | (((self.dstrd & 0xF) as u64) << 32)
            | ((self.nssrs as u64) << 36)
            | ((self.css as u64) << 37)
            | ((self.bps as u64) << 45)
            | (((self.cps & 0x3) as u64) << 46)
            | (((self.mpsmin & 0xF) as u64) << 48)
            | (((self.mpsmax & 0xF) as u64) << 52)
            | ((self.pmrs as u64) << 56)
            | ((self.cmbs as u64) << 57)
            | ((self.nsss as u64) << 58)
            | (((self.crms & 0x3) as u64) << 59)
    }
}

/// Version (VS, offset 0x08).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Vs {
    pub major: u16,
    pub minor: u8,
    pub tertiary: u8,
}

impl Vs {
    pub const V1_3: Vs = Vs::new(1, 3, 0);
    pub const V1_4: Vs = Vs::new(1, 4, 0);
    pub const V2_0: Vs = Vs::new(2, 0, 0);

    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Self {
        Vs {
            major,
            minor,
            tertiary,
        }
    }
    pub const fn from_u32(v: u32) -> Self {
        Vs {
            major: (v >> 16) as u16,
            minor: (v >> 8) as u8,
            tertiary: v as u8,
        }
    }
    pub const fn to_u32(&self) -> u32 {
        ((self.major as u32) << 16) | ((self.minor as u32) << 8) | (self.tertiary as u32)
    }
}

/// Controller Configuration (CC, offset 0x14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cc {
    /// Enable (bit 0).
    pub en: bool,
    /// I/O Command Set Selected (bits 6:4): 0 NVM, 6 all supported I/O sets, 7 admin only.
    pub css: u8,
    /// Memory Page Size: 2^(12 + MPS) bytes (bits 10:7).
    pub mps: u8,
    /// Arbitration Mechanism Selected (bits 13:11).
    pub ams: u8,
    /// Shutdown Notification (bits 15:14), see `SHN_*`.
    pub shn: u8,
    /// I/O Submission Queue Entry Size, log2 bytes (bits 19:16); 6 for 64-byte SQEs.
    pub iosqes: u8,
    /// I/O Completion Queue Entry Size, log2 bytes (bits 23:20); 4 for 16-byte CQEs.
    pub iocqes: u8,
    /// Controller Ready Independent of Media Enable (bit 24).
    pub crime: bool,
}

impl Cc {
    pub const SHN_NONE: u8 = 0;
    pub const SHN_NORMAL: u8 = 1;
    pub const SHN_ABRUPT: u8 = 2;
    pub const CSS_NVM: u8 = 0;
    pub const CSS_ALL_IO: u8 = 6;
    pub const CSS_ADMIN_ONLY: u8 = 7;

    /// The I/O command sets the controller runs once enabled with this CC.CSS, as a CSI
    /// vector (bit n = CSI n, [`crate::identify::csi::vector_bit`]): 000b the NVM command
    /// set alone; 110b the combination the I/O Command Set Profile feature selects
    /// (`profile_vector`, an entry of Identify CNS 1Ch); 111b and reserved values none.
    /// Namespaces of a command set outside the vector are inactive.
    pub const fn enabled_io_command_sets(&self, profile_vector: u64) -> u64 {
        match self.css {
            Self::CSS_NVM => 1 << crate::identify::csi::NVM,
            Self::CSS_ALL_IO => profile_vector,
            _ => 0,
        }
    }

    pub const fn from_u32(v: u32) -> Self {
        let v = v as u64;
        Cc {
            en: bits(v, 0, 1) == 1,
            css: bits(v, 4, 3) as u8,
            mps: bits(v, 7, 4) as u8,
            ams: bits(v, 11, 3) as u8,
            shn: bits(v, 14, 2) as u8,
            iosqes: bits(v, 16, 4) as u8,
            iocqes: bits(v, 20, 4) as u8,
            crime: bits(v, 24, 1) == 1,
        }
    }

    pub const fn to_u32(&self) -> u32 {
        (self.en as u32)
            | (((self.css & 0x7) as u32) << 4)
            | (((self.mps & 0xF) as u32) << 7)
            | (((self.ams & 0x7) as u32) << 11)
            | (((self.shn & 0x3) as u32) << 14)
            | (((self.iosqes & 0xF) as u32) << 16)
            | (((self.iocqes & 0xF) as u32) << 20)
            | ((self.crime as u32) << 24)
    }
}

/// Controller Status (CSTS, offset 0x1C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Csts {
    /// Ready (bit 0).
    pub rdy: bool,
    /// Controller Fatal Status (bit 1).
    pub cfs: bool,
    /// Shutdown Status (bits 3:2), see `SHST_*`.
    pub shst: u8,
    /// NVM Subsystem Reset Occurred (bit 4).
    pub nssro: bool,
    /// Processing Paused (bit 5).
    pub pp: bool,
    /// Shutdown Type (bit 6, NVMe 2.0): 1 when the shutdown was an NVM subsystem shutdown.
    pub st: bool,
}

impl Csts {
    pub const SHST_NORMAL: u8 = 0;
    pub const SHST_OCCURRING: u8 = 1;
    pub const SHST_COMPLETE: u8 = 2;

    pub const fn from_u32(v: u32) -> Self {
        let v = v as u64;
        Csts {
            rdy: bits(v, 0, 1) == 1,
            cfs: bits(v, 1, 1) == 1,
            shst: bits(v, 2, 2) as u8,
            nssro: bits(v, 4, 1) == 1,
            pp: bits(v, 5, 1) == 1,
            st: bits(v, 6, 1) == 1,
        }
    }

    pub const fn to_u32(&self) -> u32 {
        (self.rdy as u32)
            | ((self.cfs as u32) << 1)
            | (((self.shst & 0x3) as u32) << 2)
            | ((self.nssro as u32) << 4)
            | ((self.pp as u32) << 5)
            | ((self.st as u32) << 6)
    }
}

/// Controller Ready Timeouts (CRTO, offset 0x68, NVMe 2.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crto {
    /// Controller Ready With Media Timeout, 500 ms units (bits 15:0).
    pub crwmt_500ms: u16,
    /// Controller Ready Independent of Media Timeout, 500 ms units (bits 31:16).
    pub crimt_500ms: u16,
}

impl Crto {
    pub const fn from_u32(v: u32) -> Self {
        Crto {
            crwmt_500ms: v as u16,
            crimt_500ms: (v >> 16) as u16,
        }
    }
    pub const fn to_u32(&self) -> u32 {
        (self.crwmt_500ms as u32) | ((self.crimt_500ms as u32) << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cap_fixed_vector() {
        // What an SPDK-like fabrics controller reports: MQES 127, CQR, TO 15 s, CSS NVM,
        // MPSMIN = MPSMAX = 4 KiB, CRWMS.
        let cap = Cap {
            mqes: 127,
            cqr: true,
            to_500ms: 30,
            css: Cap::CSS_NVM,
            crms: Cap::CRMS_CRWMS,
            ..Cap::default()
        };
        assert_eq!(cap.to_u64(), 0x0800_0020_1E01_007F);
        assert_eq!(Cap::from_u64(cap.to_u64()), cap);
        // Bit positions of the flags, one at a time.
        assert_eq!(
            Cap {
                nssrs: true,
                ..Cap::default()
            }
            .to_u64(),
            1 << 36
        );
        assert_eq!(
            Cap {
                bps: true,
                ..Cap::default()
            }
            .to_u64(),
            1 << 45
        );
        assert_eq!(
            Cap {
                mpsmin: 1,
                ..Cap::default()
            }
            .to_u64(),
            1 << 48
        );
        assert_eq!(
            Cap {
                mpsmax: 1,
                ..Cap::default()
            }
            .to_u64(),
            1 << 52
        );
        assert_eq!(
            Cap {
                dstrd: 1,
                ..Cap::default()
            }
            .to_u64(),
            1 << 32
        );
        assert_eq!(
            Cap {
                ams: 1,
                ..Cap::default()
            }
            .to_u64(),
            1 << 17
        );
        assert_eq!(
            Cap {
                crms: Cap::CRMS_CRIMS,
                ..Cap::default()
            }
            .to_u64(),
            1 << 60
        );
    }

    #[test]
    fn cc_linux_enable_value() {
        // Linux writes CC = EN | IOSQES 6 | IOCQES 4 | MPS 0 | CSS NVM = 0x00460001.
        let cc = Cc::from_u32(0x0046_0001);
        assert!(cc.en);
        assert_eq!(
            (cc.iosqes, cc.iocqes, cc.css, cc.mps, cc.shn),
            (6, 4, 0, 0, 0)
        );
        // Normal shutdown notification: bits 15:14 = 01.
        let shn = Cc {
            shn: Cc::SHN_NORMAL,
            ..cc
        };
        assert_eq!(shn.to_u32(), 0x0046_4001);
        assert_eq!(
            Cc {
                crime: true,
                ..Cc::default()
            }
            .to_u32(),
            1 << 24
        );
        assert_eq!(
            Cc {
                css: Cc::CSS_ALL_IO,
                ..Cc::default()
            }
            .to_u32(),
            0x60
        );
        assert_eq!(
            Cc {
                ams: 7,
                ..Cc::default()
            }
            .to_u32(),
            7 << 11
        );
    }

    #[test]
    fn command_set_selection() {
        use crate::identify::csi;
        // A controller offering NVM and KV: CAP.CSS bits 0 and 6 (CAP bits 37 and 43).
        let cap = Cap {
            css: Cap::CSS_NVM | Cap::CSS_IO_COMMAND_SETS,
            ..Cap::default()
        };
        assert_eq!(cap.to_u64(), (1 << 37) | (1 << 43));
        assert!(cap.accepts_cc_css(Cc::CSS_NVM));
        assert!(cap.accepts_cc_css(Cc::CSS_ALL_IO));
        assert!(!cap.accepts_cc_css(Cc::CSS_ADMIN_ONLY));
        assert!(!cap.accepts_cc_css(1));
        let nvm_only = Cap {
            css: Cap::CSS_NVM,
            ..Cap::default()
        };
        assert!(!nvm_only.accepts_cc_css(Cc::CSS_ALL_IO));
        // Linux enables such a controller with CC.CSS = 110b: CC = 0x00460061.
        let cc = Cc::from_u32(0x0046_0061);
        assert_eq!(cc.css, Cc::CSS_ALL_IO);
        let nvm_kv = csi::vector_bit(csi::NVM) | csi::vector_bit(csi::KEY_VALUE);
        assert_eq!(cc.enabled_io_command_sets(nvm_kv), 0b11);
        // CC.CSS = 000b leaves only NVM: KV namespaces are inactive.
        assert_eq!(Cc::default().enabled_io_command_sets(nvm_kv), 0b01);
        let admin = Cc {
            css: Cc::CSS_ADMIN_ONLY,
            ..Cc::default()
        };
        assert_eq!(admin.enabled_io_command_sets(nvm_kv), 0);
    }

    #[test]
    fn csts_and_vs() {
        let c = Csts {
            rdy: true,
            shst: Csts::SHST_COMPLETE,
            ..Csts::default()
        };
        assert_eq!(c.to_u32(), 0x9);
        assert_eq!(
            Csts {
                cfs: true,
                nssro: true,
                pp: true,
                ..Csts::default()
            }
            .to_u32(),
            0x32
        );
        assert_eq!(Vs::V2_0.to_u32(), 0x0002_0000);
        assert_eq!(Vs::V1_3.to_u32(), 0x0001_0300);
        assert_eq!(Vs::from_u32(0x0001_0402), Vs::new(1, 4, 2));
        assert_eq!(
            Crto {
                crwmt_500ms: 2,
                crimt_500ms: 3
            }
            .to_u32(),
            0x0003_0002
        );
        assert_eq!(reg::size_bytes(reg::CAP), Some(8));
        assert_eq!(reg::size_bytes(reg::CSTS), Some(4));
        assert_eq!(reg::size_bytes(0x24), None);
    }

    const CAP_MASK: u64 = 0x1FFF_FFFF_FF07_FFFF;
    const CC_MASK: u32 = 0x01FF_FFF1;

    proptest! {
        #[test]
        fn cap_roundtrip(v: u64) {
            prop_assert_eq!(Cap::from_u64(v).to_u64(), v & CAP_MASK);
        }
        #[test]
        fn cc_roundtrip(v: u32) {
            prop_assert_eq!(Cc::from_u32(v).to_u32(), v & CC_MASK);
        }
        #[test]
        fn csts_roundtrip(v: u32) {
            prop_assert_eq!(Csts::from_u32(v).to_u32(), v & 0x7F);
        }
        #[test]
        fn vs_crto_roundtrip(v: u32) {
            prop_assert_eq!(Vs::from_u32(v).to_u32(), v);
            prop_assert_eq!(Crto::from_u32(v).to_u32(), v);
        }
    }
}
