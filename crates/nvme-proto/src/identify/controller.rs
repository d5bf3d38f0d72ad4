//! The Identify Controller data structure (CNS 0x01), 4096 bytes.
//!
//! Offsets follow NVMe Base 2.0 "Identify Controller Data Structure" and NVMe-oF 1.1 (bytes 1792..2047 are the
//! fabrics fields); they agree with Linux `struct nvme_id_ctrl`. See
//! `docs/wire/nvme-admin.md` for the table.

use crate::bytes::{
    get_array, get_ascii, get_str_nul, le16, le32, le128, put_ascii_padded, put_bytes, put_str_nul,
    put16, put32, put128,
};
use crate::error::DecodeError;

use super::IDENTIFY_DATA_BYTES;

/// One 32-byte power state descriptor (bytes 2048 + 32 * n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PowerStateDescriptor {
    /// Maximum power, in 0.01 W (or 0.0001 W when flags bit 0 MXPS is set).
    pub mp: u16,
    /// Bit 0 MXPS (max power scale), bit 1 NOPS (non-operational state).
    pub flags: u8,
    /// Entry latency, µs.
    pub enlat_us: u32,
    /// Exit latency, µs.
    pub exlat_us: u32,
    /// Relative read throughput (bits 4:0).
    pub rrt: u8,
    /// Relative read latency (bits 4:0).
    pub rrl: u8,
    /// Relative write throughput (bits 4:0).
    pub rwt: u8,
    /// Relative write latency (bits 4:0).
    pub rwl: u8,
    /// Idle power.
    pub idlp: u16,
    /// Idle power scale (bits 7:6 of byte 18, kept in place).
    pub ips: u8,
    /// Active power.
    pub actp: u16,
    /// Active power workload (bits 2:0) and active power scale (bits 7:6) of byte 22.
    pub apw_aps: u8,
}

impl PowerStateDescriptor {
    pub const BYTES: usize = 32;

    pub fn encode(&self, out: &mut [u8]) {
        put16(out, 0, self.mp);
        if let Some(b) = out.get_mut(3) {
            *b = self.flags;
        }
        put32(out, 4, self.enlat_us);
        put32(out, 8, self.exlat_us);
        put_bytes(out, 12, &[self.rrt, self.rrl, self.rwt, self.rwl]);
        put16(out, 16, self.idlp);
        put_bytes(out, 18, &[self.ips]);
        put16(out, 20, self.actp);
        put_bytes(out, 22, &[self.apw_aps]);
    }

    pub fn decode(b: &[u8]) -> Self {
        let at = |i: usize| b.get(i).copied().unwrap_or(0);
        PowerStateDescriptor {
            mp: le16(b, 0),
            flags: at(3),
            enlat_us: le32(b, 4),
            exlat_us: le32(b, 8),
            rrt: at(12),
            rrl: at(13),
            rwt: at(14),
            rwl: at(15),
            idlp: le16(b, 16),
            ips: at(18),
            actp: le16(b, 20),
            apw_aps: at(22),
        }
    }
}

