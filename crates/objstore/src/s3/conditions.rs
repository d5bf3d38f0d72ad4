//! Request preconditions and integrity checks: If-Match / If-None-Match /
//! If-(Un)Modified-Since on reads and writes, Content-MD5, and the x-amz-checksum-*
//! values (in headers or in the trailer of an aws-chunked body).

use http::HeaderMap;
use s3s::dto::{ChecksumAlgorithm, ETagCondition, Timestamp};
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use super::{errors, timestamp};
use crate::checksum::{self, Algorithm};
use crate::index::{ObjectVersion, StoredChecksum, WriteCondition};

fn unix_secs(t: &Timestamp) -> i64 {
    time::OffsetDateTime::from(t.clone()).unix_timestamp()
}

fn etag_matches(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}

/// The headers that go with a 304 (AWS sends the validators).
fn not_modified(v: &ObjectVersion) -> S3Error {
    let mut e = s3_error!(NotModified);
    let mut h = HeaderMap::new();
    if let Ok(val) = format!("\"{}\"", v.etag).parse() {
        h.insert(http::header::ETAG, val);
    }
    let mut date = Vec::new();
    if timestamp(v.mtime_ms)
        .format(s3s::dto::TimestampFormat::HttpDate, &mut date)
        .is_ok()
        && let Ok(val) = http::HeaderValue::from_bytes(&date)
    {
        h.insert(http::header::LAST_MODIFIED, val);
    }
    e.set_headers(h);
    e
}

/// GET/HEAD preconditions (RFC 9110 order, as S3 applies them).
pub(super) fn check_read(
    v: &ObjectVersion,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let mtime = v.mtime_ms.div_euclid(1000);
    match if_match {
        Some(c) if !etag_matches(c, &v.etag) => return Err(errors::precondition_failed()),
        Some(_) => {}
        None => {
            if if_unmodified_since.is_some_and(|t| mtime > unix_secs(t)) {
                return Err(errors::precondition_failed());
            }
        }
    }
    match if_none_match {
        Some(c) if etag_matches(c, &v.etag) => return Err(not_modified(v)),
        Some(_) => {}
        None => {
            if if_modified_since.is_some_and(|t| mtime <= unix_secs(t)) {
                return Err(not_modified(v));
            }
        }
    }
    Ok(())
}

/// CopyObject / UploadPartCopy source preconditions (all failures are 412).
pub(super) fn check_copy_source(
    v: &ObjectVersion,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    match check_read(
        v,
        if_match,
        if_none_match,
        if_modified_since,
        if_unmodified_since,
    ) {
        Err(e) if *e.code() == S3ErrorCode::NotModified => Err(errors::precondition_failed()),
        other => other,
    }
}

/// PUT / CompleteMultipartUpload preconditions, checked in the commit transaction.
pub(super) fn write_condition(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<WriteCondition> {
    let value = |c: &ETagCondition| match c {
        ETagCondition::Any => "*".to_string(),
        ETagCondition::ETag(e) => e.value().to_string(),
    };
    Ok(WriteCondition {
        if_none_match_any: matches!(if_none_match, Some(ETagCondition::Any)),
        // AWS accepts only `*` here; an ETag (as other S3 servers accept) fails the
        // write when it is the current version's.
        if_none_match: if_none_match.filter(|c| !c.is_any()).map(value),
        if_match: if_match.map(value),
    })
}

/// Content-MD5, decoded (a value that is not 16 bytes of base64 is InvalidDigest).
pub(super) fn content_md5(value: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    let Some(v) = value else { return Ok(None) };
    checksum::unb64(v.trim())
        .and_then(|b| <[u8; 16]>::try_from(b.as_slice()).ok())
        .map(Some)
        .ok_or_else(|| {
            s3_error!(
                InvalidDigest,
                "The Content-MD5 you specified was not valid."
            )
        })
}

pub(super) fn check_md5(expected: Option<[u8; 16]>, got: &[u8; 16]) -> S3Result<()> {
    match expected {
        Some(e) if e != *got => Err(s3_error!(
            BadDigest,
            "The Content-MD5 you specified did not match what we received."
        )),
        _ => Ok(()),
    }
}

/// Where the client's checksum value is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Expected {
    /// No value: compute and store only.
    Nothing,
    Header(String),
    Trailer,
}

#[derive(Clone, Debug)]
pub(super) struct ChecksumSpec {
    pub algorithm: Option<Algorithm>,
    pub expected: Expected,
}

fn invalid_request(msg: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidRequest, msg.to_string())
}

