//! Request body -> stored data. The body is hashed (MD5 for the ETag, plus the checksum
//! the client asked for) as it streams through and cut into stripes; a body that ends
//! within the inline limit stays in memory and goes into the index row instead.
//!
//! Before the first shard is written, the piece is recorded as a write intent that
//! becomes garbage after the grace period: a gateway that dies mid-write leaves shards
//! the reaper deletes. The commit of the object removes the intent in its transaction.

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

use super::ObjectLayer;
use crate::checksum::{Algorithm, Hasher};
use crate::datapath::{DataError, PieceWriter};
use crate::index::{IndexError, ObjectData, ops};
use crate::layout::{Geometry, Piece};

/// What reading the request body failed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// The body ended early or its framing is broken.
    Incomplete(String),
    /// A chunk signature of a signed streaming body is wrong.
    SignatureMismatch,
    /// The payload's SHA-256 is not the signed one.
    ContentSha256Mismatch,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("request body: {0:?}")]
    Body(BodyError),
    #[error("body exceeds the {max_bytes}-byte limit")]
    TooLarge { max_bytes: u64 },
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// What a body became.
pub struct Ingested {
    pub data: ObjectData,
    pub size: u64,
    pub md5: [u8; 16],
    /// The requested checksum, raw.
    pub checksum: Option<(Algorithm, Vec<u8>)>,
    /// Pieces written with shards missing (stores down).
    pub degraded: Vec<Piece>,
}

/// How to store one body.
#[derive(Clone, Copy, Debug)]
pub struct IngestRequest {
    pub geometry: Geometry,
    pub checksum: Option<Algorithm>,
    /// The body's length when the request says it.
    pub size_hint: Option<u64>,
    pub max_bytes: u64,
    /// Whether the data may stay inline (whole objects, not multipart parts).
    pub allow_inline: bool,
}

/// Stripes between intent updates when the body's length is unknown.
const INTENT_REFRESH_STRIPES: u32 = 16;

/// What a failing body stream means for the write.
pub trait BodyFault {
    fn into_ingest_error(self) -> IngestError;
}

/// A request body from s3s.
impl BodyFault for Box<dyn std::error::Error + Send + Sync> {
    fn into_ingest_error(self) -> IngestError {
        IngestError::Body(classify(&*self))
    }
}

/// A request body in tests.
impl BodyFault for std::io::Error {
    fn into_ingest_error(self) -> IngestError {
        IngestError::Body(BodyError::Incomplete(self.to_string()))
    }
}

/// The source of a copy: reading it failed.
impl BodyFault for DataError {
    fn into_ingest_error(self) -> IngestError {
        IngestError::Data(self)
    }
}

fn classify(e: &dyn std::fmt::Display) -> BodyError {
    // s3s does not export its body stream error types; their messages name the cause.
    let text = e.to_string();
    if text.contains("SignatureMismatch") {
        BodyError::SignatureMismatch
    } else if text.contains("Sha256Mismatch") {
        BodyError::ContentSha256Mismatch
    } else {
        BodyError::Incomplete(text)
    }
}

struct Writing<'a> {
    writer: PieceWriter<'a>,
    stripes: u32,
}

impl ObjectLayer {
    async fn start_piece(&self, req: &IngestRequest) -> Result<Writing<'_>, IngestError> {
        let writer = self.data.writer(req.geometry)?;
        let mut intent = writer.piece().clone();
        let stripe = writer.stripe_data_bytes() as u64;
        intent.size = req
            .size_hint
            .unwrap_or(stripe * u64::from(INTENT_REFRESH_STRIPES));
        let due = self.gc_due_ms();
        self.index
            .write(move |tx| ops::gc_add(tx, std::slice::from_ref(&intent), due))
            .await?;
        Ok(Writing { writer, stripes: 0 })
    }

    async fn put_stripe(
        &self,
        w: &mut Writing<'_>,
        data: &[u8],
        req: &IngestRequest,
    ) -> Result<(), IngestError> {
        w.writer.write_stripe(data).await?;
        w.stripes += 1;
        if req.size_hint.is_none() && w.stripes.is_multiple_of(INTENT_REFRESH_STRIPES) {
            let mut intent = w.writer.piece().clone();
            intent.size += w.writer.stripe_data_bytes() as u64 * u64::from(INTENT_REFRESH_STRIPES);
            self.index
                .write(move |tx| ops::gc_intent_update(tx, &intent, None))
                .await?;
        }
        Ok(())
    }

    /// Reads `body` to its end and stores it. On any error nothing stays stored.
    pub async fn ingest<S, E>(
        &self,
        mut body: S,
        req: IngestRequest,
    ) -> Result<Ingested, IngestError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: BodyFault,
    {
        let mut md5 = md5x::StreamMd5::new();
        let mut hasher = req.checksum.map(Hasher::new);
        let mut size = 0u64;
        let mut buf = BytesMut::new();
        let mut writing: Option<Writing<'_>> = None;
        let result: Result<(), IngestError> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(BodyFault::into_ingest_error)?;
                size += chunk.len() as u64;
                if size > req.max_bytes {
                    return Err(IngestError::TooLarge {
                        max_bytes: req.max_bytes,
                    });
                }
                // Pieces of 16 KiB or more go to the shared MD5 lanes, where up to
                // eight uploads are hashed at once (md5x); smaller ones in place.
                md5.update(chunk.clone()).await;
                if let Some(h) = hasher.as_mut() {
                    h.update(&chunk);
                }
                buf.extend_from_slice(&chunk);
                if writing.is_none()
                    && (!req.allow_inline || buf.len() > self.config.inline_max_bytes)
                {
                    writing = Some(self.start_piece(&req).await?);
                }
                if let Some(w) = writing.as_mut() {
                    let stripe = w.writer.stripe_data_bytes();
                    while buf.len() >= stripe {
                        let full = buf.split_to(stripe);
                        self.put_stripe(w, &full, &req).await?;
                    }
                }
            }
            if writing.is_none() && !req.allow_inline && !buf.is_empty() {
                writing = Some(self.start_piece(&req).await?);
            }
            if let Some(w) = writing.as_mut()
                && !buf.is_empty()
            {
                let rest = buf.split();
                self.put_stripe(w, &rest, &req).await?;
            }
            Ok(())
        }
        .await;
        let md5 = md5.finalize();
        let checksum = req.checksum.zip(hasher.map(Hasher::finalize));
        match (result, writing) {
            (Ok(()), None) => Ok(Ingested {
                data: ObjectData::Inline(buf.to_vec()),
                size,
                md5,
                checksum,
                degraded: Vec::new(),
            }),
            (Ok(()), Some(w)) => {
                let (piece, degraded) = w.writer.finish();
                Ok(Ingested {
                    degraded: if degraded {
                        vec![piece.clone()]
                    } else {
                        Vec::new()
                    },
                    data: ObjectData::Pieces(vec![piece]),
                    size,
                    md5,
                    checksum,
                })
            }
            (Err(e), Some(w)) => {
                let (piece, _) = w.writer.finish();
                self.discard(&ObjectData::Pieces(vec![piece])).await;
                Err(e)
            }
            (Err(e), None) => Err(e),
        }
    }
}
