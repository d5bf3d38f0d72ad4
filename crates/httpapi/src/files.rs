//! Writing the small files of keys, tokens and certificates.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Writes `bytes` to `path` through `path.tmp` created with `mode` (a secret is never
/// readable by others, not even for a moment), synced, then renamed into place.
pub(crate) fn write_replacing(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    f.write_all(bytes).and_then(|()| f.sync_all())?;
    std::fs::rename(&tmp, path)
}
