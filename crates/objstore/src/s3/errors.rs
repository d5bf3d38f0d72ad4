//! Internal errors -> the S3 errors AWS returns for the same situation.

use s3s::{S3Error, S3ErrorCode, s3_error};

use crate::datapath::DataError;
use crate::index::IndexError;
use crate::objects::{BodyError, IngestError};

pub fn index(e: IndexError) -> S3Error {
    match e {
        IndexError::NoSuchBucket => s3_error!(NoSuchBucket, "The specified bucket does not exist"),
        IndexError::BucketExists => s3_error!(
            BucketAlreadyOwnedByYou,
            "Your previous request to create the named bucket succeeded and you already own it."
        ),
        IndexError::BucketNotEmpty => s3_error!(
            BucketNotEmpty,
            "The bucket you tried to delete is not empty"
        ),
        IndexError::NoSuchKey => s3_error!(NoSuchKey, "The specified key does not exist."),
        IndexError::NoSuchVersion => {
            s3_error!(NoSuchVersion, "The specified version does not exist.")
        }
        IndexError::NoSuchUpload => s3_error!(
            NoSuchUpload,
            "The specified multipart upload does not exist. The upload ID might be invalid, or the \
             multipart upload might have been aborted or completed."
        ),
        IndexError::PreconditionFailed => precondition_failed(),
        IndexError::MethodNotAllowed => s3_error!(
            MethodNotAllowed,
            "The specified method is not allowed against this resource."
        ),
        IndexError::Unavailable(msg) => unavailable(format!("object index unreachable: {msg}")),
        other => {
            tracing::error!("index: {other}");
            s3_error!(
                InternalError,
                "We encountered an internal error. Please try again."
            )
        }
    }
}

pub fn precondition_failed() -> S3Error {
    s3_error!(
        PreconditionFailed,
        "At least one of the pre-conditions you specified did not hold"
    )
}

pub fn unavailable(msg: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::ServiceUnavailable, msg);
    e.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
    e
}

pub fn data(e: DataError) -> S3Error {
    if e.is_unavailable() {
        tracing::warn!("data path: {e}");
        return unavailable(format!("Too many shard stores are unavailable: {e}"));
    }
    tracing::error!("data path: {e}");
    s3_error!(
        InternalError,
        "We encountered an internal error. Please try again."
    )
}

pub fn ingest(e: IngestError) -> S3Error {
    match e {
        IngestError::Body(BodyError::Incomplete(why)) => {
            tracing::info!("request body: {why}");
            s3_error!(
                IncompleteBody,
                "You did not provide the number of bytes specified by the Content-Length HTTP header."
            )
        }
        IngestError::Body(BodyError::SignatureMismatch) => s3_error!(
            SignatureDoesNotMatch,
            "The request signature we calculated does not match the signature you provided."
        ),
        IngestError::Body(BodyError::ContentSha256Mismatch) => {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            );
            e.set_status_code(http::StatusCode::BAD_REQUEST);
            e
        }
        IngestError::TooLarge { .. } => s3_error!(
            EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed object size."
        ),
        IngestError::Data(e) => data(e),
        IngestError::Index(e) => index(e),
    }
}

pub fn invalid_argument(msg: impl Into<String>) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidArgument, msg.into())
}

/// An error code s3s has no variant for, with the status AWS uses.
pub fn custom(code: &'static str, status: http::StatusCode, msg: impl Into<String>) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.into()), msg.into());
    e.set_status_code(status);
    e
}
