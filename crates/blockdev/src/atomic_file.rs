//! Whole-file replacement that a crash cannot leave half done: small files that readers
//! take whole (registry entries, endpoints files).

use std::io::{self, Write};
use std::path::Path;

/// Replaces `path` with `data`: the bytes go to a new temporary file in the same
/// directory, which is synced, renamed over `path`, and the directory synced. A reader
/// (or a restart after a power cut) sees the old file or the new one, never a mix; two
/// writers at once each leave a whole file (the last rename wins). The file is readable
/// by its owner only (mode 0600: tempfile makes its files so), fit for secrets.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(data)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.json");
        write_atomic(&path, b"first").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        write_atomic(&path, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second, longer");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["entry.json"]);
    }

    #[test]
    fn concurrent_writers_each_leave_a_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bodies: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 64 << 10]).collect();
        std::thread::scope(|s| {
            for b in &bodies {
                let path = &path;
                s.spawn(move || write_atomic(path, b).unwrap());
            }
        });
        assert!(bodies.contains(&std::fs::read(&path).unwrap()));
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = write_atomic(&dir.path().join("no/such/f"), b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