/// Byte offsets of Identify Controller fields that tests and docs refer to.
pub mod off {
    pub const VID: usize = 0;
    pub const SSVID: usize = 2;
    pub const SN: usize = 4;
    pub const MN: usize = 24;
    pub const FR: usize = 64;
    pub const RAB: usize = 72;
    pub const IEEE: usize = 73;
    pub const CMIC: usize = 76;
    pub const MDTS: usize = 77;
    pub const CNTLID: usize = 78;
    pub const VER: usize = 80;
    pub const RTD3R: usize = 84;
    pub const RTD3E: usize = 88;
    pub const OAES: usize = 92;
    pub const CTRATT: usize = 96;
    pub const RRLS: usize = 100;
    pub const CNTRLTYPE: usize = 111;
    pub const FGUID: usize = 112;
    pub const CRDT1: usize = 128;
    pub const CRDT2: usize = 130;
    pub const CRDT3: usize = 132;
    pub const OACS: usize = 256;
    pub const ACL: usize = 258;
    pub const AERL: usize = 259;
    pub const FRMW: usize = 260;
    pub const LPA: usize = 261;
    pub const ELPE: usize = 262;
    pub const NPSS: usize = 263;
    pub const AVSCC: usize = 264;
    pub const APSTA: usize = 265;
    pub const WCTEMP: usize = 266;
    pub const CCTEMP: usize = 268;
    pub const MTFA: usize = 270;
    pub const HMPRE: usize = 272;
    pub const HMMIN: usize = 276;
    pub const TNVMCAP: usize = 280;
    pub const UNVMCAP: usize = 296;
    pub const RPMBS: usize = 312;
    pub const EDSTT: usize = 316;
    pub const DSTO: usize = 318;
    pub const FWUG: usize = 319;
    pub const KAS: usize = 320;
    pub const HCTMA: usize = 322;
    pub const MNTMT: usize = 324;
    pub const MXTMT: usize = 326;
    pub const SANICAP: usize = 328;
    pub const HMMINDS: usize = 332;
    pub const HMMAXD: usize = 336;
    pub const NSETIDMAX: usize = 338;
    pub const ENDGIDMAX: usize = 340;
    pub const ANATT: usize = 342;
    pub const ANACAP: usize = 343;
    pub const ANAGRPMAX: usize = 344;
    pub const NANAGRPID: usize = 348;
    pub const PELS: usize = 352;
    pub const DOMAINID: usize = 356;
    pub const MEGCAP: usize = 368;
    pub const SQES: usize = 512;
    pub const CQES: usize = 513;
    pub const MAXCMD: usize = 514;
    pub const NN: usize = 516;
    pub const ONCS: usize = 520;
    pub const FUSES: usize = 522;
    pub const FNA: usize = 524;
    pub const VWC: usize = 525;
    pub const AWUN: usize = 526;
    pub const AWUPF: usize = 528;
    pub const ICSVSCC: usize = 530;
    pub const NWPC: usize = 531;
    pub const ACWU: usize = 532;
    pub const OCFS: usize = 534;
    pub const SGLS: usize = 536;
    pub const MNAN: usize = 540;
    pub const MAXDNA: usize = 544;
    pub const MAXCNA: usize = 560;
    pub const SUBNQN: usize = 768;
    pub const IOCCSZ: usize = 1792;
    pub const IORCSZ: usize = 1796;
    pub const ICDOFF: usize = 1800;
    pub const FCATT: usize = 1802;
    pub const MSDBD: usize = 1803;
    pub const OFCS: usize = 1804;
    pub const DCTYPE: usize = 1806;
    pub const PSD0: usize = 2048;
    pub const VS: usize = 3072;
}

/// Bit values of Identify Controller fields a fabrics target sets.
pub mod bits {
    /// CMIC: the subsystem may have more than one port.
    pub const CMIC_MULTI_PORT: u8 = 1 << 0;
    /// CMIC: the subsystem may have two or more controllers (required for multipath).
    pub const CMIC_MULTI_CTRL: u8 = 1 << 1;
    /// CMIC: the controller reports Asymmetric Namespace Access.
    pub const CMIC_ANA: u8 = 1 << 3;

    /// OAES: Namespace Attribute Notices.
    pub const OAES_NS_ATTR: u32 = 1 << 8;
    /// OAES: Firmware Activation Notices.
    pub const OAES_FW_ACTIVATION: u32 = 1 << 9;
    /// OAES: ANA Change Notices.
    pub const OAES_ANA_CHANGE: u32 = 1 << 11;
    /// OAES: Discovery Log Page Change Notices.
    pub const OAES_DISCOVERY_CHANGE: u32 = 1 << 31;

    /// CTRATT: 128-bit host identifier supported.
    pub const CTRATT_HOSTID_128: u32 = 1 << 0;
    /// CTRATT: traffic based keep alive.
    pub const CTRATT_TBKAS: u32 = 1 << 6;

    /// CNTRLTYPE values.
    pub const CNTRLTYPE_IO: u8 = 1;
    pub const CNTRLTYPE_DISCOVERY: u8 = 2;
    pub const CNTRLTYPE_ADMIN: u8 = 3;

    /// DCTYPE values (TP 8010, Identify Controller byte 1806): which kind of discovery
    /// controller this is.
    pub const DCTYPE_NOT_REPORTED: u8 = 0;
    /// A direct discovery controller: it lists the subsystems of its own NVM subsystem.
    pub const DCTYPE_DDC: u8 = 1;
    /// A central discovery controller: it lists subsystems it does not host.
    pub const DCTYPE_CDC: u8 = 2;

