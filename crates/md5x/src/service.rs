//! The multi-buffer worker: one thread hashing up to eight streams' blocks in lockstep.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::Md5;
use crate::consts::BLOCK_BYTES;
use crate::scalar;

/// Streams hashed at once.
pub const LANES: usize = 8;
/// Blocks every lane advances between looks at the queue (4 KiB each): a stream that
/// arrives waits at most this long for a free lane to be filled.
const STEP_BLOCKS: usize = 64;
/// Jobs waiting for a lane (each holds a reference to its data, not a copy).
const QUEUE_JOBS: usize = 256;
/// Updates smaller than this are hashed in place: a hand-off costs more than they do.
pub const MIN_LANE_BYTES: usize = 16 << 10;

/// Whole blocks of one stream to compress from `state`.
struct Job {
    state: [u32; 4],
    data: Bytes,
    reply: oneshot::Sender<[u32; 4]>,
}

/// A job in a lane: how far it got.
struct Lane {
    job: Job,
    done_bytes: usize,
}

/// The process's multi-buffer MD5 worker (a thread named `md5-lanes`).
#[derive(Debug)]
pub struct Md5Lanes {
    tx: mpsc::Sender<Job>,
}

/// Padding for idle lanes.
static IDLE: [u8; STEP_BLOCKS * BLOCK_BYTES] = [0; STEP_BLOCKS * BLOCK_BYTES];

impl Md5Lanes {
    /// The process-wide worker, started on first use; `None` when this CPU has no AVX2
    /// (then every stream hashes in place, which is as fast as one lane).
    pub fn shared() -> Option<Arc<Md5Lanes>> {
        static SHARED: OnceLock<Option<Arc<Md5Lanes>>> = OnceLock::new();
        SHARED.get_or_init(Md5Lanes::start).clone()
    }

    /// A new worker of its own (tests, benchmarks); `None` without AVX2.
    pub fn start() -> Option<Arc<Md5Lanes>> {
        if !lanes_supported() {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE_JOBS);
        std::thread::Builder::new()
            .name("md5-lanes".into())
            .spawn(move || run(rx))
            .ok()?;
        Some(Arc::new(Md5Lanes { tx }))
    }

    /// Compresses `data` (whole blocks) from `state` in a lane; the state after it.
    async fn compress(&self, state: [u32; 4], data: Bytes) -> [u32; 4] {
        let (reply, done) = oneshot::channel();
        // Whole blocks only (the caller's contract; a lane never waits for a partial one).
        let data = data.slice(..data.len() - data.len() % BLOCK_BYTES);
        let job = Job {
            state,
            data: data.clone(),
            reply,
        };
        if self.tx.send(job).await.is_ok()
            && let Ok(s) = done.await
        {
            return s;
        }
        // The worker is gone (it never exits while this handle lives; a panic would
        // end it): hash in place.
        let mut s = state;
        scalar::compress(&mut s, &data);
        s
    }
}

