//! io_uring engine: one submission/completion thread per device, fed by a bounded channel.
//!
//! Callers push a request into the channel and, if the ring thread is asleep, poke an
//! eventfd on which the thread always keeps a read outstanding in the ring, so a single
//! `io_uring_enter` waits for both new work and completions. Results go back through
//! oneshot channels. Buffers live in the thread's slot table until their completion
//! arrives, so a caller that gives up never frees memory the kernel is still using.
//!
//! Shutdown: dropping [`Uring`] closes the channel and pokes the eventfd. The thread
//! finishes the I/O in flight, then, if its eventfd read is still armed, pokes the eventfd
//! itself and waits for that read's completion too: only when the kernel has given back
//! every buffer (no slot in flight, no wake read armed) does the thread return and free
//! them. Closing the ring fd does not wait for requests to be cancelled, so returning any
//! earlier would let the kernel write 8 bytes into a freed `wake_buf`.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, OnceLock};

use io_uring::{IoUring, opcode, squeue, types};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

use super::op::{Done, Op, Request};
use super::sys;
use crate::{BlockError, IoBuf};

const WAKE_TOKEN: u64 = u64::MAX;
/// Largest byte count in one SQE; longer I/Os continue like short reads/writes.
const MAX_SQE_BYTES: usize = 1 << 30;
const MAX_DEPTH: u32 = 4096;

struct Shared {
    wake_fd: OwnedFd,
    /// Set by the ring thread before it blocks with room for more work; a submitter that
    /// finds it set clears it and pokes the eventfd (Dekker-style with SeqCst fences).
    sleeping: AtomicBool,
    /// Set by the ring thread as it lets go of its buffers: what the kernel still had.
    exit: OnceLock<RingExit>,
}

/// The kernel's outstanding references when the ring thread returned. Always none (the
/// loop returns only then); kept so tests can check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RingExit {
    in_flight: usize,
    wake_read_armed: bool,
}

pub(crate) struct Uring {
    tx: Option<mpsc::Sender<Request>>,
    shared: Arc<Shared>,
}

impl Uring {
    /// Sets up a ring and checks that it really works (seccomp filters may allow setup but
    /// not submission); errors mean "use the thread pool".
    pub(crate) fn start(file: Arc<File>, depth: u32, name: &str) -> io::Result<Uring> {
        let depth = depth.clamp(1, MAX_DEPTH);
        let mut ring = IoUring::new((depth + 1).next_power_of_two())?;
        probe(&mut ring)?;
        let shared = Arc::new(Shared {
            wake_fd: sys::eventfd()?,
            sleeping: AtomicBool::new(false),
            exit: OnceLock::new(),
        });
        let (tx, rx) = mpsc::channel(depth as usize);
        let thread = RingThread {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            depth: depth as usize,
            wake_armed: false,
            wake_buf: Box::new(0),
            file,
            rx,
            shared: shared.clone(),
        };
        std::thread::Builder::new()
            .name(format!("blk-uring-{name}"))
            .spawn(move || thread.run())?;
        Ok(Uring {
            tx: Some(tx),
            shared,
        })
    }

    pub(crate) async fn submit(&self, op: Op) -> Result<Done, BlockError> {
        let tx = self.tx.as_ref().ok_or(BlockError::Closed)?;
        let (reply, done) = oneshot::channel();
        tx.send(Request { op, reply })
            .await
            .map_err(|_| BlockError::Closed)?;
        fence(Ordering::SeqCst);
        if self.shared.sleeping.swap(false, Ordering::SeqCst) {
            sys::eventfd_signal(&self.shared.wake_fd);
        }
        done.await.map_err(|_| BlockError::Closed)
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // Closing the channel and waking the thread lets it drain in-flight I/O and exit.
        self.tx = None;
        sys::eventfd_signal(&self.shared.wake_fd);
    }
}

fn probe(ring: &mut IoUring) -> io::Result<()> {
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    for code in [opcode::Read::CODE, opcode::Write::CODE, opcode::Fsync::CODE] {
        if !probe.is_supported(code) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring lacks read/write/fsync",
            ));
        }
    }
    let nop = opcode::Nop::new().build().user_data(0);
    // SAFETY: a NOP references no memory.
    #[allow(unsafe_code)]
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    ring.submit_and_wait(1)?;
    match ring.completion().next() {
        Some(cqe) if cqe.result() >= 0 => Ok(()),
        Some(cqe) => Err(io::Error::from_raw_os_error(-cqe.result())),
        None => Err(io::Error::other("io_uring NOP did not complete")),
    }
}

