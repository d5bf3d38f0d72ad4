//! Model-based property test: random reads and writes of random sizes and offsets against a
//! `Vec<u8>` model, interleaved with member failures (by fault injection and by hand, never
//! more than the layout tolerates), replacements, returning members (partial rebuilds),
//! rebuilds, media corruption repaired by scrub, superblock corruption and restarts.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use blockdev::{
    BlockDevice, FaultAction, FaultHandle, FaultOps, FaultRule, FaultyDevice, RamDevice,
};
use common::*;
use proptest::prelude::*;
use volume::layout::{Family, Geometry};
use volume::{LevelSpec, MemberState, TaskPhase, Volume, VolumeState};

const MEMBER_BYTES: u64 = 3 * MIB;

#[derive(Clone)]
struct Dev {
    ram: Arc<RamDevice>,
    faults: FaultHandle,
    dev: Arc<dyn BlockDevice>,
}

fn new_dev(name: String) -> Dev {
    let ram = Arc::new(RamDevice::new(name, MEMBER_BYTES));
    let f = FaultyDevice::new(ram.clone());
    Dev {
        faults: f.handle(),
        ram,
        dev: Arc::new(f),
    }
}

struct World {
    level: LevelSpec,
    n: usize,
    su: u64,
    vol: Volume,
    model: Vec<u8>,
    /// Current device of each slot.
    slots: Vec<Dev>,
    /// A slot's previous device after it failed (may come back).
    away: Vec<Option<Dev>>,
    next_name: usize,
    /// Every device ever made, by name (to follow spares into slots).
    by_name: std::collections::HashMap<String, Dev>,
    log: Vec<String>,
}

impl World {
    fn lost_after(&self, extra: usize) -> bool {
        let st = self.vol.status();
        let mut lost: Vec<bool> = st
            .members
            .iter()
            .map(|m| m.state != MemberState::Active)
            .collect();
        lost[extra] = true;
        let g = Geometry::new(st.layout, st.member_data_bytes).unwrap();
        !g.survives(&lost)
    }

    fn state(&self, i: usize) -> MemberState {
        self.vol.status().members[i].state
    }

