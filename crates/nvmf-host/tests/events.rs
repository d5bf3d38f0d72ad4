//! Asynchronous events against the real target (crates/nvmf-target) in-process: the
//! controller keeps one AER outstanding and publishes what each event says on its watch
//! channel.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use blockdev::RamDevice;
use common::host;
use nvme_proto::fabrics::DISCOVERY_NQN;
use nvme_proto::log::ana_state;
use nvme_proto::log::discovery::subtype;
use nvmf_host::{ConnectOptions, Controller};
use nvmf_target::{AnaState, NamespaceConfig, SubsystemConfig, Target, TargetConfig};

const LIMIT: Duration = Duration::from_secs(30);
const NQN: &str = "nqn.2026-01.io.ferrobay.test:host-events";

fn opts() -> ConnectOptions {
    ConnectOptions {
        io_queues: 1,
        queue_size: 32,
        io_timeout_ms: 10_000,
        admin_timeout_ms: 10_000,
        ..ConnectOptions::default()
    }
}

fn target_with_ns(nsids: &[u32]) -> Target {
    let target = Target::new(TargetConfig::default()).unwrap();
    target.add_subsystem(SubsystemConfig::new(NQN)).unwrap();
    for &nsid in nsids {
        let dev = Arc::new(RamDevice::new(format!("ram{nsid}"), 4 << 20));
        target
            .add_namespace(NQN, NamespaceConfig::whole_device(nsid, dev))
            .unwrap();
    }
    target
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_attribute_changed_rereads_the_changed_list() {
    tokio::time::timeout(LIMIT, async {
        let target = target_with_ns(&[1]);
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let c = Controller::connect(l.local_addr(), NQN, &host(), &opts())
            .await
            .unwrap();
        let mut w = c.watch();
        assert_eq!(c.active_namespaces().await.unwrap(), vec![1]);
        let dev = Arc::new(RamDevice::new("ram2", 4 << 20));
        target
            .add_namespace(NQN, NamespaceConfig::whole_device(2, dev))
            .unwrap();
        let st = w.wait_for(|s| s.ns_changes >= 1).await.unwrap().clone();
        assert_eq!(&st.changed_namespaces[..], &[2]);
        assert_eq!(
            st.last_event.map(|e| (e.event_type, e.info, e.log_page)),
            Some((2, 0x00, 0x04))
        );
        assert_eq!(c.active_namespaces().await.unwrap(), vec![1, 2]);
        // The event was re-armed: a second change is reported too.
        target.remove_namespace(NQN, 1).unwrap();
        let st = w.wait_for(|s| s.ns_changes >= 2).await.unwrap().clone();
        assert_eq!(&st.changed_namespaces[..], &[1]);
        assert!(st.events >= 2);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_log_change_rereads_the_log() {
    tokio::time::timeout(LIMIT, async {
        let target = target_with_ns(&[1]);
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        // A persistent discovery controller (keep-alive on) gets discovery log changes.
        let o = ConnectOptions {
            io_queues: 0,
            kato_ms: 5000,
            ..opts()
        };
        let c = Controller::connect(l.local_addr(), DISCOVERY_NQN, &host(), &o)
            .await
            .unwrap();
        assert!(c.is_discovery());
        let mut w = c.watch();
        let l2 = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let st = w
            .wait_for(|s| s.discovery_changes >= 1)
            .await
            .unwrap()
            .clone();
        let log = st.discovery_log.expect("log re-read");
        let ports: Vec<String> = log
            .entries
            .iter()
            .filter(|e| e.subtype == subtype::NVME && e.subnqn == NQN)
            .map(|e| e.trsvcid.clone())
            .collect();
        assert!(
            ports.contains(&l2.local_addr().port().to_string()),
            "{ports:?}"
        );
        assert_eq!(log.genctr, target.discovery_generation());
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ana_change_rereads_the_ana_log() {
    tokio::time::timeout(LIMIT, async {
        let target = target_with_ns(&[1]);
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let c = Controller::connect(l.local_addr(), NQN, &host(), &opts())
            .await
            .unwrap();
        let ns = c.namespace(1).await.unwrap();
        let grp = ns.id().anagrpid;
        assert_ne!(grp, 0, "the target reports ANA groups");
        let st = c.status();
        assert_eq!(st.ana_state_of(1, grp), ana_state::OPTIMIZED, "{st:?}");
        let mut w = c.watch();
        l.set_ana_state(grp, AnaState::NonOptimized).unwrap();
        let st = w
            .wait_for(|s| s.ana_state_of(1, grp) == ana_state::NON_OPTIMIZED)
            .await
            .unwrap()
            .clone();
        assert_eq!(
            st.last_event.map(|e| (e.event_type, e.info, e.log_page)),
            Some((2, 0x03, 0x0C))
        );
        l.set_ana_state(grp, AnaState::Inaccessible).unwrap();
        w.wait_for(|s| s.ana_state_of(1, grp) == ana_state::INACCESSIBLE)
            .await
            .unwrap();
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_reconnects_and_rearms_events() {
    tokio::time::timeout(LIMIT, async {
        let target = target_with_ns(&[1]);
        let l = target.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let c = Controller::connect(l.local_addr(), NQN, &host(), &opts())
            .await
            .unwrap();
        let mut w = c.watch();
        let before = c.cntlid();
        c.reset("test");
        w.wait_for(|s| s.generation == 2 && s.is_live())
            .await
            .unwrap();
        assert_ne!(c.cntlid(), before, "a new controller after the reset");
        assert!(
            c.status()
                .last_error
                .unwrap()
                .contains("reset requested: test"),
            "{:?}",
            c.status()
        );
        // Events still arrive on the new connection.
        let dev = Arc::new(RamDevice::new("ram2", 4 << 20));
        target
            .add_namespace(NQN, NamespaceConfig::whole_device(2, dev))
            .unwrap();
        w.wait_for(|s| s.ns_changes >= 1).await.unwrap();
    })
    .await
    .unwrap();
}
