//! [`IoFuture`]: the future every [`crate::BlockDevice`] operation returns.
//!
//! A `Pin<Box<dyn Future>>` costs one heap allocation per I/O. `IoFuture` instead keeps
//! the future inline, in [`IO_FUTURE_INLINE_BYTES`] bytes of its own, and erases its type
//! with two function pointers; only a future too big (or too strictly aligned) for that
//! space is boxed, so backends with small futures (RAM, null, file, a remote NVMe/TCP
//! namespace) allocate nothing per I/O while large ones (the volume engine) still work.

use std::fmt;
use std::future::Future;
use std::marker::{PhantomData, PhantomPinned};
use std::mem::{self, MaybeUninit};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::BlockError;

/// Bytes an [`IoFuture`] holds inline; larger futures are boxed.
pub const IO_FUTURE_INLINE_BYTES: usize = 2048;
/// Alignment of the inline space; futures that need more are boxed.
pub const IO_FUTURE_INLINE_ALIGN_BYTES: usize = 16;

#[repr(C, align(16))]
struct Inline(MaybeUninit<[u8; IO_FUTURE_INLINE_BYTES]>);

const _: () = assert!(mem::align_of::<Inline>() == IO_FUTURE_INLINE_ALIGN_BYTES);
const _: () = assert!(mem::size_of::<Inline>() == IO_FUTURE_INLINE_BYTES);
// The boxed fallback must always fit.
const _: () = assert!(mem::size_of::<Pin<Box<()>>>() <= IO_FUTURE_INLINE_BYTES);

type PollFn<T> = unsafe fn(*mut u8, &mut Context<'_>) -> Poll<Result<T, BlockError>>;
type DropFn = unsafe fn(*mut u8);

/// The future of one block device operation, `Send`, living at most `'a`.
///
/// Build it with [`IoFuture::new`] from any `Send` future (usually an `async move`
/// block); it is stored inline when its size is at most [`IO_FUTURE_INLINE_BYTES`] and
/// its alignment at most [`IO_FUTURE_INLINE_ALIGN_BYTES`], boxed otherwise. Like any
/// future that may borrow from itself it is `!Unpin`: `.await` it, or pin it with
/// `std::pin::pin!` / `Box::pin` to poll it by hand.
pub struct IoFuture<'a, T> {
    storage: Inline,
    poll: PollFn<T>,
    drop: DropFn,
    inline: bool,
    /// `size_of` the future given to the constructor (for tuning the inline size).
    future_bytes: usize,
    /// Borrows for `'a`, like `dyn Future + 'a`.
    _life: PhantomData<&'a ()>,
    /// Not `Sync` (a `dyn Future + Send` is not); `Send` is implemented below.
    _not_sync: PhantomData<*mut ()>,
    /// The stored future may point into itself once polled.
    _pinned: PhantomPinned,
    /// Who is told when the operation completes (telemetry wrappers), innermost first.
    observers: [Option<Observation<'a>>; MAX_OBSERVERS],
    /// Applied to an error result before the observers see it ([`IoFuture::map_err`]).
    map_err: Option<fn(BlockError) -> BlockError>,
}

/// Observers an [`IoFuture`] carries without a wrapper future (a drive and a namespace on
/// it can both be metered with no allocation); a third one boxes a wrapper.
pub const MAX_OBSERVERS: usize = 2;

/// The kind of operation an [`IoObserver`] is told about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoOp {
    Read,
    Write,
    Flush,
    WriteZeroes,
    Discard,
}

/// Watches operations complete, e.g. to keep latency histograms (`telemetry` crate).
/// Called on the I/O path: keep it to a few atomic updates.
pub trait IoObserver: Send + Sync {
    /// The operation was issued; returns a token handed back to `end` (e.g. a start time).
    fn begin(&self) -> u64;
    /// The operation completed (`error` if it failed); `bytes` as given at `observe`.
    fn end(&self, op: IoOp, bytes: u64, token: u64, error: Option<&BlockError>);
    /// The future was dropped before the operation completed.
    fn cancelled(&self, token: u64);
}

#[derive(Clone, Copy)]
struct Observation<'a> {
    observer: &'a dyn IoObserver,
    op: IoOp,
    bytes: u64,
    token: u64,
}

// SAFETY: every constructor requires the stored future to be `Send`, and the storage is
// only reached through `&mut self` (poll, drop), never shared.
#[allow(unsafe_code)]
unsafe impl<T> Send for IoFuture<'_, T> {}

