//! Deallocate through Dataset Management.

use blockdev::IoBuf;
use nvme_proto::dsm::{DsmCommand, DsmRange, dsm_attr};

use super::RemoteNamespace;
use crate::error::Result;
use crate::queue::SubmitOptions;

/// Ranges per DSM command (the NR field is 8 bits, 0's based).
pub const DSM_MAX_RANGES: usize = DsmCommand::MAX_RANGES;

impl RemoteNamespace {
    /// Deallocates the range with DSM (AD): up to 256 ranges of up to 2^32-1 blocks each
    /// per command, several commands in flight for huge ranges.
    pub async fn deallocate_at(&self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.deallocate_with(offset_bytes, len_bytes, SubmitOptions::RETRY)
            .await
    }

    pub(crate) async fn deallocate_with(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        opts: SubmitOptions,
    ) -> Result<()> {
        self.check_aligned(offset_bytes, len_bytes)?;
        let first = offset_bytes >> self.lba_shift;
        let end = (offset_bytes + len_bytes) >> self.lba_shift;
        let per_range = u64::from(u32::MAX);
        let per_cmd = per_range * DSM_MAX_RANGES as u64;
        let nsid = self.nsid;
        let cmds = (first..end).step_by(per_cmd as usize).map(move |start| {
            let stop = (start + per_cmd).min(end);
            let ranges: Vec<DsmRange> = (start..stop)
                .step_by(per_range as usize)
                .map(|slba| DsmRange {
                    context_attributes: 0,
                    nlb: per_range.min(stop - slba) as u32,
                    slba,
                })
                .collect();
            let cmd = DsmCommand {
                ranges: ranges.len() as u16,
                attributes: dsm_attr::AD,
            }
            .to_command(0, nsid);
            (
                cmd,
                Some(IoBuf::from_slice(&DsmRange::encode_list(&ranges))),
            )
        });
        self.run_parallel(cmds, opts).await
    }
}