enum Kind {
    Read {
        offset_bytes: u64,
        buf: IoBuf,
    },
    Write {
        offset_bytes: u64,
        buf: IoBuf,
        fua: bool,
    },
    Flush,
}

struct Slot {
    kind: Kind,
    done_bytes: usize,
    reply: oneshot::Sender<Done>,
}

/// Field order: the ring is dropped (closed) before the buffers. `run` returns only when
/// the kernel holds none of them; after a panic, `Drop` leaks those it may still hold.
struct RingThread {
    ring: IoUring,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    in_flight: usize,
    depth: usize,
    /// A read into `wake_buf` is queued in the ring and its completion not yet reaped.
    wake_armed: bool,
    wake_buf: Box<u64>,
    file: Arc<File>,
    rx: mpsc::Receiver<Request>,
    shared: Arc<Shared>,
}

impl Drop for RingThread {
    fn drop(&mut self) {
        // Only after a panic can the kernel still hold buffers here (`run` returns when it
        // holds none): it may write into them after the ring is closed, so leak them
        // rather than free them.
        if self.in_flight > 0 {
            std::mem::forget(std::mem::take(&mut self.slots));
        }
        if self.wake_armed {
            std::mem::forget(std::mem::replace(&mut self.wake_buf, Box::new(0)));
        }
    }
}