    async fn step(&mut self, kind: u8, a: u64, b: u64) {
        let size = self.model.len() as u64;
        match kind % 13 {
            0..=3 => {
                // Write: mostly small, sometimes several stripes.
                let sectors = if b.is_multiple_of(4) {
                    1 + b % (4 * self.su / 512 * 3)
                } else {
                    1 + b % 24
                };
                let len = (sectors * 512).min(size);
                let off = (a % ((size - len) / 512 + 1)) * 512;
                let mut r = rng(a ^ b);
                let data = random_bytes(&mut r, len as usize);
                self.log.push(format!("write {off}+{len}"));
                write(&self.vol, off, &data).await;
                self.model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            4 | 5 => {
                let len = (1 + b % 256) * 512;
                let len = len.min(size);
                let off = (a % ((size - len) / 512 + 1)) * 512;
                self.log.push(format!("read {off}+{len}"));
                let got = read(&self.vol, off, len as usize).await;
                assert!(
                    got == self.model[off as usize..(off + len) as usize],
                    "read {off}+{len} differs; log: {:?}",
                    self.log
                );
            }
            6 => {
                // A member fails: by fault injection (noticed at the next flush) or by hand.
                let i = (a % self.n as u64) as usize;
                if self.state(i) == MemberState::Failed || self.lost_after(i) {
                    return;
                }
                if b.is_multiple_of(2) {
                    self.log.push(format!("inject failure of {i}"));
                    let action = if b.is_multiple_of(4) {
                        FaultAction::IoError(5)
                    } else {
                        FaultAction::Offline
                    };
                    self.slots[i]
                        .faults
                        .add(FaultRule::new(FaultOps::ALL, action));
                    self.vol.flush().await.unwrap();
                } else {
                    self.log.push(format!("fail {i}"));
                    self.vol.fail_member(i).await.unwrap();
                }
                // Failed, or already taken over by a spare.
                let st = self.vol.status().members[i].clone();
                match st.state {
                    MemberState::Failed => {}
                    MemberState::Rebuilding => {
                        assert!(st.device.as_deref().is_some_and(|d| d.starts_with("spare")))
                    }
                    other => panic!("member {i} is {other:?} after failing; {:?}", self.log),
                }
                self.away[i] = Some(self.slots[i].clone());
            }
            7 => {
                // A failed slot gets a new device, or its old one back.
                let Some(i) = (0..self.n)
                    .map(|j| (j + a as usize) % self.n)
                    .find(|&j| self.state(j) == MemberState::Failed)
                else {
                    return;
                };
                let dev = match self.away[i].take() {
                    Some(old) if b.is_multiple_of(2) => {
                        self.log.push(format!("re-add old device to {i}"));
                        old.faults.clear();
                        old
                    }
                    _ => {
                        self.log.push(format!("replace {i}"));
                        self.new_dev("new")
                    }
                };
                self.vol.replace_member(i, dev.dev.clone()).await.unwrap();
                self.slots[i] = dev;
                assert_eq!(self.state(i), MemberState::Rebuilding);
            }
            8 => {
                if !self
                    .vol
                    .status()
                    .members
                    .iter()
                    .any(|m| m.state == MemberState::Rebuilding)
                {
                    return;
                }
                self.log.push("rebuild".into());
                let mut rx = self.vol.start_rebuild().await.unwrap();
                rx.wait_for(|p| p.phase != TaskPhase::Running)
                    .await
                    .unwrap();
                assert_eq!(rx.borrow().phase, TaskPhase::Done, "{:?}", self.log);
                assert!(
                    self.vol
                        .status()
                        .members
                        .iter()
                        .all(|m| m.state != MemberState::Rebuilding)
                );
            }
            9 => {
                // Media corruption of one shard, then scrub repairs it (only where the
                // layout can tell which copy is right: parity for m=1, any shard for m>=2,
                // a non-first copy for mirrors).
                if self.vol.status().state != VolumeState::Healthy {
                    return;
                }
                let st = self.vol.status();
                let g = Geometry::new(st.layout, st.member_data_bytes).unwrap();
                let row = a % g.rows();
                let member = match g.family() {
                    Family::Rotating { k, m } => {
                        let shards: Vec<usize> = g.row_shard_members(row).collect();
                        if m >= 2 {
                            shards[(b % (k + m) as u64) as usize]
                        } else {
                            shards[k]
                        }
                    }
                    Family::Near { copies } => {
                        let chunk = a % g.chunks();
                        let (member, r) = g.chunk_location(chunk, 1 + (b as usize % (copies - 1)));
                        let at = st.data_offset_bytes + r * self.su + (b % (self.su / 512)) * 512;
                        self.corrupt(member, at);
                        self.scrub_fixes().await;
                        return;
                    }
                };
                let at = st.data_offset_bytes + row * self.su + (b % (self.su / 512)) * 512;
                self.corrupt(member, at);
                self.scrub_fixes().await;
            }
            10 => {
                // One superblock copy of one member is destroyed; restart repairs it.
                let i = (a % self.n as u64) as usize;
                if self.state(i) != MemberState::Active {
                    return;
                }
                self.log
                    .push(format!("corrupt superblock copy {} of {i}", b % 2));
                self.slots[i]
                    .ram
                    .write_at((b % 2) * 4096 + 512 * (a % 8), &[0x5A; 512])
                    .unwrap();
                self.restart(true).await;
            }
            11 => {
                self.log
                    .push(format!("restart clean={}", b.is_multiple_of(2)));
                self.restart(b.is_multiple_of(2)).await;
            }
            _ => {
                // A hot spare: it takes a failed slot at once, or waits for the next failure.
                if !self.vol.status().spares.is_empty() {
                    return;
                }
                let d = self.new_dev("spare");
                self.log.push(format!("add spare {}", d.dev.info().name));
                self.vol.add_spare(d.dev.clone(), "rack9").await.unwrap();
            }
        }
        self.sync_slots();
    }

    fn new_dev(&mut self, prefix: &str) -> Dev {
        self.next_name += 1;
        let d = new_dev(format!("{prefix}{}", self.next_name));
        self.by_name.insert(d.dev.info().name.clone(), d.clone());
        d
    }

    /// Follows the volume's view of which device is in which slot.
    fn sync_slots(&mut self) {
        for (i, m) in self.vol.status().members.iter().enumerate() {
            if let Some(d) = m.device.as_ref().and_then(|n| self.by_name.get(n)) {
                self.slots[i] = d.clone();
            }
        }
    }

    fn corrupt(&mut self, member: usize, at: u64) {
        self.log.push(format!("corrupt member {member} at {at}"));
        let mut s = [0u8; 512];
        self.slots[member].ram.read_at(at, &mut s).unwrap();
        s[7] ^= 0xA5;
        self.slots[member].ram.write_at(at, &s).unwrap();
    }

    async fn scrub_fixes(&mut self) {
        let rep = self.vol.scrub().await.unwrap();
        assert_eq!(
            (rep.mismatches, rep.repaired),
            (1, 1),
            "{rep:?} {:?}",
            self.log
        );
        check_all(&self.vol, &self.model).await;
    }

    /// Stop (clean) or drop (unclean) and assemble again from the devices, returning
    /// members included: those that failed by an error come back stale and are
    /// partially rebuilt, those the operator failed stay out.
    async fn restart(&mut self, clean: bool) {
        if clean {
            self.vol.stop().await.unwrap();
        }
        let mut devs: Vec<Arc<dyn BlockDevice>> = Vec::new();
        let mut kept_out = Vec::new();
        for i in 0..self.n {
            let st = self.vol.status().members[i].clone();
            if st.state != MemberState::Failed {
                devs.push(self.slots[i].dev.clone());
            } else if let Some(old) = self.away[i].take() {
                old.faults.clear();
                devs.push(old.dev.clone());
                if st.failed_by_operator {
                    kept_out.push((i, old.ram.info().name.clone()));
                }
                self.slots[i] = old;
            }
        }
        for s in self.vol.status().spares {
            if let Some(d) = s.device.as_ref().and_then(|n| self.by_name.get(n)) {
                devs.push(d.dev.clone());
            }
        }
        devs.reverse();
        let vol = Volume::assemble_with(devs, test_options()).await.unwrap();
        self.vol = vol;
        for (i, old) in kept_out {
            // Out, or its slot taken by a spare: never its old device.
            let m = &self.vol.status().members[i];
            assert_ne!(m.device.as_deref(), Some(old.as_str()), "{:?}", self.log);
        }
        for (i, m) in self.vol.status().members.iter().enumerate() {
            if m.state == MemberState::Failed {
                self.away[i] = Some(self.slots[i].clone());
            }
        }
        self.sync_slots();
        check_all(&self.vol, &self.model).await;
    }
}

fn layout(i: u8) -> (LevelSpec, usize) {
    match i % 7 {
        0 => (LevelSpec::Raid5, 4),
        1 => (LevelSpec::Raid6, 5),
        2 => (LevelSpec::Erasure { k: 4, m: 2 }, 6),
        3 => (LevelSpec::Raid1, 2),
        4 => (LevelSpec::Raid1, 3),
        5 => (LevelSpec::Raid10 { copies: 2 }, 4),
        _ => (LevelSpec::Raid10 { copies: 2 }, 3),
    }
}

async fn run_case(layout_index: u8, su_log: u8, ops: Vec<(u8, u64, u64)>) {
    let (level, n) = layout(layout_index);
    let su = 4096u64 << (su_log % 3 * 2);
    let slots: Vec<Dev> = (0..n).map(|i| new_dev(format!("m{i}"))).collect();
    let by_name = slots
        .iter()
        .map(|d| (d.dev.info().name.clone(), d.clone()))
        .collect();
    let devs = slots.iter().map(|d| d.dev.clone()).collect();
    let vol = Volume::create("model", config(level, su, 256 << 10), devs, vec![])
        .await
        .unwrap();
    let model = vec![0u8; vol.size_bytes() as usize];
    let mut w = World {
        level,
        n,
        su,
        vol,
        model,
        slots,
        away: vec![None; n],
        next_name: 0,
        by_name,
        log: vec![format!("{level} on {n}, su {su}")],
    };
    for (kind, a, b) in ops {
        w.step(kind, a, b).await;
    }
    // Finish: every rebuilding member rebuilt, then everything must read back and agree.
    if w.vol
        .status()
        .members
        .iter()
        .any(|m| m.state == MemberState::Rebuilding)
    {
        w.step(8, 0, 0).await;
    }
    check_all(&w.vol, &w.model).await;
    if std::env::var_os("MODEL_LOG").is_some() {
        let kinds = [
            "inject",
            "fail ",
            "replace",
            "re-add",
            "rebuild",
            "corrupt member",
            "corrupt superblock",
            "restart",
            "add spare",
        ];
        let counts: Vec<String> = kinds
            .iter()
            .map(|k| format!("{k}:{}", w.log.iter().filter(|l| l.starts_with(k)).count()))
            .collect();
        eprintln!("{} {}", w.log[0], counts.join(" "));
    }
    if w.vol.status().state == VolumeState::Healthy {
        let rep = w.vol.scrub().await.unwrap();
        assert_eq!(rep.mismatches, 0, "{rep:?} {:?} {}", w.log, w.level);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn volume_matches_model(
        layout_index in 0u8..7,
        su_log in 0u8..3,
        ops in proptest::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 1..70),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_case(layout_index, su_log, ops));
    }
}