    /// OACS: Namespace Management and Attachment commands supported.
    pub const OACS_NS_MGMT: u16 = 1 << 3;

    /// LPA: SMART/health log page per namespace.
    pub const LPA_SMART_PER_NS: u8 = 1 << 0;
    /// LPA: Commands Supported and Effects log page.
    pub const LPA_CMD_EFFECTS: u8 = 1 << 1;
    /// LPA: extended data for Get Log Page (NUMDU, LPOL/LPOU).
    pub const LPA_EXTENDED_DATA: u8 = 1 << 2;
    /// LPA: Telemetry Host-Initiated and Controller-Initiated log pages.
    pub const LPA_TELEMETRY: u8 = 1 << 3;

    /// ONCS: Compare.
    pub const ONCS_COMPARE: u16 = 1 << 0;
    /// ONCS: Write Uncorrectable.
    pub const ONCS_WRITE_UNCORRECTABLE: u16 = 1 << 1;
    /// ONCS: Dataset Management.
    pub const ONCS_DSM: u16 = 1 << 2;
    /// ONCS: Write Zeroes.
    pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;
    /// ONCS: Save field in Set Features / Select in Get Features.
    pub const ONCS_SAVE_SELECT: u16 = 1 << 4;
    /// ONCS: Reservations.
    pub const ONCS_RESERVATIONS: u16 = 1 << 5;

    /// FUSES: Compare and Write fused operation.
    pub const FUSES_COMPARE_WRITE: u16 = 1 << 0;

    /// VWC: a volatile write cache is present.
    pub const VWC_PRESENT: u8 = 1 << 0;
    /// VWC bits 2:1 = 11b: Flush with NSID 0xFFFFFFFF is supported.
    pub const VWC_FLUSH_ALL_NSID: u8 = 0b11 << 1;

    /// SGLS bits 1:0 = 01b: SGLs supported, no alignment requirement.
    pub const SGLS_SUPPORTED: u32 = 1 << 0;
    /// SGLS bits 1:0 = 10b: SGLs supported, dword alignment required.
    pub const SGLS_DWORD_ALIGNED: u32 = 1 << 1;
    /// SGLS: Keyed SGL data block descriptor (RDMA).
    pub const SGLS_KEYED: u32 = 1 << 2;
    /// SGLS: address field of an SGL data block may be an offset (in-capsule data).
    pub const SGLS_OFFSET: u32 = 1 << 20;
    /// SGLS: Transport SGL data block descriptor.
    pub const SGLS_TRANSPORT: u32 = 1 << 21;

    /// FCATT bit 0: 0 = dynamic controller model, 1 = static.
    pub const FCATT_STATIC: u8 = 1 << 0;
    /// OFCS bit 0: Disconnect command supported.
    pub const OFCS_DISCONNECT: u16 = 1 << 0;

    /// ANACAP bits.
    pub const ANACAP_OPTIMIZED: u8 = 1 << 0;
    pub const ANACAP_NON_OPTIMIZED: u8 = 1 << 1;
    pub const ANACAP_INACCESSIBLE: u8 = 1 << 2;
    pub const ANACAP_PERSISTENT_LOSS: u8 = 1 << 3;
    pub const ANACAP_CHANGE: u8 = 1 << 4;
    /// ANAGRPID does not change while the namespace is attached.
    pub const ANACAP_GRPID_STATIC: u8 = 1 << 6;
    /// A non-zero ANAGRPID is accepted in Namespace Management.
    pub const ANACAP_GRPID_IN_NS_MGMT: u8 = 1 << 7;
}