/// Reads what the request says about checksums: at most one `x-amz-checksum-*` value,
/// or a trailer named by `x-amz-trailer`, or just an algorithm to compute.
pub(super) fn checksum_spec(
    headers: &HeaderMap,
    values: [(Algorithm, Option<&String>); 5],
    declared: Option<&ChecksumAlgorithm>,
) -> S3Result<ChecksumSpec> {
    let declared = match declared {
        Some(d) => Some(Algorithm::parse(d.as_str()).ok_or_else(|| {
            invalid_request("Value for x-amz-checksum-algorithm header is invalid.")
        })?),
        None => None,
    };
    let given: Vec<(Algorithm, &String)> = values
        .into_iter()
        .filter_map(|(a, v)| v.map(|v| (a, v)))
        .collect();
    if given.len() > 1 {
        return Err(invalid_request(
            "Expecting a single x-amz-checksum- header. Multiple checksum Types are not allowed.",
        ));
    }
    if let Some((alg, value)) = given.first() {
        if declared.is_some_and(|d| d != *alg) {
            return Err(invalid_request(
                "Value for x-amz-sdk-checksum-algorithm header is invalid.",
            ));
        }
        return Ok(ChecksumSpec {
            algorithm: Some(*alg),
            expected: Expected::Header((*value).clone()),
        });
    }
    if let Some(trailer) = headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()) {
        let name = trailer.trim().to_ascii_lowercase();
        let alg = checksum::ALL
            .into_iter()
            .find(|a| a.header() == name)
            .ok_or_else(|| {
                invalid_request("The value specified in the x-amz-trailer header is not supported")
            })?;
        return Ok(ChecksumSpec {
            algorithm: Some(alg),
            expected: Expected::Trailer,
        });
    }
    Ok(ChecksumSpec {
        algorithm: declared,
        expected: Expected::Nothing,
    })
}

/// Compares the computed checksum with the client's; returns what to store.
pub(super) fn verify_checksum(
    spec: &ChecksumSpec,
    computed: Option<&(Algorithm, Vec<u8>)>,
    trailers: Option<&s3s::TrailingHeaders>,
) -> S3Result<Option<StoredChecksum>> {
    let Some((alg, raw)) = computed else {
        return Ok(None);
    };
    let value = checksum::b64(raw);
    let expected = match &spec.expected {
        Expected::Nothing => None,
        Expected::Header(v) => Some(v.clone()),
        Expected::Trailer => {
            let name = alg.header();
            let v = trailers
                .and_then(|t| {
                    t.read(|h| {
                        h.get(name.as_str())
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_string)
                    })
                })
                .flatten()
                .ok_or_else(|| {
                    s3_error!(
                        IncompleteBody,
                        "The request body is missing the {} trailer it announced",
                        name
                    )
                })?;
            Some(v)
        }
    };
    if let Some(e) = expected
        && e.trim() != value
    {
        return Err(s3_error!(
            BadDigest,
            "The {} you specified did not match the calculated checksum.",
            alg.name()
        ));
    }
    Ok(Some(StoredChecksum {
        algorithm: alg.name().to_string(),
        value,
        kind: "FULL_OBJECT".to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{ObjectAttrs, ObjectData};

    fn v(etag: &str, mtime_ms: i64) -> ObjectVersion {
        ObjectVersion {
            row_id: 1,
            key: "k".into(),
            version_id: "null".into(),
            is_latest: true,
            delete_marker: false,
            size: 0,
            etag: etag.into(),
            mtime_ms,
            attrs: ObjectAttrs::default(),
            data: ObjectData::Inline(vec![]),
        }
    }

    fn tag(e: &str) -> ETagCondition {
        ETagCondition::ETag(s3s::dto::ETag::Strong(e.into()))
    }

    fn at(secs: i64) -> Timestamp {
        timestamp(secs * 1000)
    }

    fn code(r: S3Result<()>) -> Option<S3ErrorCode> {
        r.err().map(|e| e.code().clone())
    }

    #[test]
    fn read_preconditions_follow_s3() {
        let o = v("abc", 100_500);
        assert_eq!(
            code(check_read(&o, Some(&tag("abc")), None, None, None)),
            None
        );
        assert_eq!(
            code(check_read(&o, Some(&tag("x")), None, None, None)),
            Some(S3ErrorCode::PreconditionFailed)
        );
        assert_eq!(
            code(check_read(&o, None, Some(&tag("abc")), None, None)),
            Some(S3ErrorCode::NotModified)
        );
        assert_eq!(
            code(check_read(&o, None, Some(&ETagCondition::Any), None, None)),
            Some(S3ErrorCode::NotModified)
        );
        // Modified at second 100: not modified since 100, modified since 99.
        assert_eq!(
            code(check_read(&o, None, None, Some(&at(100)), None)),
            Some(S3ErrorCode::NotModified)
        );
        assert_eq!(code(check_read(&o, None, None, Some(&at(99)), None)), None);
        assert_eq!(
            code(check_read(&o, None, None, None, Some(&at(99)))),
            Some(S3ErrorCode::PreconditionFailed)
        );
        // If-Match true overrides If-Unmodified-Since false; If-None-Match false
        // overrides If-Modified-Since true.
        assert_eq!(
            code(check_read(&o, Some(&tag("abc")), None, None, Some(&at(99)))),
            None
        );
        assert_eq!(
            code(check_read(&o, None, Some(&tag("x")), Some(&at(100)), None)),
            None
        );
    }

    #[test]
    fn md5_and_checksums() {
        assert!(content_md5(Some("not base64!")).is_err());
        assert!(content_md5(Some("AAAA")).is_err());
        let spec = ChecksumSpec {
            algorithm: Some(Algorithm::Crc32),
            expected: Expected::Header("AAAAAA==".into()),
        };
        let err = verify_checksum(&spec, Some(&(Algorithm::Crc32, vec![0, 0, 0, 1])), None)
            .expect_err("mismatch");
        assert_eq!(*err.code(), S3ErrorCode::BadDigest);
        assert!(verify_checksum(&spec, Some(&(Algorithm::Crc32, vec![0, 0, 0, 0])), None).is_ok());
    }
}
