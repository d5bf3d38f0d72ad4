//! Stored data -> a byte stream for a GET. A producer task reads stripes (the next one
//! while the previous is being sent) into a bounded channel; the response body drains
//! it, so a slow client holds at most two stripes in memory and a client that goes
//! away stops the reads.

use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::ObjectLayer;
use crate::datapath::DataError;
use crate::index::ObjectData;
use crate::layout::Piece;

/// The body of a GET response.
pub struct ObjectStream {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, DataError>>,
    /// A chunk taken by [`ObjectStream::first_chunk`], handed out first.
    pending: Option<Bytes>,
    remaining: u64,
}

impl ObjectStream {
    /// Waits for the first chunk: a GET whose first stripe cannot be read fails with
    /// an error status instead of a 200 with a cut body.
    pub async fn first_chunk(&mut self) -> Result<(), DataError> {
        if self.pending.is_none()
            && let Some(first) = self.rx.recv().await
        {
            self.pending = Some(first?);
        }
        Ok(())
    }
}

impl Stream for ObjectStream {
    type Item = Result<Bytes, DataError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(b) = self.pending.take() {
            self.remaining = self.remaining.saturating_sub(b.len() as u64);
            return Poll::Ready(Some(Ok(b)));
        }
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(Ok(b))) = &polled {
            self.remaining = self.remaining.saturating_sub(b.len() as u64);
        }
        polled
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (0, Some(n))
    }
}

/// One stripe's part of the requested range.
struct Segment {
    piece: usize,
    stripe: u32,
    /// Byte range within the stripe's data.
    within: Range<usize>,
}

fn segments(pieces: &[Piece], range: &Range<u64>) -> Vec<Segment> {
    let mut out = Vec::new();
    let mut base = 0u64;
    for (pi, p) in pieces.iter().enumerate() {
        let piece_range = base..base + p.size;
        base += p.size;
        if piece_range.end <= range.start || piece_range.start >= range.end {
            continue;
        }
        let start = range.start.max(piece_range.start) - piece_range.start;
        let end = range.end.min(piece_range.end) - piece_range.start;
        let stripe_bytes = p.stripe_data_bytes();
        let first = start / stripe_bytes;
        let last = (end - 1) / stripe_bytes;
        for s in first..=last {
            let s_start = s * stripe_bytes;
            let lo = start.max(s_start) - s_start;
            let hi = end.min(s_start + stripe_bytes) - s_start;
            out.push(Segment {
                piece: pi,
                stripe: s as u32,
                within: lo as usize..hi as usize,
            });
        }
    }
    out
}

/// Stripes read ahead of the one being sent.
const READ_AHEAD: usize = 2;

impl ObjectLayer {
    /// Streams bytes `range` of `data` (the range must lie within the data).
    pub fn read_range(self: &Arc<Self>, data: ObjectData, range: Range<u64>) -> ObjectStream {
        let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
        let remaining = range.end - range.start;
        match data {
            ObjectData::Inline(bytes) => {
                let slice = Bytes::from(bytes).slice(range.start as usize..range.end as usize);
                if !slice.is_empty() {
                    // A fresh channel with room for READ_AHEAD items cannot be full.
                    let _ = tx.try_send(Ok(slice));
                }
            }
            ObjectData::Pieces(pieces) => {
                let layer = self.clone();
                tokio::spawn(async move { layer.produce(pieces, range, tx).await });
            }
        }
        ObjectStream {
            rx,
            pending: None,
            remaining,
        }
    }

    async fn produce(
        self: Arc<Self>,
        pieces: Vec<Piece>,
        range: Range<u64>,
        tx: tokio::sync::mpsc::Sender<Result<Bytes, DataError>>,
    ) {
        let segs = segments(&pieces, &range);
        let mut degraded = Vec::new();
        let reads = futures::stream::iter(segs)
            .map(|seg| {
                let layer = self.clone();
                let piece = pieces[seg.piece].clone();
                async move {
                    let (bytes, health) = layer
                        .data
                        .read_stripe_chunks(&piece, seg.stripe, seg.within.clone())
                        .await?;
                    Ok::<_, DataError>((bytes, health.degraded().then_some(piece)))
                }
            })
            .buffered(READ_AHEAD);
        futures::pin_mut!(reads);
        while let Some(r) = reads.next().await {
            match r {
                Ok((chunks, bad)) => {
                    if let Some(p) = bad
                        && !degraded.iter().any(|d: &Piece| d.id == p.id)
                    {
                        degraded.push(p);
                    }
                    let mut gone = false;
                    for bytes in chunks {
                        if tx.send(Ok(bytes)).await.is_err() {
                            gone = true; // the client went away
                            break;
                        }
                    }
                    if gone {
                        break;
                    }
                }
                Err(e) => {
                    tracing::error!("GET cut short: {e}");
                    let _ = tx.send(Err(e)).await;
                    break;
                }
            }
        }
        self.mark_degraded(degraded).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Geometry;

    fn piece(size: u64) -> Piece {
        Piece {
            id: [0; 16],
            size,
            geometry: Geometry { data: 2, parity: 1 },
            shard_bytes: 10,
            stores: vec!["a".into(), "b".into(), "c".into()],
        }
    }

    #[test]
    fn segments_cover_exactly_the_range() {
        let pieces = vec![piece(45), piece(30)];
        let total = 75u64;
        for start in 0..total {
            for end in start + 1..=total {
                let segs = segments(&pieces, &(start..end));
                let covered: u64 = segs.iter().map(|s| s.within.len() as u64).sum();
                assert_eq!(covered, end - start, "{start}..{end}");
                for s in &segs {
                    assert!(!s.within.is_empty());
                    assert!(s.within.end <= pieces[s.piece].stripe_len(s.stripe));
                }
            }
        }
    }
}
