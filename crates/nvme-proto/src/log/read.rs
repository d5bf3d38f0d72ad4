//! Serving partial reads of a log page: Get Log Page with an offset and a length.
//!
//! A host may read any dword-aligned window of a page (libnvme reads the discovery log
//! header, then the entries in pieces, then the header again). Bytes past the end of the
//! page read as zero; an offset that is not a multiple of 4, or one past the end of the
//! page, gets Invalid Field in Command.

use thiserror::Error;

use crate::status::Status;

/// Why a log page window cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum LogReadError {
    #[error("log page offset {offset} is not dword aligned")]
    Misaligned { offset: u64 },
    #[error("log page offset {offset} is past the end of the {page_bytes}-byte page")]
    PastEnd { offset: u64, page_bytes: usize },
}

impl LogReadError {
    /// The completion status for the command: Invalid Field in Command, DNR.
    pub const fn status(&self) -> Status {
        Status::INVALID_FIELD.dnr()
    }
}

/// A window of a log page: `data` from the page, then `zero_fill_bytes` zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPageRead<'a> {
    pub data: &'a [u8],
    pub zero_fill_bytes: u64,
}

impl LogPageRead<'_> {
    /// Total bytes of the window.
    pub fn len_bytes(&self) -> u64 {
        self.data.len() as u64 + self.zero_fill_bytes
    }
}

/// The window of `len_bytes` at byte `offset` of the encoded `page`, without copying.
/// An offset equal to the page length is allowed and reads only zeroes.
pub fn log_page_range(
    page: &[u8],
    offset: u64,
    len_bytes: u64,
) -> Result<LogPageRead<'_>, LogReadError> {
    if !offset.is_multiple_of(4) {
        return Err(LogReadError::Misaligned { offset });
    }
    let start = usize::try_from(offset)
        .ok()
        .filter(|&s| s <= page.len())
        .ok_or(LogReadError::PastEnd {
            offset,
            page_bytes: page.len(),
        })?;
    let avail = (page.len() - start) as u64;
    let take = avail.min(len_bytes) as usize;
    Ok(LogPageRead {
        data: &page[start..start + take],
        zero_fill_bytes: len_bytes - take as u64,
    })
}

/// Copies the window at `offset` of `page` into `out` (its length is the request length),
/// zero-filling past the end of the page.
pub fn read_log_page(page: &[u8], offset: u64, out: &mut [u8]) -> Result<(), LogReadError> {
    let r = log_page_range(page, offset, out.len() as u64)?;
    let (head, tail) = out.split_at_mut(r.data.len());
    head.copy_from_slice(r.data);
    tail.fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn windows() {
        let page: Vec<u8> = (0..16).collect();
        let mut out = [0xEEu8; 8];
        read_log_page(&page, 12, &mut out).unwrap();
        assert_eq!(out, [12, 13, 14, 15, 0, 0, 0, 0]);
        read_log_page(&page, 0, &mut out).unwrap();
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 6, 7]);
        let r = log_page_range(&page, 16, 4).unwrap();
        assert_eq!((r.data.len(), r.zero_fill_bytes), (0, 4));
        assert_eq!(
            log_page_range(&page, 2, 4),
            Err(LogReadError::Misaligned { offset: 2 })
        );
        assert_eq!(
            log_page_range(&page, 20, 4),
            Err(LogReadError::PastEnd {
                offset: 20,
                page_bytes: 16
            })
        );
        assert_eq!(
            LogReadError::Misaligned { offset: 1 }.status(),
            Status::INVALID_FIELD.dnr()
        );
        // A huge request is described, not allocated.
        let r = log_page_range(&page, 4, u64::MAX).unwrap();
        assert_eq!(r.data, &page[4..]);
        assert_eq!(r.zero_fill_bytes, u64::MAX - 12);
    }

    proptest! {
        #[test]
        fn window_matches_model(page in proptest::collection::vec(any::<u8>(), 0..300), off in 0u64..400, len in 0usize..400) {
            let mut out = vec![0xAAu8; len];
            match read_log_page(&page, off, &mut out) {
                Ok(()) => {
                    prop_assert!(off % 4 == 0 && off as usize <= page.len());
                    for (i, b) in out.iter().enumerate() {
                        let want = page.get(off as usize + i).copied().unwrap_or(0);
                        prop_assert_eq!(*b, want);
                    }
                }
                Err(_) => prop_assert!(off % 4 != 0 || off as usize > page.len()),
            }
        }
    }
}
