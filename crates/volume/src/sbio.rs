//! Reading and writing the two superblock copies of one member.

use blockdev::{BlockDevice, BlockError, IoBuf, WriteFlags};

use crate::format::{FormatError, SUPERBLOCK_BYTES, SUPERBLOCK_OFFSETS, Superblock};

/// What one member's superblock area holds.
#[derive(Debug)]
pub(crate) struct MemberRead {
    /// The best valid copy (highest generation, then seq).
    pub best: Option<Superblock>,
    /// Per copy: valid and identical to `best`.
    pub copy_current: [bool; 2],
    /// Why each copy was rejected, if it was.
    pub errors: [Option<FormatError>; 2],
}

impl MemberRead {
    pub fn needs_repair(&self) -> bool {
        self.best.is_some() && self.copy_current.iter().any(|ok| !ok)
    }
}

/// Reads both copies in one I/O.
pub(crate) async fn read_member(dev: &dyn BlockDevice) -> Result<MemberRead, BlockError> {
    let buf = dev.read(0, IoBuf::new_zeroed(2 * SUPERBLOCK_BYTES)).await?;
    let mut decoded: [Result<Superblock, FormatError>; 2] = [
        Superblock::decode(&buf[..SUPERBLOCK_BYTES]),
        Superblock::decode(&buf[SUPERBLOCK_BYTES..]),
    ];
    let best_index = match (&decoded[0], &decoded[1]) {
        (Ok(a), Ok(b)) if b.version_key() > a.version_key() => Some(1),
        (Ok(_), _) => Some(0),
        (Err(_), Ok(_)) => Some(1),
        (Err(_), Err(_)) => None,
    };
    let best = best_index.and_then(|i| decoded[i].as_ref().ok().cloned());
    let copy_current = [0, 1].map(|i| match (&decoded[i], &best) {
        (Ok(sb), Some(b)) => sb == b,
        _ => false,
    });
    let errors =
        [0, 1].map(|i| std::mem::replace(&mut decoded[i], Err(FormatError::BadMagic)).err());
    Ok(MemberRead {
        best,
        copy_current,
        errors,
    })
}

/// Writes copy A then copy B, each with FUA, so a crash leaves at least one valid copy.
pub(crate) async fn write_member(dev: &dyn BlockDevice, sb: &Superblock) -> Result<(), BlockError> {
    let bytes = sb.encode();
    let mut buf = IoBuf::from_slice(&bytes);
    for offset in SUPERBLOCK_OFFSETS {
        buf = dev.write(offset, buf, WriteFlags { fua: true }).await?;
    }
    Ok(())
}

/// Wipes both copies (FUA), e.g. before a device is reused.
pub(crate) async fn wipe_member(dev: &dyn BlockDevice) -> Result<(), BlockError> {
    let buf = IoBuf::new_zeroed(2 * SUPERBLOCK_BYTES);
    dev.write(0, buf, WriteFlags { fua: true }).await?;
    Ok(())
}