/// Identify Controller. String fields are ASCII (SN, MN, FR space padded on the wire);
/// SUBNQN is NUL terminated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyController {
    pub vid: u16,
    pub ssvid: u16,
    /// Serial number, 20 bytes.
    pub sn: String,
    /// Model number, 40 bytes.
    pub mn: String,
    /// Firmware revision, 8 bytes.
    pub fr: String,
    /// Recommended arbitration burst.
    pub rab: u8,
    /// IEEE OUI, least significant byte first.
    pub ieee: [u8; 3],
    pub cmic: u8,
    /// Maximum data transfer size: 2^MDTS units of CAP.MPSMIN; 0 = no limit.
    pub mdts: u8,
    pub cntlid: u16,
    /// Version, same encoding as the VS register.
    pub ver: u32,
    pub rtd3r_us: u32,
    pub rtd3e_us: u32,
    pub oaes: u32,
    pub ctratt: u32,
    pub rrls: u16,
    pub cntrltype: u8,
    pub fguid: [u8; 16],
    /// Command retry delay times, 100 ms units.
    pub crdt1: u16,
    pub crdt2: u16,
    pub crdt3: u16,
    pub oacs: u16,
    /// Abort command limit, 0's based.
    pub acl: u8,
    /// Asynchronous event request limit, 0's based.
    pub aerl: u8,
    pub frmw: u8,
    pub lpa: u8,
    /// Error log page entries, 0's based.
    pub elpe: u8,
    /// Number of power states supported, 0's based.
    pub npss: u8,
    pub avscc: u8,
    pub apsta: u8,
    /// Warning composite temperature threshold, kelvin.
    pub wctemp: u16,
    /// Critical composite temperature threshold, kelvin.
    pub cctemp: u16,
    pub mtfa: u16,
    pub hmpre: u32,
    pub hmmin: u32,
    pub tnvmcap: u128,
    pub unvmcap: u128,
    pub rpmbs: u32,
    pub edstt: u16,
    pub dsto: u8,
    pub fwug: u8,
    /// Keep alive support: granularity in 100 ms units; must be non-zero on fabrics.
    pub kas: u16,
    pub hctma: u16,
    pub mntmt: u16,
    pub mxtmt: u16,
    pub sanicap: u32,
    pub hmminds: u32,
    pub hmmaxd: u16,
    pub nsetidmax: u16,
    pub endgidmax: u16,
    /// ANA transition time, seconds.
    pub anatt: u8,
    pub anacap: u8,
    pub anagrpmax: u32,
    pub nanagrpid: u32,
    pub pels: u32,
    pub domainid: u16,
    pub megcap: u128,
    /// Required (bits 3:0) and maximum (bits 7:4) SQ entry size, log2 bytes: 0x66.
    pub sqes: u8,
    /// Required and maximum CQ entry size, log2 bytes: 0x44.
    pub cqes: u8,
    pub maxcmd: u16,
    /// Number of namespaces: the largest valid NSID.
    pub nn: u32,
    pub oncs: u16,
    pub fuses: u16,
    pub fna: u8,
    pub vwc: u8,
    pub awun: u16,
    pub awupf: u16,
    pub icsvscc: u8,
    pub nwpc: u8,
    pub acwu: u16,
    pub ocfs: u16,
    pub sgls: u32,
    /// Maximum number of allowed namespaces (0 = NN).
    pub mnan: u32,
    pub maxdna: u128,
    pub maxcna: u32,
    pub subnqn: String,
    /// I/O queue command capsule supported size, 16-byte units (64-byte SQE + in-capsule data).
    pub ioccsz: u32,
    /// I/O queue response capsule supported size, 16-byte units.
    pub iorcsz: u32,
    /// In-capsule data offset, 16-byte units (0 for NVMe/TCP).
    pub icdoff: u16,
    pub fcatt: u8,
    /// Maximum SGL data block descriptors per command.
    pub msdbd: u8,
    pub ofcs: u16,
    /// Discovery controller type (discovery controllers only): 1 direct, 2 central.
    pub dctype: u8,
    pub psd: [PowerStateDescriptor; 32],
}

impl IdentifyController {
    pub const BYTES: usize = IDENTIFY_DATA_BYTES;