impl RingThread {
    fn run(mut self) {
        let mut closing = false;
        // The eventfd was poked to complete the wake read during shutdown.
        let mut wake_poked = false;
        let mut reaped: Vec<(u64, i32)> = Vec::with_capacity(self.depth + 1);
        loop {
            while !closing && self.in_flight < self.depth {
                match self.rx.try_recv() {
                    Ok(req) => self.start(req),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => closing = true,
                }
            }
            if closing && self.in_flight == 0 {
                if !self.wake_armed {
                    break;
                }
                // The read on the eventfd is still queued: complete it (the counter is
                // ours, nobody else reads it) and reap it before `wake_buf` is freed.
                if !wake_poked {
                    sys::eventfd_signal(&self.shared.wake_fd);
                    wake_poked = true;
                }
            }
            if !self.wake_armed && !closing {
                let entry = opcode::Read::new(
                    types::Fd(self.shared.wake_fd.as_raw_fd()),
                    (&mut *self.wake_buf as *mut u64).cast::<u8>(),
                    8,
                )
                .build()
                .user_data(WAKE_TOKEN);
                self.push(&entry);
                self.wake_armed = true;
            }
            if !closing && self.in_flight < self.depth {
                self.shared.sleeping.store(true, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                match self.rx.try_recv() {
                    Ok(req) => {
                        self.shared.sleeping.store(false, Ordering::SeqCst);
                        self.start(req);
                        continue;
                    }
                    Err(TryRecvError::Disconnected) => {
                        self.shared.sleeping.store(false, Ordering::SeqCst);
                        closing = true;
                        continue;
                    }
                    Err(TryRecvError::Empty) => {}
                }
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                match e.raw_os_error() {
                    Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {}
                    _ => {
                        tracing::error!(error = %e, "io_uring_enter failed; retrying");
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                }
            }
            self.shared.sleeping.store(false, Ordering::SeqCst);
            reaped.clear();
            reaped.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(token, res) in &reaped {
                if token == WAKE_TOKEN {
                    self.wake_armed = false;
                } else if let Ok(idx) = usize::try_from(token) {
                    self.complete(idx, res);
                }
            }
        }
        let _ = self.shared.exit.set(RingExit {
            in_flight: self.in_flight,
            wake_read_armed: self.wake_armed,
        });
        // Dropping `self` now closes the ring and frees the buffers: the kernel holds none.
    }

    fn start(&mut self, req: Request) {
        let kind = match req.op {
            Op::Read { offset_bytes, buf } => Kind::Read { offset_bytes, buf },
            Op::Write {
                offset_bytes,
                buf,
                fua,
            } => Kind::Write {
                offset_bytes,
                buf,
                fua,
            },
            Op::Flush => Kind::Flush,
            Op::Zero { offset_bytes, .. } => {
                let err =
                    io::Error::new(io::ErrorKind::Unsupported, "zeroing goes to the admin pool");
                let _ = req.reply.send(Err((err, offset_bytes)));
                return;
            }
        };
        let slot = Slot {
            kind,
            done_bytes: 0,
            reply: req.reply,
        };
        let idx = match self.free.pop() {
            Some(idx) => {
                self.slots[idx] = Some(slot);
                idx
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.in_flight += 1;
        self.submit_slot(idx);
    }

    /// Pushes the SQE for the remaining part of slot `idx`.
    fn submit_slot(&mut self, idx: usize) {
        let fd = types::Fd(self.file.as_raw_fd());
        let Some(slot) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        let done = slot.done_bytes;
        let entry = match &mut slot.kind {
            Kind::Read { offset_bytes, buf } => {
                let len = (buf.len() - done).min(MAX_SQE_BYTES) as u32;
                opcode::Read::new(fd, buf.as_mut_ptr().wrapping_add(done), len)
                    .offset(*offset_bytes + done as u64)
                    .build()
            }
            Kind::Write {
                offset_bytes,
                buf,
                fua,
            } => {
                let len = (buf.len() - done).min(MAX_SQE_BYTES) as u32;
                opcode::Write::new(fd, buf.as_mut_ptr().wrapping_add(done).cast_const(), len)
                    .offset(*offset_bytes + done as u64)
                    .rw_flags(if *fua { libc::RWF_DSYNC } else { 0 })
                    .build()
            }
            Kind::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
        };
        self.push(&entry.user_data(idx as u64));
    }

    fn push(&mut self, entry: &squeue::Entry) {
        // The SQ has room for depth + 1 entries and at most one SQE per slot plus the wake
        // read is ever queued, so a full queue only needs a submit to drain it.
        loop {
            // SAFETY: every buffer an entry points to (slot IoBufs, wake_buf) is owned by
            // this struct and is neither moved nor freed until the matching completion is
            // reaped: a slot's IoBuf leaves the table only in `finish`, after its CQE, and
            // `run` returns (dropping `wake_buf` and the slots) only once no slot is in
            // flight and the wake read's CQE has been reaped (it pokes the eventfd itself
            // at shutdown to get it). After a panic, `Drop` leaks whatever is still
            // referenced. The fds (file, eventfd) are kept open by `file` and `shared`.
            #[allow(unsafe_code)]
            let pushed = unsafe { self.ring.submission().push(entry) };
            if pushed.is_ok() {
                return;
            }
            if let Err(e) = self.ring.submit() {
                tracing::warn!(error = %e, "io_uring submit while queue full");
            }
        }
    }

    fn complete(&mut self, idx: usize, res: i32) {
        let Some(slot) = self.slots.get_mut(idx).and_then(Option::as_mut) else {
            return;
        };
        if res < 0 {
            if matches!(-res, libc::EINTR | libc::EAGAIN) {
                self.submit_slot(idx);
                return;
            }
            let at = match &slot.kind {
                Kind::Read { offset_bytes, .. } | Kind::Write { offset_bytes, .. } => {
                    *offset_bytes + slot.done_bytes as u64
                }
                Kind::Flush => 0,
            };
            self.finish(idx, Err((io::Error::from_raw_os_error(-res), at)));
            return;
        }
        let total = match &slot.kind {
            Kind::Flush => {
                self.finish(idx, Ok(()));
                return;
            }
            Kind::Read { buf, .. } | Kind::Write { buf, .. } => buf.len(),
        };
        if res == 0 {
            let (kind, offset_bytes) = match &slot.kind {
                Kind::Read { offset_bytes, .. } => (io::ErrorKind::UnexpectedEof, *offset_bytes),
                Kind::Write { offset_bytes, .. } => (io::ErrorKind::WriteZero, *offset_bytes),
                Kind::Flush => (io::ErrorKind::Other, 0),
            };
            let at = offset_bytes + slot.done_bytes as u64;
            self.finish(idx, Err((kind.into(), at)));
            return;
        }
        slot.done_bytes += res as usize;
        if slot.done_bytes < total {
            self.submit_slot(idx);
        } else {
            self.finish(idx, Ok(()));
        }
    }

    fn finish(&mut self, idx: usize, result: Result<(), (io::Error, u64)>) {
        let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) else {
            return;
        };
        self.free.push(idx);
        self.in_flight -= 1;
        let done = result.map(|()| match slot.kind {
            Kind::Read { buf, .. } | Kind::Write { buf, .. } => Some(buf),
            Kind::Flush => None,
        });
        // If the caller went away the buffer is simply dropped: the kernel is done with it.
        let _ = slot.reply.send(done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    const DEVICES: usize = 24;
    const ROUNDS: usize = 6;
    const TASKS_PER_DEVICE: usize = 6;
    const FILE_BYTES: u64 = 1 << 20;

    /// Waits for the ring thread of `shared` to return, and says what the kernel still had.
    fn exit_of(shared: &Shared) -> RingExit {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(exit) = shared.exit.get() {
                return *exit;
            }
            assert!(Instant::now() < deadline, "ring thread did not exit");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Many rings shut down while callers have I/O queued and in flight (the callers give
    /// up mid-request) and submitters keep poking the eventfd: every ring thread must
    /// return only after the kernel gave back every buffer, the wake read's included.
    /// (Before the fix the thread returned with the wake read still armed and freed its
    /// buffer; the kernel could then write into freed memory.)
    #[test]
    fn shutdown_with_io_and_wakeups_in_flight_waits_for_every_completion() {
        let dir = tempfile::tempdir().expect("temp dir");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let completed = Arc::new(AtomicU64::new(0));
        let mut exits = Vec::new();
        for round in 0..ROUNDS {
            let mut rings = Vec::new();
            for d in 0..DEVICES {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(dir.path().join(format!("r{round}-d{d}.img")))
                    .expect("image file");
                file.set_len(FILE_BYTES).expect("size");
                let ring = Uring::start(Arc::new(file), 4, &format!("t{d}")).expect("io_uring");
                rings.push(Arc::new(ring));
            }
            let tasks: Vec<_> = rings
                .iter()
                .flat_map(|ring| (0..TASKS_PER_DEVICE).map(move |t| (ring.clone(), t)))
                .map(|(ring, t)| {
                    let completed = completed.clone();
                    rt.spawn(async move {
                        for i in 0u64.. {
                            let offset_bytes = ((i * 7 + t as u64) * 4096) % FILE_BYTES;
                            let op = match i % 5 {
                                0 => Op::Flush,
                                1 | 2 => Op::Write {
                                    offset_bytes,
                                    buf: IoBuf::from_slice(&[i as u8; 4096]),
                                    fua: false,
                                },
                                _ => Op::Read {
                                    offset_bytes,
                                    buf: IoBuf::new_zeroed(4096),
                                },
                            };
                            match ring.submit(op).await {
                                Ok(Ok(_)) => completed.fetch_add(1, Ordering::Relaxed),
                                Ok(Err((e, at))) => panic!("I/O at {at}: {e}"),
                                Err(e) => panic!("ring closed under a live caller: {e}"),
                            };
                            if i % 16 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                    })
                })
                .collect();
            // Let the rings get busy, then give up on everything mid-flight.
            std::thread::sleep(Duration::from_millis(30));
            for task in &tasks {
                task.abort();
            }
            for task in tasks {
                let e = rt.block_on(task).expect_err("the task loops until aborted");
                assert!(e.is_cancelled(), "{e}");
            }
            // The tasks are gone: dropping the last handle shuts each ring down while the
            // requests the aborted callers left behind are still in the ring.
            for ring in rings {
                let shared = ring.shared.clone();
                drop(ring);
                exits.push(shared);
            }
        }
        for shared in &exits {
            assert_eq!(
                exit_of(shared),
                RingExit {
                    in_flight: 0,
                    wake_read_armed: false
                },
                "a ring thread freed buffers the kernel still had"
            );
        }
        // The rings were really serving when they were shut down.
        assert!(completed.load(Ordering::Relaxed) > (DEVICES * ROUNDS) as u64);
    }
}
