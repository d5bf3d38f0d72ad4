//! Thread-pool engine: blocking pread/pwrite on a few threads fed by a bounded channel.

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::op::{Done, Op, Request, Target, execute};
use crate::BlockError;

/// Threads exit when the pool (its sender) is dropped and the queue is drained.
pub(crate) struct Pool {
    tx: mpsc::Sender<Request>,
}

impl Pool {
    pub(crate) fn start(
        file: Arc<File>,
        target: Target,
        threads: usize,
        queue_depth: usize,
        name: &str,
    ) -> io::Result<Pool> {
        let (tx, rx) = mpsc::channel::<Request>(queue_depth.max(1));
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads.max(1) {
            let (file, rx) = (file.clone(), rx.clone());
            std::thread::Builder::new()
                .name(format!("blk-pool{i}-{name}"))
                .spawn(move || worker(&file, target, &rx))?;
        }
        Ok(Pool { tx })
    }

    pub(crate) async fn submit(&self, op: Op) -> Result<Done, BlockError> {
        let (reply, done) = oneshot::channel();
        self.tx
            .send(Request { op, reply })
            .await
            .map_err(|_| BlockError::Closed)?;
        done.await.map_err(|_| BlockError::Closed)
    }
}

fn worker(file: &File, target: Target, rx: &Mutex<mpsc::Receiver<Request>>) {
    loop {
        // One idle worker waits in recv while holding the lock; the others wait for the lock.
        let next = rx.lock().unwrap_or_else(|e| e.into_inner()).blocking_recv();
        let Some(Request { op, reply }) = next else {
            return;
        };
        // A dropped receiver means the caller gave up; the buffer is freed here, after the
        // syscall finished with it.
        let _ = reply.send(execute(file, target, op));
    }
}