    /// Writes the structure into `out[..4096]`, zeroing every byte it does not set.
    pub fn encode(&self, out: &mut [u8]) {
        let n = out.len().min(Self::BYTES);
        let b = &mut out[..n];
        b.fill(0);
        use off::*;
        put16(b, VID, self.vid);
        put16(b, SSVID, self.ssvid);
        put_ascii_padded(b, SN, 20, &self.sn);
        put_ascii_padded(b, MN, 40, &self.mn);
        put_ascii_padded(b, FR, 8, &self.fr);
        put_bytes(b, RAB, &[self.rab]);
        put_bytes(b, IEEE, &self.ieee);
        put_bytes(b, CMIC, &[self.cmic, self.mdts]);
        put16(b, CNTLID, self.cntlid);
        put32(b, VER, self.ver);
        put32(b, RTD3R, self.rtd3r_us);
        put32(b, RTD3E, self.rtd3e_us);
        put32(b, OAES, self.oaes);
        put32(b, CTRATT, self.ctratt);
        put16(b, RRLS, self.rrls);
        put_bytes(b, CNTRLTYPE, &[self.cntrltype]);
        put_bytes(b, FGUID, &self.fguid);
        put16(b, CRDT1, self.crdt1);
        put16(b, CRDT2, self.crdt2);
        put16(b, CRDT3, self.crdt3);
        put16(b, OACS, self.oacs);
        put_bytes(
            b,
            ACL,
            &[
                self.acl, self.aerl, self.frmw, self.lpa, self.elpe, self.npss, self.avscc,
                self.apsta,
            ],
        );
        put16(b, WCTEMP, self.wctemp);
        put16(b, CCTEMP, self.cctemp);
        put16(b, MTFA, self.mtfa);
        put32(b, HMPRE, self.hmpre);
        put32(b, HMMIN, self.hmmin);
        put128(b, TNVMCAP, self.tnvmcap);
        put128(b, UNVMCAP, self.unvmcap);
        put32(b, RPMBS, self.rpmbs);
        put16(b, EDSTT, self.edstt);
        put_bytes(b, DSTO, &[self.dsto, self.fwug]);
        put16(b, KAS, self.kas);
        put16(b, HCTMA, self.hctma);
        put16(b, MNTMT, self.mntmt);
        put16(b, MXTMT, self.mxtmt);
        put32(b, SANICAP, self.sanicap);
        put32(b, HMMINDS, self.hmminds);
        put16(b, HMMAXD, self.hmmaxd);
        put16(b, NSETIDMAX, self.nsetidmax);
        put16(b, ENDGIDMAX, self.endgidmax);
        put_bytes(b, ANATT, &[self.anatt, self.anacap]);
        put32(b, ANAGRPMAX, self.anagrpmax);
        put32(b, NANAGRPID, self.nanagrpid);
        put32(b, PELS, self.pels);
        put16(b, DOMAINID, self.domainid);
        put128(b, MEGCAP, self.megcap);
        put_bytes(b, SQES, &[self.sqes, self.cqes]);
        put16(b, MAXCMD, self.maxcmd);
        put32(b, NN, self.nn);
        put16(b, ONCS, self.oncs);
        put16(b, FUSES, self.fuses);
        put_bytes(b, FNA, &[self.fna, self.vwc]);
        put16(b, AWUN, self.awun);
        put16(b, AWUPF, self.awupf);
        put_bytes(b, ICSVSCC, &[self.icsvscc, self.nwpc]);
        put16(b, ACWU, self.acwu);
        put16(b, OCFS, self.ocfs);
        put32(b, SGLS, self.sgls);
        put32(b, MNAN, self.mnan);
        put128(b, MAXDNA, self.maxdna);
        put32(b, MAXCNA, self.maxcna);
        put_str_nul(b, SUBNQN, 256, &self.subnqn);
        put32(b, IOCCSZ, self.ioccsz);
        put32(b, IORCSZ, self.iorcsz);
        put16(b, ICDOFF, self.icdoff);
        put_bytes(b, FCATT, &[self.fcatt, self.msdbd]);
        put16(b, OFCS, self.ofcs);
        put_bytes(b, DCTYPE, &[self.dctype]);
        for (i, p) in self.psd.iter().enumerate() {
            let o = PSD0 + i * PowerStateDescriptor::BYTES;
            if let Some(d) = b.get_mut(o..o + PowerStateDescriptor::BYTES) {
                p.encode(d);
            }
        }
    }

    pub fn to_bytes(&self) -> Box<[u8; IDENTIFY_DATA_BYTES]> {
        let mut b = Box::new([0u8; IDENTIFY_DATA_BYTES]);
        self.encode(&mut b[..]);
        b
    }