const fn fits<F>() -> bool {
    mem::size_of::<F>() <= IO_FUTURE_INLINE_BYTES
        && mem::align_of::<F>() <= IO_FUTURE_INLINE_ALIGN_BYTES
}

/// SAFETY: `p` points at a live, pinned `F`.
#[allow(unsafe_code)]
unsafe fn poll_raw<F, T>(p: *mut u8, cx: &mut Context<'_>) -> Poll<Result<T, BlockError>>
where
    F: Future<Output = Result<T, BlockError>>,
{
    // SAFETY: the caller guarantees `p` is a live `F` that never moves again (it sits in
    // the storage of a pinned `IoFuture`).
    unsafe { Pin::new_unchecked(&mut *p.cast::<F>()) }.poll(cx)
}

/// SAFETY: `p` points at a live `F` that is not used afterwards.
#[allow(unsafe_code)]
unsafe fn drop_raw<F>(p: *mut u8) {
    // SAFETY: the caller guarantees `p` is a live `F`, dropped exactly once.
    unsafe { std::ptr::drop_in_place(p.cast::<F>()) }
}

impl<'a, T> IoFuture<'a, T> {
    /// Wraps `fut`, inline when it fits, else in a box.
    #[inline]
    pub fn new<F>(fut: F) -> Self
    where
        F: Future<Output = Result<T, BlockError>> + Send + 'a,
    {
        let future_bytes = mem::size_of::<F>();
        if fits::<F>() {
            Self::place(fut, true, future_bytes)
        } else {
            Self::place(Box::pin(fut), false, future_bytes)
        }
    }

    /// Wraps `fut` in a box whatever its size (for rare operations whose futures are
    /// large, to keep the inline copy out of their callers' frames).
    pub fn boxed<F>(fut: F) -> Self
    where
        F: Future<Output = Result<T, BlockError>> + Send + 'a,
    {
        let future_bytes = mem::size_of::<F>();
        Self::place(Box::pin(fut), false, future_bytes)
    }

    /// A future that is already complete.
    pub fn ready(result: Result<T, BlockError>) -> Self
    where
        T: Send + 'a,
    {
        Self::new(std::future::ready(result))
    }

    /// Whether the future is stored inline (no heap allocation was made for it).
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// Size of the wrapped future (before boxing, if it was boxed).
    pub fn future_bytes(&self) -> usize {
        self.future_bytes
    }

    #[inline]
    fn place<F>(fut: F, inline: bool, future_bytes: usize) -> Self
    where
        F: Future<Output = Result<T, BlockError>> + Send + 'a,
    {
        // Constant per F: only reachable for fitting types (see `new`).
        assert!(fits::<F>(), "IoFuture: future does not fit inline");
        let mut storage = Inline(MaybeUninit::uninit());
        // SAFETY: `fits` checked size and alignment against the storage, which is fresh
        // (nothing to overwrite); ownership of `fut` moves into it.
        #[allow(unsafe_code)]
        unsafe {
            storage.0.as_mut_ptr().cast::<F>().write(fut)
        };
        IoFuture {
            storage,
            poll: poll_raw::<F, T>,
            drop: drop_raw::<F>,
            inline,
            future_bytes,
            _life: PhantomData,
            _not_sync: PhantomData,
            _pinned: PhantomPinned,
            observers: [None; MAX_OBSERVERS],
            map_err: None,
        }
    }

    /// Turns an error result into `f`'s (a layer that only renames errors, with no future
    /// of its own). Kept in the future itself; a second map boxes a wrapper.
    pub fn map_err(mut self, f: fn(BlockError) -> BlockError) -> Self
    where
        T: Send + 'a,
    {
        if self.map_err.is_none() {
            self.map_err = Some(f);
            return self;
        }
        IoFuture::boxed(async move { self.await.map_err(f) })
    }

    /// Tells `observer` when this operation completes: `begin` now, `end` with the
    /// result. Stored in the future itself (no allocation) up to [`MAX_OBSERVERS`]; past
    /// that the future is wrapped in a boxed one.
    pub fn observed(mut self, observer: &'a dyn IoObserver, op: IoOp, bytes: u64) -> Self
    where
        T: Send + 'a,
    {
        let token = observer.begin();
        let obs = Observation {
            observer,
            op,
            bytes,
            token,
        };
        if let Some(slot) = self.observers.iter_mut().find(|o| o.is_none()) {
            *slot = Some(obs);
            return self;
        }
        // Made outside the async block so that dropping it unpolled still tells the observer.
        let mut guard = CancelGuard(Some(obs));
        IoFuture::boxed(async move {
            let r = self.await;
            if let Some(o) = guard.0.take() {
                o.observer.end(o.op, o.bytes, o.token, r.as_ref().err());
            }
            r
        })
    }
}

/// Tells an observer of a boxed wrapper that its operation was dropped unfinished.
struct CancelGuard<'a>(Option<Observation<'a>>);

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if let Some(o) = self.0.take() {
            o.observer.cancelled(o.token);
        }
    }
}

