//! Discovery referrals against the real target: `discover_all` follows referral entries
//! to other discovery services, visits each once (a referral loop ends), and skips a dead
//! referral with a warning instead of failing.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use blockdev::RamDevice;
use common::host;
use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::log::discovery::subtype;
use nvmf_host::discovery::{discover, discover_all};
use nvmf_target::{ListenerHandle, NamespaceConfig, SubsystemConfig, Target, TargetConfig};

const LIMIT: Duration = Duration::from_secs(30);

async fn target_with(nqn: &str) -> (Target, ListenerHandle) {
    let t = Target::new(TargetConfig::default()).unwrap();
    t.add_subsystem(SubsystemConfig::new(nqn)).unwrap();
    let dev = Arc::new(RamDevice::new("ram0", 1 << 20));
    t.add_namespace(nqn, NamespaceConfig::whole_device(1, dev))
        .unwrap();
    let l = t.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    (t, l)
}

fn subsystems(entries: &[nvmf_host::DiscoveryEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| e.subtype == subtype::NVME)
        .map(|e| e.subnqn.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referrals_are_followed_once_and_dead_ones_skipped() {
    tokio::time::timeout(LIMIT, async {
        let (a, la) = target_with("nqn.2026-01.io.ferrobay.test:ref-a").await;
        let (b, lb) = target_with("nqn.2026-01.io.ferrobay.test:ref-b").await;
        let (_c, lc) = target_with("nqn.2026-01.io.ferrobay.test:ref-c").await;
        let h = host();

        // A alone: its own subsystem, no referral entries.
        let only_a = discover(la.local_addr(), &h).await.unwrap();
        assert_eq!(
            subsystems(&only_a),
            BTreeSet::from(["nqn.2026-01.io.ferrobay.test:ref-a".to_string()])
        );

        // A -> B -> C, and B -> A (a loop), plus a referral to a closed port.
        assert!(a.add_referral(lb.local_addr()));
        assert!(
            !a.add_referral(lb.local_addr()),
            "a referral is listed once"
        );
        assert!(b.add_referral(lc.local_addr()));
        assert!(b.add_referral(la.local_addr()));
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert!(a.add_referral(dead));

        let from_a = discover(la.local_addr(), &h).await.unwrap();
        let refs: BTreeSet<String> = from_a
            .iter()
            .filter(|e| e.subtype == subtype::REFERRAL)
            .map(|e| {
                assert_eq!(e.subnqn, DISCOVERY_NQN);
                format!("{}:{}", e.traddr, e.trsvcid)
            })
            .collect();
        assert_eq!(
            refs,
            BTreeSet::from([lb.local_addr().to_string(), dead.to_string()])
        );

        let all = discover_all(la.local_addr(), &h).await.unwrap();
        assert_eq!(
            subsystems(&all),
            BTreeSet::from([
                "nqn.2026-01.io.ferrobay.test:ref-a".to_string(),
                "nqn.2026-01.io.ferrobay.test:ref-b".to_string(),
                "nqn.2026-01.io.ferrobay.test:ref-c".to_string(),
            ])
        );
        // Each service was read once: A's own subsystem appears once despite B -> A.
        let a_entries = all
            .iter()
            .filter(|e| e.subnqn == "nqn.2026-01.io.ferrobay.test:ref-a")
            .count();
        assert_eq!(a_entries, 1);

        // Removing a referral takes it out of the log.
        assert!(a.remove_referral(dead));
        assert!(!a.remove_referral(dead));
        let after = discover(la.local_addr(), &h).await.unwrap();
        assert_eq!(
            after
                .iter()
                .filter(|e| e.subtype == subtype::REFERRAL)
                .count(),
            1
        );
        assert_eq!(a.referrals(), vec![lb.local_addr()]);
    })
    .await
    .expect("referral test timed out");
}
