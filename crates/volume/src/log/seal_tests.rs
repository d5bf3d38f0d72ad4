//! A seal the collector asks for while the pipeline is full (`MAX_INFLIGHT` segment
//! writes) goes out with the next completion. Before `gc_seal_owed`, an open segment of
//! moves alone then waited for a host write that never came (host writers were all
//! waiting for the space those moves free): the collector and every writer stalled.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use blockdev::{
    BlockDevice, FaultAction, FaultHandle, FaultOps, FaultRule, FaultyDevice, IoBuf, RamDevice,
    WriteFlags,
};
use rand::{Rng, SeedableRng};

use super::Compression;
use super::engine::{Item, MAX_INFLIGHT};
use super::test_support::{BS, MIB, config};
use crate::Volume;

/// Long enough that appending a few segments of moves (memory copies) ends first.
const WRITE_DELAY: Duration = Duration::from_millis(700);

fn block(seed: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    rand::rngs::StdRng::seed_from_u64(seed).fill(&mut b[..]);
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_seal_refused_by_a_full_pipeline_goes_out_with_the_next_completion() {
    let faulty: Vec<Arc<FaultyDevice>> = (0..4)
        .map(|i| {
            Arc::new(FaultyDevice::new(Arc::new(RamDevice::new(
                format!("m{i}"),
                32 * MIB,
            ))))
        })
        .collect();
    let handles: Vec<FaultHandle> = faulty.iter().map(|d| d.handle()).collect();
    let devs: Vec<Arc<dyn BlockDevice>> = faulty.iter().map(|d| d.clone() as _).collect();
    let vol = Volume::create("owed", config(Compression::Off), devs, vec![])
        .await
        .unwrap();
    // Only this test moves blocks and checkpoints.
    vol.abort_keeper();
    let log = vol.log.clone().unwrap();
    let per_segment = (log.geo.segment_bytes / BS as u64) as usize;
    // Live blocks for more than MAX_INFLIGHT full destinations.
    let blocks = (MAX_INFLIGHT + 2) * per_segment;
    for part in (0..blocks as u64).collect::<Vec<_>>().chunks(64) {
        let writes = part.iter().map(|&lba| {
            vol.write(
                lba * BS as u64,
                IoBuf::from_slice(&block(lba)),
                WriteFlags::default(),
            )
        });
        for r in futures::future::join_all(writes).await {
            r.unwrap();
        }
    }
    assert_eq!(log.st().inflight, 0);

    for h in &handles {
        h.add(FaultRule::new(
            FaultOps::WRITE,
            FaultAction::Delay(WRITE_DELAY),
        ));
    }
    // Move live blocks as the collector does until MAX_INFLIGHT destinations are being
    // written and the open one holds a few moves; then its end-of-round seal.
    let mut last_ticket = None;
    for lba in 0..blocks as u64 {
        let (loc, inflight, open_records) = {
            let st = log.st();
            (
                st.space.map[lba as usize],
                st.inflight,
                st.open.records.len(),
            )
        };
        if inflight == MAX_INFLIGHT && open_records >= 4 {
            break;
        }
        let stored = log
            .inner
            .read_volume(
                log.geo.segment_offset(loc.seg) + u64::from(loc.off),
                IoBuf::new_zeroed(loc.len as usize),
            )
            .await
            .unwrap();
        let t = log
            .append(
                Item::Block {
                    lba,
                    codec: loc.codec,
                    stored: &stored,
                    crc: loc.crc,
                    moved_from: Some((loc.seg, loc.off)),
                },
                false,
                true,
                false,
            )
            .await
            .unwrap();
        last_ticket = Some(t);
    }
    {
        let st = log.st();
        assert_eq!(
            st.inflight, MAX_INFLIGHT,
            "the moves did not fill the pipeline within the write delay"
        );
        assert!(!st.open.has_host() && !st.open.records.is_empty());
    }
    log.kick_seal(true);
    assert!(log.st().gc_seal_owed, "the seal should have been refused");
    for h in &handles {
        h.clear();
    }

    let ticket = last_ticket.unwrap();
    let mut rx = ticket.subscribe();
    tokio::time::timeout(
        WRITE_DELAY * 4,
        rx.wait_for(|r: &Option<std::result::Result<(), String>>| r.is_some()),
    )
    .await
    .expect("the moves-only segment was never written")
    .unwrap();
    assert!(!log.st().gc_seal_owed);
    assert!(ticket.borrow().as_ref().unwrap().is_ok());

    for lba in 0..blocks as u64 {
        let got = vol
            .read(lba * BS as u64, IoBuf::new_zeroed(BS))
            .await
            .unwrap();
        assert!(got[..] == block(lba)[..], "block {lba}");
    }
}