impl<T> Future for IoFuture<'_, T> {
    type Output = Result<T, BlockError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing is moved out of `self`; the stored future stays where it is
        // (structural pinning of `storage`), and `poll` matches the stored type.
        #[allow(unsafe_code)]
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above: the storage holds the pinned future `poll` was made for.
        #[allow(unsafe_code)]
        let r = unsafe { (this.poll)(this.storage.0.as_mut_ptr().cast(), cx) };
        let r = match (r, this.map_err) {
            (Poll::Ready(Err(e)), Some(f)) => Poll::Ready(Err(f(e))),
            (r, _) => r,
        };
        if let Poll::Ready(result) = &r {
            for o in this.observers.iter_mut() {
                if let Some(o) = o.take() {
                    o.observer
                        .end(o.op, o.bytes, o.token, result.as_ref().err());
                }
            }
        }
        r
    }
}

impl<T> Drop for IoFuture<'_, T> {
    fn drop(&mut self) {
        for o in self.observers.iter_mut() {
            if let Some(o) = o.take() {
                o.observer.cancelled(o.token);
            }
        }
        // SAFETY: the storage holds the live future `drop` was made for; this runs once.
        #[allow(unsafe_code)]
        unsafe {
            (self.drop)(self.storage.0.as_mut_ptr().cast())
        }
    }
}

