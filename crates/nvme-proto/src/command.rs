//! The 64-byte submission queue entry (SQE), kept as raw bytes with typed accessors.
//!
//! Layout (NVMe base 2.0, Figure "Common Command Format"):
//! 0 opcode, 1 flags (FUSE 1:0, PSDT 7:6), 2..4 CID, 4..8 NSID, 8..16 CDW2/3,
//! 16..24 MPTR, 24..40 DPTR (SGL1 on fabrics), 40..64 CDW10..CDW15.
//! Fabrics commands (opcode 0x7F) put FCTYPE at byte 4.

use crate::SQE_BYTES;
use crate::bytes::{le16, le32, le64, put16, put32, put64};
use crate::sgl::SglDescriptor;

/// A submission queue entry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Command(pub [u8; SQE_BYTES]);

impl Default for Command {
    fn default() -> Self {
        Command([0; SQE_BYTES])
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("opcode", &format_args!("{:#04x}", self.opcode()))
            .field("cid", &self.cid())
            .field("nsid", &self.nsid())
            .field("cdw10", &format_args!("{:#x}", self.cdw10()))
            .field("cdw11", &format_args!("{:#x}", self.cdw11()))
            .field("cdw12", &format_args!("{:#x}", self.cdw12()))
            .finish()
    }
}

impl Command {
    pub const fn from_bytes(b: [u8; SQE_BYTES]) -> Self {
        Command(b)
    }
    pub fn new(opcode: u8, cid: u16, nsid: u32) -> Self {
        let mut c = Command::default();
        c.0[0] = opcode;
        put16(&mut c.0, 2, cid);
        put32(&mut c.0, 4, nsid);
        c
    }

    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    pub fn flags(&self) -> u8 {
        self.0[1]
    }
    /// Fused operation bits (0 = normal).
    pub fn fuse(&self) -> u8 {
        self.0[1] & 0x3
    }
    /// PRP or SGL for data transfer: 0 = PRP, 1/2 = SGL. Fabrics requires SGL (1).
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    pub fn cid(&self) -> u16 {
        le16(&self.0, 2)
    }
    pub fn nsid(&self) -> u32 {
        le32(&self.0, 4)
    }
    /// FCTYPE of a fabrics command (byte 4; only meaningful when opcode is 0x7F).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    pub fn cdw2(&self) -> u32 {
        le32(&self.0, 8)
    }
    pub fn cdw3(&self) -> u32 {
        le32(&self.0, 12)
    }
    pub fn mptr(&self) -> u64 {
        le64(&self.0, 16)
    }
    pub fn sgl1(&self) -> SglDescriptor {
        let mut d = [0u8; 16];
        d.copy_from_slice(&self.0[24..40]);
        SglDescriptor::decode(&d)
    }
    pub fn cdw(&self, n: usize) -> u32 {
        // CDW n sits at byte 4*n for n in 0..16.
        le32(&self.0, 4 * n)
    }
    pub fn cdw10(&self) -> u32 {
        le32(&self.0, 40)
    }
    pub fn cdw11(&self) -> u32 {
        le32(&self.0, 44)
    }
    pub fn cdw12(&self) -> u32 {
        le32(&self.0, 48)
    }
    pub fn cdw13(&self) -> u32 {
        le32(&self.0, 52)
    }
    pub fn cdw14(&self) -> u32 {
        le32(&self.0, 56)
    }
    pub fn cdw15(&self) -> u32 {
        le32(&self.0, 60)
    }

    pub fn set_opcode(&mut self, v: u8) -> &mut Self {
        self.0[0] = v;
        self
    }
    pub fn set_flags(&mut self, v: u8) -> &mut Self {
        self.0[1] = v;
        self
    }
    pub fn set_cid(&mut self, v: u16) -> &mut Self {
        put16(&mut self.0, 2, v);
        self
    }
    pub fn set_nsid(&mut self, v: u32) -> &mut Self {
        put32(&mut self.0, 4, v);
        self
    }
    pub fn set_fctype(&mut self, v: u8) -> &mut Self {
        self.0[4] = v;
        self
    }
    pub fn set_sgl1(&mut self, d: SglDescriptor) -> &mut Self {
        self.0[24..40].copy_from_slice(&d.encode());
        self.0[1] = (self.0[1] & 0x3F) | (1 << 6);
        self
    }
    pub fn set_cdw(&mut self, n: usize, v: u32) -> &mut Self {
        put32(&mut self.0, 4 * n, v);
        self
    }
    pub fn set_cdw10(&mut self, v: u32) -> &mut Self {
        self.set_cdw(10, v)
    }
    pub fn set_cdw11(&mut self, v: u32) -> &mut Self {
        self.set_cdw(11, v)
    }
    pub fn set_cdw12(&mut self, v: u32) -> &mut Self {
        self.set_cdw(12, v)
    }
    pub fn set_cdw13(&mut self, v: u32) -> &mut Self {
        self.set_cdw(13, v)
    }
    pub fn set_cdw14(&mut self, v: u32) -> &mut Self {
        self.set_cdw(14, v)
    }
    pub fn set_cdw15(&mut self, v: u32) -> &mut Self {
        self.set_cdw(15, v)
    }

    /// Starting LBA of a Read/Write/Compare/Write Zeroes command (CDW10..11).
    pub fn slba(&self) -> u64 {
        le64(&self.0, 40)
    }
    pub fn set_slba(&mut self, v: u64) -> &mut Self {
        put64(&mut self.0, 40, v);
        self
    }
    /// Number of logical blocks (CDW12 bits 15:0 are 0's based).
    pub fn nlb(&self) -> u32 {
        (self.cdw12() & 0xFFFF) + 1
    }
    /// Force Unit Access (CDW12 bit 30).
    pub fn fua(&self) -> bool {
        self.cdw12() & (1 << 30) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_command_layout() {
        let mut c = Command::new(crate::opcode::io::READ, 0x1234, 1);
        c.set_slba(0x1_0000_0002).set_cdw12((1 << 30) | 7);
        let b = c.0;
        assert_eq!(b[0], 0x02);
        assert_eq!(&b[2..4], &[0x34, 0x12]);
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[40..48], &[2, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(c.nlb(), 8);
        assert!(c.fua());
    }

    #[test]
    fn sgl_sets_psdt() {
        let mut c = Command::new(crate::opcode::io::WRITE, 1, 1);
        c.set_sgl1(SglDescriptor::in_capsule(0, 512));
        assert_eq!(c.psdt(), 1);
        assert_eq!(c.sgl1().length, 512);
    }
}