    /// Decodes 4096 bytes. Strings are read lossily (a device's odd bytes are not an error):
    /// SN/MN/FR with non-printable bytes as '?', SUBNQN as lossy UTF-8.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        if b.len() < Self::BYTES {
            return Err(DecodeError::Short {
                what: "identify controller",
                needed_bytes: Self::BYTES,
                got_bytes: b.len(),
            });
        }
        use off::*;
        let u8at = |i: usize| b.get(i).copied().unwrap_or(0);
        let mut psd = [PowerStateDescriptor::default(); 32];
        for (i, p) in psd.iter_mut().enumerate() {
            let o = PSD0 + i * PowerStateDescriptor::BYTES;
            *p = PowerStateDescriptor::decode(
                b.get(o..o + PowerStateDescriptor::BYTES).unwrap_or(&[]),
            );
        }
        Ok(IdentifyController {
            vid: le16(b, VID),
            ssvid: le16(b, SSVID),
            sn: get_ascii(b, SN, 20),
            mn: get_ascii(b, MN, 40),
            fr: get_ascii(b, FR, 8),
            rab: u8at(RAB),
            ieee: get_array(b, IEEE),
            cmic: u8at(CMIC),
            mdts: u8at(MDTS),
            cntlid: le16(b, CNTLID),
            ver: le32(b, VER),
            rtd3r_us: le32(b, RTD3R),
            rtd3e_us: le32(b, RTD3E),
            oaes: le32(b, OAES),
            ctratt: le32(b, CTRATT),
            rrls: le16(b, RRLS),
            cntrltype: u8at(CNTRLTYPE),
            fguid: get_array(b, FGUID),
            crdt1: le16(b, CRDT1),
            crdt2: le16(b, CRDT2),
            crdt3: le16(b, CRDT3),
            oacs: le16(b, OACS),
            acl: u8at(ACL),
            aerl: u8at(AERL),
            frmw: u8at(FRMW),
            lpa: u8at(LPA),
            elpe: u8at(ELPE),
            npss: u8at(NPSS),
            avscc: u8at(AVSCC),
            apsta: u8at(APSTA),
            wctemp: le16(b, WCTEMP),
            cctemp: le16(b, CCTEMP),
            mtfa: le16(b, MTFA),
            hmpre: le32(b, HMPRE),
            hmmin: le32(b, HMMIN),
            tnvmcap: le128(b, TNVMCAP),
            unvmcap: le128(b, UNVMCAP),
            rpmbs: le32(b, RPMBS),
            edstt: le16(b, EDSTT),
            dsto: u8at(DSTO),
            fwug: u8at(FWUG),
            kas: le16(b, KAS),
            hctma: le16(b, HCTMA),
            mntmt: le16(b, MNTMT),
            mxtmt: le16(b, MXTMT),
            sanicap: le32(b, SANICAP),
            hmminds: le32(b, HMMINDS),
            hmmaxd: le16(b, HMMAXD),
            nsetidmax: le16(b, NSETIDMAX),
            endgidmax: le16(b, ENDGIDMAX),
            anatt: u8at(ANATT),
            anacap: u8at(ANACAP),
            anagrpmax: le32(b, ANAGRPMAX),
            nanagrpid: le32(b, NANAGRPID),
            pels: le32(b, PELS),
            domainid: le16(b, DOMAINID),
            megcap: le128(b, MEGCAP),
            sqes: u8at(SQES),
            cqes: u8at(CQES),
            maxcmd: le16(b, MAXCMD),
            nn: le32(b, NN),
            oncs: le16(b, ONCS),
            fuses: le16(b, FUSES),
            fna: u8at(FNA),
            vwc: u8at(VWC),
            awun: le16(b, AWUN),
            awupf: le16(b, AWUPF),
            icsvscc: u8at(ICSVSCC),
            nwpc: u8at(NWPC),
            acwu: le16(b, ACWU),
            ocfs: le16(b, OCFS),
            sgls: le32(b, SGLS),
            mnan: le32(b, MNAN),
            maxdna: le128(b, MAXDNA),
            maxcna: le32(b, MAXCNA),
            subnqn: get_str_nul(b, SUBNQN, 256),
            ioccsz: le32(b, IOCCSZ),
            iorcsz: le32(b, IORCSZ),
            icdoff: le16(b, ICDOFF),
            fcatt: u8at(FCATT),
            msdbd: u8at(MSDBD),
            ofcs: le16(b, OFCS),
            dctype: u8at(DCTYPE),
            psd,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every numeric field set to a distinct value, so that a wrong offset shows.
    fn sample() -> IdentifyController {
        let mut psd = [PowerStateDescriptor::default(); 32];
        psd[0] = PowerStateDescriptor {
            mp: 2500,
            flags: 0,
            enlat_us: 1,
            exlat_us: 2,
            rrt: 0,
            rrl: 0,
            rwt: 0,
            rwl: 0,
            idlp: 0,
            ips: 0,
            actp: 0,
            apw_aps: 0,
        };
        psd[31].mp = 7;
        IdentifyController {
            vid: 0x1D1D,
            ssvid: 0x1D1E,
            sn: "SN123".into(),
            mn: "Ferrobay".into(),
            fr: "0.1.0".into(),
            rab: 6,
            ieee: [1, 2, 3],
            cmic: bits::CMIC_MULTI_CTRL | bits::CMIC_ANA,
            mdts: 0x77,
            cntlid: 0x7878,
            ver: 0x0002_0000,
            rtd3r_us: 0x8484_8484,
            rtd3e_us: 0x8888_8888,
            oaes: 0x9292_9292,
            ctratt: 0x9696_9696,
            rrls: 0x6464,
            cntrltype: bits::CNTRLTYPE_IO,
            fguid: [0x70; 16],
            crdt1: 0x8080,
            crdt2: 0x8282,
            crdt3: 0x8484,
            oacs: 0x0101,
            acl: 3,
            aerl: 4,
            frmw: 5,
            lpa: 6,
            elpe: 7,
            npss: 8,
            avscc: 9,
            apsta: 10,
            wctemp: 0x010A,
            cctemp: 0x010C,
            mtfa: 0x010E,
            hmpre: 0x1010_1010,
            hmmin: 0x1414_1414,
            tnvmcap: 0x1818_0000_0000_0000_0000_0000_0000_1818,
            unvmcap: 0x2828_0000_0000_0000_0000_0000_0000_2828,
            rpmbs: 0x3838_3838,
            edstt: 0x3C3C,
            dsto: 0x3E,
            fwug: 0x3F,
            kas: 0x4040,
            hctma: 0x4242,
            mntmt: 0x4444,
            mxtmt: 0x4646,
            sanicap: 0x4848_4848,
            hmminds: 0x4C4C_4C4C,
            hmmaxd: 0x5050,
            nsetidmax: 0x5252,
            endgidmax: 0x5454,
            anatt: 0x56,
            anacap: 0x57,
            anagrpmax: 0x5858_5858,
            nanagrpid: 0x5C5C_5C5C,
            pels: 0x6060_6060,
            domainid: 0x6464,
            megcap: 0x7070,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 0x0202,
            nn: 0x0404_0404,
            oncs: 0x0808,
            fuses: 0x0A0A,
            fna: 0x0C,
            vwc: 0x0D,
            awun: 0x0E0E,
            awupf: 0x1010,
            icsvscc: 0x12,
            nwpc: 0x13,
            acwu: 0x1414,
            ocfs: 0x1616,
            sgls: 0x1818_1818,
            mnan: 0x1C1C_1C1C,
            maxdna: 0x2020,
            maxcna: 0x3030_3030,
            subnqn: "nqn.2026-01.io.ferrobay:n1:d0".into(),
            ioccsz: 0x0700_0700,
            iorcsz: 0x0704_0704,
            icdoff: 0x0708,
            fcatt: 0x0A,
            msdbd: 0x0B,
            ofcs: 0x0C0C,
            dctype: 0x0E,
            psd,
        }
    }

    #[test]
    fn key_field_offsets() {
        // Offsets from NVMe Base 2.0 Identify Controller / NVMe-oF 1.1, checked against Linux
        // `struct nvme_id_ctrl`.
        let c = sample();
        let b = c.to_bytes();
        let u16at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        assert_eq!(u16at(0), 0x1D1D);
        assert_eq!(&b[4..9], b"SN123");
        assert_eq!(b[9], b' ');
        assert_eq!(&b[24..32], b"Ferrobay");
        assert_eq!(&b[64..72], b"0.1.0   ");
        assert_eq!(&b[73..76], &[1, 2, 3]);
        assert_eq!(b[76], 0x0A);
        assert_eq!(b[77], 0x77);
        assert_eq!(u16at(78), 0x7878);
        assert_eq!(u32at(80), 0x0002_0000);
        assert_eq!(u32at(92), 0x9292_9292);
        assert_eq!(u32at(96), 0x9696_9696);
        assert_eq!(b[111], 1);
        assert_eq!(b[112], 0x70);
        assert_eq!(u16at(128), 0x8080);
        assert_eq!(u16at(256), 0x0101);
        assert_eq!(
            (b[258], b[259], b[260], b[261], b[262], b[263]),
            (3, 4, 5, 6, 7, 8)
        );
        assert_eq!(u16at(266), 0x010A);
        assert_eq!(u32at(272), 0x1010_1010);
        assert_eq!(u16at(280), 0x1818);
        assert_eq!(u16at(294), 0x1818);
        assert_eq!(u16at(320), 0x4040);
        assert_eq!((b[342], b[343]), (0x56, 0x57));
        assert_eq!(u32at(344), 0x5858_5858);
        assert_eq!(u32at(348), 0x5C5C_5C5C);
        assert_eq!((b[512], b[513]), (0x66, 0x44));
        assert_eq!(u16at(514), 0x0202);
        assert_eq!(u32at(516), 0x0404_0404);
        assert_eq!(u16at(520), 0x0808);
        assert_eq!(u16at(522), 0x0A0A);
        assert_eq!(b[525], 0x0D);
        assert_eq!(u16at(534), 0x1616);
        assert_eq!(u32at(536), 0x1818_1818);
        assert_eq!(u32at(540), 0x1C1C_1C1C);
        assert_eq!(&b[768..772], b"nqn.");
        assert_eq!(b[768 + 29], 0);
        assert_eq!(u32at(1792), 0x0700_0700);
        assert_eq!(u32at(1796), 0x0704_0704);
        assert_eq!(u16at(1800), 0x0708);
        assert_eq!((b[1802], b[1803]), (0x0A, 0x0B));
        assert_eq!(u16at(1804), 0x0C0C);
        assert_eq!(b[1806], 0x0E);
        assert_eq!(u16at(2048), 2500);
        assert_eq!(u32at(2052), 1);
        assert_eq!(u16at(2048 + 31 * 32), 7);
        // Reserved ranges stay zero.
        assert!(b[102..111].iter().all(|&x| x == 0));
        assert!(b[134..256].iter().all(|&x| x == 0));
        assert!(b[1024..1792].iter().all(|&x| x == 0));
        assert!(b[3072..].iter().all(|&x| x == 0));
        assert_eq!(IdentifyController::decode(&b[..]).unwrap(), c);
    }

    #[test]
    fn short_input() {
        assert!(matches!(
            IdentifyController::decode(&[0u8; 4095]),
            Err(DecodeError::Short {
                needed_bytes: 4096,
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn decode_encode_is_stable(seed in proptest::collection::vec(any::<u8>(), 4096)) {
            // Any 4096 bytes decode; re-encoding the decoded value and decoding again is a
            // fixed point (strings are normalized by the first decode).
            let c = IdentifyController::decode(&seed).unwrap();
            let c2 = IdentifyController::decode(&c.to_bytes()[..]).unwrap();
            prop_assert_eq!(c2, c);
        }

        #[test]
        fn roundtrip(cntlid: u16, mdts: u8, nn: u32, sgls: u32, ioccsz: u32, kas: u16,
                     sn in "[A-Z0-9]{1,20}", nqn in "nqn\\.[a-z0-9.:-]{1,200}", tnvmcap: u128,
                     mp: u16, enlat: u32) {
            let mut c = sample();
            c.cntlid = cntlid; c.mdts = mdts; c.nn = nn; c.sgls = sgls; c.ioccsz = ioccsz;
            c.kas = kas; c.sn = sn; c.subnqn = nqn; c.tnvmcap = tnvmcap;
            c.psd[3].mp = mp; c.psd[3].enlat_us = enlat;
            prop_assert_eq!(IdentifyController::decode(&c.to_bytes()[..]).unwrap(), c);
        }
    }
}