impl<T> fmt::Debug for IoFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoFuture")
            .field("inline", &self.inline)
            .field("future_bytes", &self.future_bytes)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct CountDrop(Arc<AtomicUsize>);
    impl Drop for CountDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn small_futures_are_inline_large_ones_boxed() {
        let f = IoFuture::new(async { Ok::<_, BlockError>(7u32) });
        assert!(f.is_inline());
        assert_eq!(f.await.unwrap(), 7);

        let big = [5u8; IO_FUTURE_INLINE_BYTES + 1];
        let f = IoFuture::new(async move {
            tokio::task::yield_now().await;
            Ok::<_, BlockError>(big.iter().map(|&b| u32::from(b)).sum::<u32>())
        });
        assert!(!f.is_inline());
        assert_eq!(f.await.unwrap(), 5 * (IO_FUTURE_INLINE_BYTES as u32 + 1));

        let f = IoFuture::<()>::ready(Err(BlockError::ReadOnly));
        assert!(f.is_inline());
        assert!(matches!(f.await, Err(BlockError::ReadOnly)));

        let f = IoFuture::boxed(async { Ok::<_, BlockError>(()) });
        assert!(!f.is_inline());
        f.await.unwrap();
    }

    #[repr(align(64))]
    struct Aligned64(u8);

    #[tokio::test]
    async fn over_aligned_futures_are_boxed() {
        let a = Aligned64(3);
        let f = IoFuture::new(async move {
            tokio::task::yield_now().await;
            let r = &a;
            assert_eq!(std::ptr::from_ref(r).addr() % 64, 0);
            Ok::<_, BlockError>(r.0)
        });
        assert!(!f.is_inline());
        assert_eq!(f.await.unwrap(), 3);
    }

    #[tokio::test]
    async fn self_borrowing_future_survives_pinning_and_drop_runs_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let guard = CountDrop(drops.clone());
        let fut = IoFuture::new(async move {
            let _g = guard;
            let local = [1u8; 64];
            let r = &local; // borrow held across the await: the future points into itself
            tokio::task::yield_now().await;
            Ok::<_, BlockError>(r.iter().map(|&b| usize::from(b)).sum::<usize>())
        });
        assert!(fut.is_inline());
        // Moving before the first poll is allowed.
        let moved = fut;
        assert_eq!(moved.await.unwrap(), 64);
        assert_eq!(drops.load(Ordering::SeqCst), 1);

        // Dropped half way (after one poll): the inner future's drop runs exactly once.
        let guard = CountDrop(drops.clone());
        let fut = IoFuture::new(async move {
            let _g = guard;
            std::future::pending::<()>().await;
            Ok::<_, BlockError>(())
        });
        {
            let mut fut = std::pin::pin!(fut);
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            assert!(fut.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    /// Counts begins, ends (with errors) and cancellations.
    #[derive(Default)]
    struct Counting {
        begun: AtomicUsize,
        ended: AtomicUsize,
        failed: AtomicUsize,
        cancelled: AtomicUsize,
    }

    impl IoObserver for Counting {
        fn begin(&self) -> u64 {
            self.begun.fetch_add(1, Ordering::SeqCst) as u64
        }
        fn end(&self, _op: IoOp, bytes: u64, _token: u64, error: Option<&BlockError>) {
            assert_eq!(bytes, 512);
            self.ended.fetch_add(1, Ordering::SeqCst);
            if error.is_some() {
                self.failed.fetch_add(1, Ordering::SeqCst);
            }
        }
        fn cancelled(&self, _token: u64) {
            self.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn observers_see_every_end_and_cancellation() {
        let (a, b, c) = (
            Counting::default(),
            Counting::default(),
            Counting::default(),
        );
        let f = IoFuture::new(async { Ok::<_, BlockError>(1u8) })
            .observed(&a, IoOp::Read, 512)
            .observed(&b, IoOp::Read, 512);
        assert!(f.is_inline(), "two observers ride in the future itself");
        f.await.unwrap();
        let f = IoFuture::<()>::ready(Err(BlockError::Timeout))
            .observed(&a, IoOp::Write, 512)
            .observed(&b, IoOp::Write, 512)
            .observed(&c, IoOp::Write, 512);
        assert!(!f.is_inline(), "a third one needs a wrapper");
        assert!(f.await.is_err());
        for o in [&a, &b] {
            assert_eq!(o.ended.load(Ordering::SeqCst), 2);
            assert_eq!(o.failed.load(Ordering::SeqCst), 1);
        }
        assert_eq!(c.failed.load(Ordering::SeqCst), 1);
        let pending = |o: &'static Counting| {
            IoFuture::new(async {
                std::future::pending::<()>().await;
                Ok::<_, BlockError>(())
            })
            .observed(o, IoOp::Flush, 512)
        };
        let leak: &'static Counting = Box::leak(Box::default());
        drop(pending(leak));
        let third = pending(leak)
            .observed(leak, IoOp::Flush, 512)
            .observed(leak, IoOp::Flush, 512);
        drop(third);
        assert_eq!(leak.begun.load(Ordering::SeqCst), 4);
        assert_eq!(leak.cancelled.load(Ordering::SeqCst), 4);
        assert_eq!(leak.ended.load(Ordering::SeqCst), 0);
    }

    /// Records the error kinds it saw end.
    #[derive(Default)]
    struct LastError(std::sync::Mutex<Option<String>>);

    impl IoObserver for LastError {
        fn begin(&self) -> u64 {
            0
        }
        fn end(&self, _op: IoOp, _bytes: u64, _token: u64, error: Option<&BlockError>) {
            *self.0.lock().unwrap() = error.map(|e| format!("{e:?}"));
        }
        fn cancelled(&self, _token: u64) {}
    }

    #[tokio::test]
    async fn map_err_renames_errors_inline_and_observers_see_the_new_one() {
        fn to_unavailable(e: BlockError) -> BlockError {
            BlockError::Unavailable(format!("renamed {e:?}"))
        }
        fn to_timeout(_: BlockError) -> BlockError {
            BlockError::Timeout
        }
        let seen = LastError::default();
        let f = IoFuture::<()>::ready(Err(BlockError::Closed))
            .map_err(to_unavailable)
            .observed(&seen, IoOp::Read, 0);
        assert!(f.is_inline(), "one map rides in the future itself");
        let e = f.await.unwrap_err();
        assert!(
            matches!(&e, BlockError::Unavailable(m) if m.contains("Closed")),
            "{e:?}"
        );
        assert!(
            seen.0
                .lock()
                .unwrap()
                .as_deref()
                .unwrap()
                .contains("Unavailable")
        );
        // Success passes untouched.
        let f = IoFuture::ready(Ok(5u8)).map_err(to_unavailable);
        assert_eq!(f.await.unwrap(), 5);
        // A second map wraps the first: both apply, in order.
        let f = IoFuture::<()>::ready(Err(BlockError::Closed))
            .map_err(to_unavailable)
            .map_err(to_timeout);
        assert!(!f.is_inline());
        assert!(matches!(f.await, Err(BlockError::Timeout)));
    }

    #[test]
    fn is_send() {
        fn send<T: Send>(_: &T) {}
        let f = IoFuture::new(async { Ok::<_, BlockError>(()) });
        send(&f);
    }
}