/// Whether this CPU runs the lanes (AVX2); without, every stream hashes in place.
pub fn lanes_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn run(mut rx: mpsc::Receiver<Job>) {
    let mut lanes: [Option<Lane>; LANES] = Default::default();
    let mut open = true;
    loop {
        let busy = lanes.iter().filter(|l| l.is_some()).count();
        if busy == 0 {
            if !open {
                return;
            }
            match rx.blocking_recv() {
                Some(job) => lanes[0] = Some(Lane { job, done_bytes: 0 }),
                None => return,
            }
        }
        // Fill free lanes with whatever waits.
        for slot in lanes.iter_mut().filter(|l| l.is_none()) {
            if !open {
                break;
            }
            match rx.try_recv() {
                Ok(job) => *slot = Some(Lane { job, done_bytes: 0 }),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        // A stream whose caller went away is dropped.
        for slot in lanes.iter_mut() {
            if slot.as_ref().is_some_and(|l| l.job.reply.is_closed()) {
                *slot = None;
            }
        }
        step(&mut lanes);
        for slot in lanes.iter_mut() {
            if slot
                .as_ref()
                .is_some_and(|l| l.job.data.len() - l.done_bytes < BLOCK_BYTES)
                && let Some(l) = slot.take()
            {
                let _ = l.job.reply.send(l.job.state);
            }
        }
    }
}

/// Advances every busy lane by up to [`STEP_BLOCKS`] blocks.
fn step(lanes: &mut [Option<Lane>; LANES]) {
    let left = |l: &Lane| (l.job.data.len() - l.done_bytes) / BLOCK_BYTES;
    let blocks = lanes
        .iter()
        .flatten()
        .map(left)
        .min()
        .unwrap_or(0)
        .min(STEP_BLOCKS);
    if blocks == 0 {
        return;
    }
    let bytes = blocks * BLOCK_BYTES;
    if lanes.iter().flatten().count() == 1 {
        // One stream: the scalar code does it with an eighth of the work.
        if let Some(l) = lanes.iter_mut().flatten().next() {
            let at = l.done_bytes;
            scalar::compress(&mut l.job.state, &l.job.data[at..at + bytes]);
            l.done_bytes += bytes;
        }
        return;
    }
    let mut states = [[0u32; 4]; LANES];
    for (s, l) in states.iter_mut().zip(lanes.iter()) {
        if let Some(l) = l {
            *s = l.job.state;
        }
    }
    // Idle lanes hash zeros; their results are dropped.
    let inputs: [&[u8]; LANES] = std::array::from_fn(|i| match &lanes[i] {
        Some(l) => &l.job.data[l.done_bytes..l.done_bytes + bytes],
        None => &IDLE[..bytes],
    });
    compress8(&mut states, &inputs, blocks);
    for (s, l) in states.iter().zip(lanes.iter_mut()) {
        if let Some(l) = l {
            l.job.state = *s;
            l.done_bytes += bytes;
        }
    }
}

/// Compresses `blocks` blocks of all eight `inputs` (each at least that long) into
/// `states`: in the lanes with AVX2, one by one without.
pub(crate) fn compress8(states: &mut [[u32; 4]; LANES], inputs: &[&[u8]; LANES], blocks: usize) {
    let bytes = blocks * BLOCK_BYTES;
    assert!(
        inputs.iter().all(|d| d.len() >= bytes),
        "compress8: input too short"
    );
    #[cfg(target_arch = "x86_64")]
    if lanes_supported() {
        let ptrs: [*const u8; LANES] = std::array::from_fn(|l| inputs[l].as_ptr());
        // SAFETY: AVX2 was detected; every input holds at least `blocks` blocks (asserted).
        #[allow(unsafe_code)]
        unsafe {
            crate::avx2::compress(states, &ptrs, blocks)
        };
        return;
    }
    for (s, d) in states.iter_mut().zip(inputs) {
        scalar::compress(s, &d[..bytes]);
    }
}

/// The MD5 of one upload: updates of [`MIN_LANE_BYTES`] or more go to the lanes (whole
/// blocks; the bytes around them are hashed in place), smaller ones are hashed in place.
#[derive(Debug, Default)]
pub struct StreamMd5 {
    md5: Md5,
    lanes: Option<Arc<Md5Lanes>>,
}

impl StreamMd5 {
    /// A stream on the shared lanes (in place without AVX2).
    pub fn new() -> StreamMd5 {
        StreamMd5::with_lanes(Md5Lanes::shared())
    }

    pub fn with_lanes(lanes: Option<Arc<Md5Lanes>>) -> StreamMd5 {
        StreamMd5 {
            md5: Md5::new(),
            lanes,
        }
    }

    /// Hashes `data` next. Cancel-safe only in that dropping it loses the stream: a
    /// stream whose update was dropped must not be used again.
    pub async fn update(&mut self, data: Bytes) {
        let Some(lanes) = self.lanes.clone() else {
            self.md5.update(&data);
            return;
        };
        if data.len() < MIN_LANE_BYTES {
            self.md5.update(&data);
            return;
        }
        let head = self.md5.to_boundary();
        self.md5.update(&data[..head]);
        let rest = data.slice(head..);
        let whole = rest.len() - rest.len() % BLOCK_BYTES;
        let state = lanes.compress(self.md5.state, rest.slice(..whole)).await;
        self.md5.advance_blocks(state, whole);
        self.md5.update(&rest[whole..]);
    }

    /// Hashes `data` in place (for bytes already at hand in small pieces).
    pub fn update_in_place(&mut self, data: &[u8]) {
        self.md5.update(data);
    }

    pub fn finalize(self) -> [u8; 16] {
        self.md5.finalize()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use md5::Digest;

    fn reference(data: &[u8]) -> [u8; 16] {
        md5::Md5::digest(data).into()
    }

    fn data(seed: u64, len: usize) -> Vec<u8> {
        testkit::data::pattern(len, seed)
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn eight_lanes_match_eight_scalar_runs() {
        if !lanes_supported() {
            testkit::prereq::missing_cpu_feature("AVX2 (the lane kernel)");
            return;
        }
        for blocks in [1usize, 2, 7, 64] {
            let inputs: Vec<Vec<u8>> = (0..LANES as u64)
                .map(|l| data(l + 100 * blocks as u64, blocks * BLOCK_BYTES))
                .collect();
            let mut states: [[u32; 4]; LANES] = std::array::from_fn(|l| {
                let s = data(l as u64 + 7, 16);
                std::array::from_fn(|w| u32::from_le_bytes(s[4 * w..4 * w + 4].try_into().unwrap()))
            });
            let mut want = states;
            for (s, d) in want.iter_mut().zip(&inputs) {
                scalar::compress(s, d);
            }
            let ptrs: [*const u8; LANES] = std::array::from_fn(|l| inputs[l].as_ptr());
            // SAFETY: AVX2 detected above; each input holds `blocks` whole blocks.
            #[allow(unsafe_code)]
            unsafe {
                crate::avx2::compress(&mut states, &ptrs, blocks)
            };
            assert_eq!(states, want, "{blocks} blocks");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_streams_at_once_match_the_reference() {
        let lanes = Md5Lanes::start();
        if lanes.is_none() {
            testkit::prereq::missing_cpu_feature("AVX2: every stream hashed in place, no lanes");
        }
        let mut tasks = Vec::new();
        for s in 0..20u64 {
            let lanes = lanes.clone();
            tasks.push(tokio::spawn(async move {
                let len = [0usize, 1, 63, 64, 65, 16 << 10, 100_000, 1 << 20][s as usize % 8]
                    + s as usize * 77;
                let all = data(s, len);
                let mut h = StreamMd5::with_lanes(lanes);
                let mut at = 0;
                let mut piece = 1 + (s as usize * 1237) % 40_000;
                while at < all.len() {
                    let n = piece.min(all.len() - at);
                    if n.is_multiple_of(3) {
                        h.update_in_place(&all[at..at + n]);
                    } else {
                        h.update(Bytes::copy_from_slice(&all[at..at + n])).await;
                    }
                    at += n;
                    piece = piece * 3 % 70_001 + 1;
                }
                (h.finalize(), reference(&all))
            }));
        }
        for t in tasks {
            let (got, want) = t.await.unwrap();
            assert_eq!(got, want);
        }
    }

    #[tokio::test]
    async fn a_dropped_update_does_not_stop_the_others() {
        let lanes = Md5Lanes::start();
        if lanes.is_none() {
            testkit::prereq::missing_cpu_feature("AVX2: no lane worker to drop an update in");
        }
        let big = Bytes::from(data(1, 8 << 20));
        let mut dropped = StreamMd5::with_lanes(lanes.clone());
        // Polled once (queued or in a lane), then dropped.
        let fut = dropped.update(big.clone());
        let _ = tokio::time::timeout(std::time::Duration::from_micros(1), fut).await;
        let small = data(2, 200_000);
        let mut h = StreamMd5::with_lanes(lanes);
        h.update(Bytes::from(small.clone())).await;
        assert_eq!(h.finalize(), reference(&small));
    }
}
