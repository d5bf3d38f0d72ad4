//! CopyObject, and reading the source of a copy (shared with UploadPartCopy).

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::conditions::{self, ChecksumSpec, Expected};
use super::object::{ContentHeaders, attrs_from, stored_checksum_alg};
use super::{
    MAX_PUT_BYTES, S3Gateway, errors, etag, reported_version, set_checksum_fields, tagging,
    timestamp, valued,
};
use crate::checksum::Algorithm;
use crate::index::{Bucket, ObjectVersion, WriteCondition};

/// Preconditions on a copy source.
pub(super) struct SourceConditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

impl S3Gateway {
    /// The version a copy reads, after its preconditions.
    pub(super) async fn copy_source(
        &self,
        source: &CopySource,
        c: SourceConditions<'_>,
    ) -> S3Result<(Bucket, ObjectVersion)> {
        let CopySource::Bucket {
            bucket,
            key,
            version_id,
        } = source
        else {
            return Err(s3_error!(
                NotImplemented,
                "Copy sources other than bucket/key are not supported"
            ));
        };
        let b = self.bucket(bucket).await?;
        let v = self.find_version(&b, key, version_id.as_deref()).await?;
        conditions::check_copy_source(
            &v,
            c.if_match,
            c.if_none_match,
            c.if_modified_since,
            c.if_unmodified_since,
        )?;
        Ok((b, v))
    }

    pub(super) async fn copy_object_impl(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let i = req.input;
        let dst = self.bucket(&i.bucket).await?;
        let (src_bucket, src) = self
            .copy_source(
                &i.copy_source,
                SourceConditions {
                    if_match: i.copy_source_if_match.as_ref(),
                    if_none_match: i.copy_source_if_none_match.as_ref(),
                    if_modified_since: i.copy_source_if_modified_since.as_ref(),
                    if_unmodified_since: i.copy_source_if_unmodified_since.as_ref(),
                },
            )
            .await?;
        if src.size > MAX_PUT_BYTES {
            return Err(s3_error!(
                InvalidRequest,
                "The specified copy source is larger than the maximum allowable size for a copy source: {MAX_PUT_BYTES}"
            ));
        }
        let replace_metadata = i
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let replace_tags = i
            .tagging_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
        let same_object = src_bucket.id == dst.id && src.key == i.key;
        if same_object
            && !replace_metadata
            && i.storage_class.is_none()
            && i.website_redirect_location.is_none()
        {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing \
                 the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let tags = if replace_tags {
            tagging::from_header(i.tagging.as_deref())?
        } else {
            src.attrs.tags.clone()
        };
        let attrs = if replace_metadata {
            attrs_from(
                ContentHeaders {
                    content_type: i.content_type,
                    content_encoding: i.content_encoding,
                    content_disposition: i.content_disposition,
                    content_language: i.content_language,
                    cache_control: i.cache_control,
                    expires: i.expires,
                    website_redirect_location: i.website_redirect_location,
                    storage_class: i.storage_class.map(|s| s.as_str().to_string()),
                    metadata: i.metadata,
                },
                tags,
            )?
        } else {
            let mut a = src.attrs.clone();
            a.tags = tags;
            a.part_sizes.clear();
            a.checksum = None;
            if let Some(sc) = i.storage_class {
                a.storage_class = Some(sc.as_str().to_string()).filter(|s| s != "STANDARD");
            }
            a
        };
        let algorithm = match i.checksum_algorithm.as_ref() {
            Some(a) => Some(Algorithm::parse(a.as_str()).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "Value for x-amz-checksum-algorithm header is invalid."
                )
            })?),
            None => stored_checksum_alg(&src.attrs.checksum),
        };
        let spec = ChecksumSpec {
            algorithm,
            expected: Expected::Nothing,
        };
        let body = self.layer.read_range(src.data.clone(), 0..src.size);
        let (v, vid) = self
            .store_object(
                &dst,
                &i.key,
                body,
                Some(src.size),
                &spec,
                None,
                None,
                attrs,
                WriteCondition::default(),
            )
            .await?;
        let mut result = CopyObjectResult {
            e_tag: Some(etag(&v.etag)),
            last_modified: Some(timestamp(v.mtime_ms)),
            ..Default::default()
        };
        set_checksum_fields!(result, valued(&v.attrs.checksum));
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(result),
            version_id: reported_version(&dst, &vid),
            copy_source_version_id: reported_version(&src_bucket, &src.version_id),
            ..Default::default()
        }))
    }
}

/// `bytes=first-last` of x-amz-copy-source-range, checked against the source size.
pub(super) fn copy_range(header: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(h) = header else { return Ok(0..size) };
    let bad = || {
        errors::invalid_argument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the zero-based offsets of the first and last bytes to copy",
        )
    };
    let spec = h.trim().strip_prefix("bytes=").ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let first: u64 = a.parse().map_err(|_| bad())?;
    let last: u64 = b.parse().map_err(|_| bad())?;
    if first > last {
        return Err(bad());
    }
    if last >= size {
        return Err(s3_error!(
            InvalidRange,
            "The requested range is not satisfiable"
        ));
    }
    Ok(first..last + 1)
}
