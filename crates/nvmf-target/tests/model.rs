//! Random writes and reads at many sizes and offsets, in-capsule and through R2T, with
//! and without digests, checked against a Vec<u8> model of the namespace.

mod common;

use common::*;
use nvme_proto::Status;
use nvmf_target::TargetConfig;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Write {
        slba: u64,
        nlb: u32,
        in_capsule: bool,
        seed: u64,
    },
    Read {
        slba: u64,
        nlb: u32,
    },
}

/// Model size: the first 4 MiB of the namespace.
const SPAN_BLOCKS: u64 = 8192;

fn op() -> impl Strategy<Value = Op> {
    let nlb = prop_oneof![1u32..=32, 1u32..=2048];
    prop_oneof![
        (0..SPAN_BLOCKS, nlb.clone(), any::<bool>(), any::<u64>()).prop_map(|(s, n, ic, seed)| {
            Op::Write {
                slba: s.min(SPAN_BLOCKS - u64::from(n)),
                nlb: n,
                in_capsule: ic,
                seed,
            }
        }),
        (0..SPAN_BLOCKS, nlb).prop_map(|(s, n)| Op::Read {
            slba: s.min(SPAN_BLOCKS - u64::from(n)),
            nlb: n
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, .. ProptestConfig::default() })]
    #[test]
    fn matches_model(ops in proptest::collection::vec(op(), 10..40), hd: bool, dd: bool) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async move {
            let t = start_target(TargetConfig::default()).await;
            let a = Client::admin(t.addr, SUBNQN, 0).await;
            let mut q = Client::io_queue(t.addr, a.cntlid, 1, hd, dd).await;
            let mut model = vec![0u8; (SPAN_BLOCKS * 512) as usize];
            for op in ops {
                match op {
                    Op::Write { slba, nlb, in_capsule, seed } => {
                        let len = nlb as usize * 512;
                        let d = pattern(len, seed);
                        q.submit(write_cmd(1, slba, nlb), Some(&d), 0, in_capsule).await;
                        match q.next_event().await {
                            Event::Done(c, _) => assert_eq!(c.status, Status::SUCCESS),
                            e => panic!("{e:?}"),
                        }
                        let off = slba as usize * 512;
                        model[off..off + len].copy_from_slice(&d);
                    }
                    Op::Read { slba, nlb } => {
                        let len = nlb as usize * 512;
                        let (c, back) = q.exec(read_cmd(1, slba, nlb), None, len).await;
                        assert_eq!(c.status, Status::SUCCESS);
                        let off = slba as usize * 512;
                        assert!(back == model[off..off + len], "read {slba}+{nlb} differs from the model");
                    }
                }
            }
        });
    }
}
