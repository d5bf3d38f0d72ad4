//! Object operations: PUT, GET (ranges, part numbers, conditions), HEAD, DELETE,
//! DeleteObjects, and what they share (attributes in, headers out, finding a version).

use std::collections::BTreeMap;

use bytes::Bytes;
use futures::Stream;
use http::HeaderMap;
use s3s::dto::*;
use s3s::{S3Error, S3Request, S3Response, S3Result, s3_error};

use super::conditions::{self, ChecksumSpec};
use super::{
    MAX_PUT_BYTES, MAX_USER_METADATA_BYTES, S3Gateway, errors, etag, is_multipart,
    reported_version, set_checksum_fields, tagging, timestamp, valued,
};
use crate::checksum::Algorithm;
use crate::index::{
    Bucket, NewVersion, ObjectAttrs, ObjectVersion, StoredChecksum, WriteCondition, ops,
};
use crate::objects::ingest::IngestRequest;

/// What a client sends with an object besides its bytes.
pub(super) struct ContentHeaders {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub content_disposition: Option<String>,
    pub content_language: Option<String>,
    pub cache_control: Option<String>,
    pub expires: Option<Timestamp>,
    pub website_redirect_location: Option<String>,
    pub storage_class: Option<String>,
    pub metadata: Option<Metadata>,
}

fn http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

pub(super) fn attrs_from(h: ContentHeaders, tags: Vec<(String, String)>) -> S3Result<ObjectAttrs> {
    let user_metadata: BTreeMap<String, String> = h
        .metadata
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    let meta_bytes: usize = user_metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    if meta_bytes > MAX_USER_METADATA_BYTES {
        return Err(s3_error!(
            MetadataTooLarge,
            "Your metadata headers exceed the maximum allowed metadata size"
        ));
    }
    if let Some(sc) = &h.storage_class
        && ![
            "STANDARD",
            "REDUCED_REDUNDANCY",
            "STANDARD_IA",
            "ONEZONE_IA",
            "INTELLIGENT_TIERING",
        ]
        .contains(&sc.as_str())
    {
        return Err(s3_error!(
            InvalidStorageClass,
            "The storage class you specified is not valid"
        ));
    }
    Ok(ObjectAttrs {
        content_type: h.content_type,
        content_encoding: h.content_encoding,
        content_disposition: h.content_disposition,
        content_language: h.content_language,
        cache_control: h.cache_control,
        expires: h.expires.as_ref().and_then(http_date),
        website_redirect_location: h.website_redirect_location,
        storage_class: h.storage_class.filter(|s| s != "STANDARD"),
        user_metadata,
        checksum: None,
        tags,
        part_sizes: Vec::new(),
    })
}

/// Fills the headers GET and HEAD share.
macro_rules! fill_object_headers {
    ($out:expr, $b:expr, $v:expr, $checksum_mode:expr) => {{
        let a = &$v.attrs;
        $out.e_tag = Some(etag(&$v.etag));
        $out.last_modified = Some(timestamp($v.mtime_ms));
        $out.accept_ranges = Some("bytes".to_string());
        $out.content_type = Some(
            a.content_type
                .clone()
                .unwrap_or_else(|| "binary/octet-stream".to_string()),
        );
        $out.content_encoding = a.content_encoding.clone();
        $out.content_disposition = a.content_disposition.clone();
        $out.content_language = a.content_language.clone();
        $out.cache_control = a.cache_control.clone();
        $out.expires = a
            .expires
            .as_deref()
            .and_then(|e| Timestamp::parse(TimestampFormat::HttpDate, e).ok());
        $out.website_redirect_location = a.website_redirect_location.clone();
        $out.storage_class = a.storage_class.clone().map(StorageClass::from);
        if !a.user_metadata.is_empty() {
            $out.metadata = Some(a.user_metadata.clone().into_iter().collect());
        }
        $out.version_id = reported_version($b, &$v.version_id);
        if is_multipart($v) {
            $out.parts_count = Some(a.part_sizes.len() as i32);
        }
        if $checksum_mode {
            set_checksum_fields!($out, valued(&a.checksum));
            $out.checksum_type = valued(&a.checksum).map(|c| ChecksumType::from(c.kind.clone()));
        }
    }};
}

/// The byte range a GET/HEAD asks for: (range, content-range header) or whole object.
fn requested_range(
    v: &ObjectVersion,
    range: Option<&Range>,
    part_number: Option<i32>,
) -> S3Result<(std::ops::Range<u64>, Option<String>)> {
    let size = v.size;
    let content_range =
        |r: &std::ops::Range<u64>| format!("bytes {}-{}/{}", r.start, r.end - 1, size);
    match (range, part_number) {
        (Some(_), Some(_)) => Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        )),
        (Some(r), None) => {
            let r = r
                .check(size)
                .map_err(|_| s3_error!(InvalidRange, "The requested range is not satisfiable"))?;
            Ok((r.clone(), Some(content_range(&r))))
        }
        (None, Some(n)) => {
            let sizes: Vec<u64> = if is_multipart(v) {
                v.attrs.part_sizes.clone()
            } else {
                vec![size]
            };
            let idx = usize::try_from(n)
                .ok()
                .filter(|n| (1..=sizes.len()).contains(n))
                .ok_or_else(|| {
                    errors::custom(
                        "InvalidPartNumber",
                        http::StatusCode::RANGE_NOT_SATISFIABLE,
                        "The requested partnumber is not satisfiable",
                    )
                })?;
            let start: u64 = sizes[..idx - 1].iter().sum();
            let r = start..start + sizes[idx - 1];
            if r.is_empty() {
                return Ok((r, None));
            }
            let cr = content_range(&r);
            Ok((r, Some(cr)))
        }
        (None, None) => Ok((0..size, None)),
    }
}

pub(super) fn new_version_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Error for a key whose current version is a delete marker (GET/HEAD without a version).
fn deleted_key(v: &ObjectVersion, bucket: &Bucket) -> S3Error {
    let mut e = s3_error!(NoSuchKey, "The specified key does not exist.");
    let mut h = HeaderMap::new();
    h.insert(
        "x-amz-delete-marker",
        http::HeaderValue::from_static("true"),
    );
    if let Some(vid) = reported_version(bucket, &v.version_id)
        && let Ok(val) = vid.parse()
    {
        h.insert("x-amz-version-id", val);
    }
    e.set_headers(h);
    e
}

impl S3Gateway {
    /// The version a request names (current when `version_id` is None); a delete
    /// marker is an error as S3 reports it.
    pub(super) async fn find_version(
        &self,
        b: &Bucket,
        key: &str,
        version_id: Option<&str>,
    ) -> S3Result<ObjectVersion> {
        let (id, k, vid) = (b.id, key.to_string(), version_id.map(str::to_string));
        let found = self
            .layer
            .index()
            .read(move |tx| match &vid {
                Some(v) => ops::version(tx, id, &k, v),
                None => ops::latest(tx, id, &k),
            })
            .await
            .map_err(errors::index)?;
        match (found, version_id) {
            (None, None) => Err(s3_error!(NoSuchKey, "The specified key does not exist.")),
            (None, Some(_)) => Err(s3_error!(
                NoSuchVersion,
                "The specified version does not exist."
            )),
            (Some(v), None) if v.delete_marker => Err(deleted_key(&v, b)),
            (Some(v), Some(_)) if v.delete_marker => {
                let mut e = s3_error!(
                    MethodNotAllowed,
                    "The specified method is not allowed against this resource."
                );
                let mut h = HeaderMap::new();
                h.insert(
                    "x-amz-delete-marker",
                    http::HeaderValue::from_static("true"),
                );
                e.set_headers(h);
                Err(e)
            }
            (Some(v), _) => Ok(v),
        }
    }

    /// Stores a body as a new version of `key`: ingest, verify, commit. Nothing stays
    /// stored when any step fails. Returns the committed version.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn store_object<S, E>(
        &self,
        b: &Bucket,
        key: &str,
        body: S,
        size_hint: Option<u64>,
        spec: &ChecksumSpec,
        md5_expected: Option<[u8; 16]>,
        trailers: Option<&s3s::TrailingHeaders>,
        mut attrs: ObjectAttrs,
        cond: WriteCondition,
    ) -> S3Result<(NewVersion, String)>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: crate::objects::ingest::BodyFault,
    {
        let req = IngestRequest {
            geometry: b.geometry,
            checksum: spec.algorithm,
            size_hint,
            max_bytes: MAX_PUT_BYTES,
            allow_inline: true,
        };
        let ingested = self.layer.ingest(body, req).await.map_err(errors::ingest)?;
        let checked = conditions::check_md5(md5_expected, &ingested.md5)
            .and_then(|()| conditions::verify_checksum(spec, ingested.checksum.as_ref(), trailers));
        let stored_checksum = match checked {
            Ok(c) => c,
            Err(e) => {
                self.layer.discard(&ingested.data).await;
                return Err(e);
            }
        };
        attrs.checksum = stored_checksum;
        let v = NewVersion {
            key: key.to_string(),
            size: ingested.size,
            etag: hex::encode(ingested.md5),
            mtime_ms: self.layer.now_ms(),
            attrs,
            data: ingested.data,
        };
        let vid = self.commit(b, &v, cond).await?;
        self.layer.mark_degraded(ingested.degraded).await;
        Ok((v, vid))
    }

    /// Commits a stored version; discards its data if the commit is refused.
    pub(super) async fn commit(
        &self,
        b: &Bucket,
        v: &NewVersion,
        cond: WriteCondition,
    ) -> S3Result<String> {
        let (id, nv, new_vid, due) = (b.id, v.clone(), new_version_id(), self.layer.gc_due_ms());
        let r = self
            .layer
            .index()
            .write(move |tx| ops::put_version(tx, id, &nv, &cond, &new_vid, due))
            .await;
        match r {
            Ok(vid) => Ok(vid),
            Err(e) => {
                self.layer.discard(&v.data).await;
                Err(errors::index(e))
            }
        }
    }

    pub(super) async fn put_object_impl(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let trailers = req.trailing_headers;
        let headers = req.headers;
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        if i.content_length
            .is_some_and(|n| n < 0 || n as u64 > MAX_PUT_BYTES)
        {
            return Err(s3_error!(
                EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed object size."
            ));
        }
        let spec = conditions::checksum_spec(
            &headers,
            [
                (Algorithm::Crc32, i.checksum_crc32.as_ref()),
                (Algorithm::Crc32c, i.checksum_crc32c.as_ref()),
                (Algorithm::Crc64Nvme, i.checksum_crc64nvme.as_ref()),
                (Algorithm::Sha1, i.checksum_sha1.as_ref()),
                (Algorithm::Sha256, i.checksum_sha256.as_ref()),
            ],
            i.checksum_algorithm.as_ref(),
        )?;
        let md5 = conditions::content_md5(i.content_md5.as_deref())?;
        let cond = conditions::write_condition(i.if_match.as_ref(), i.if_none_match.as_ref())?;
        let tags = tagging::from_header(i.tagging.as_deref())?;
        let attrs = attrs_from(
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
        )?;
        let size_hint = i.content_length.map(|n| n as u64);
        let (v, vid) = match i.body {
            Some(body) => {
                self.store_object(
                    &b,
                    &i.key,
                    body,
                    size_hint,
                    &spec,
                    md5,
                    trailers.as_ref(),
                    attrs,
                    cond,
                )
                .await?
            }
            None => {
                let empty = futures::stream::empty::<Result<Bytes, std::io::Error>>();
                self.store_object(
                    &b,
                    &i.key,
                    empty,
                    Some(0),
                    &spec,
                    md5,
                    trailers.as_ref(),
                    attrs,
                    cond,
                )
                .await?
            }
        };
        let mut out = PutObjectOutput {
            e_tag: Some(etag(&v.etag)),
            version_id: reported_version(&b, &vid),
            size: Some(v.size as i64),
            ..Default::default()
        };
        set_checksum_fields!(out, valued(&v.attrs.checksum));
        out.checksum_type = valued(&v.attrs.checksum).map(|c| ChecksumType::from(c.kind.clone()));
        Ok(S3Response::new(out))
    }

    pub(super) async fn get_object_impl(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let v = self
            .find_version(&b, &i.key, i.version_id.as_deref())
            .await?;
        conditions::check_read(
            &v,
            i.if_match.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
            i.if_unmodified_since.as_ref(),
        )?;
        let (range, content_range) = requested_range(&v, i.range.as_ref(), i.part_number)?;
        let whole = content_range.is_none();
        let checksum_mode = whole
            && i.checksum_mode
                .as_ref()
                .is_some_and(|m| m.as_str() == ChecksumMode::ENABLED);
        let mut out = GetObjectOutput::default();
        fill_object_headers!(out, &b, &v, checksum_mode);
        if !v.attrs.tags.is_empty() {
            out.tag_count = Some(v.attrs.tags.len() as i32);
        }
        out.content_length = Some((range.end - range.start) as i64);
        out.content_range = content_range;
        let mut stream = self.layer.read_range(v.data, range);
        stream.first_chunk().await.map_err(errors::data)?;
        out.body = Some(StreamingBlob::wrap(stream));
        Ok(S3Response::new(out))
    }

    pub(super) async fn head_object_impl(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let v = self
            .find_version(&b, &i.key, i.version_id.as_deref())
            .await?;
        conditions::check_read(
            &v,
            i.if_match.as_ref(),
            i.if_none_match.as_ref(),
            i.if_modified_since.as_ref(),
            i.if_unmodified_since.as_ref(),
        )?;
        let (range, content_range) = requested_range(&v, i.range.as_ref(), i.part_number)?;
        let checksum_mode = content_range.is_none()
            && i.checksum_mode
                .as_ref()
                .is_some_and(|m| m.as_str() == ChecksumMode::ENABLED);
        let mut out = HeadObjectOutput::default();
        fill_object_headers!(out, &b, &v, checksum_mode);
        out.content_length = Some((range.end - range.start) as i64);
        out.content_range = content_range;
        Ok(S3Response::new(out))
    }

    /// Deletes one key or version (DeleteObject and each entry of DeleteObjects).
    async fn delete_one(
        &self,
        b: &Bucket,
        key: &str,
        version_id: Option<&str>,
        if_match: Option<&ETagCondition>,
    ) -> S3Result<DeletedObject> {
        if let Some(cond) = if_match {
            let (id, k) = (b.id, key.to_string());
            let cur = self
                .layer
                .index()
                .read(move |tx| ops::latest(tx, id, &k))
                .await
                .map_err(errors::index)?
                .filter(|v| !v.delete_marker)
                .ok_or_else(|| s3_error!(NoSuchKey, "The specified key does not exist."))?;
            if let ETagCondition::ETag(e) = cond
                && e.value() != cur.etag
            {
                return Err(errors::precondition_failed());
            }
        }
        let (id, k, vid, new_vid, now, due) = (
            b.id,
            key.to_string(),
            version_id.map(str::to_string),
            new_version_id(),
            self.layer.now_ms(),
            self.layer.gc_due_ms(),
        );
        let r = self
            .layer
            .index()
            .write(move |tx| ops::delete_object(tx, id, &k, vid.as_deref(), &new_vid, now, due))
            .await
            .map_err(errors::index)?;
        let marker_version = r.version_id.as_ref().and_then(|v| reported_version(b, v));
        Ok(DeletedObject {
            key: Some(key.to_string()),
            version_id: if version_id.is_some() {
                marker_version.clone()
            } else {
                None
            },
            delete_marker: r.delete_marker.then_some(true),
            delete_marker_version_id: if r.delete_marker && version_id.is_none() {
                marker_version
            } else {
                None
            },
        })
    }

    pub(super) async fn delete_object_impl(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let d = self
            .delete_one(&b, &i.key, i.version_id.as_deref(), i.if_match.as_ref())
            .await?;
        Ok(S3Response::with_status(
            DeleteObjectOutput {
                delete_marker: d.delete_marker,
                version_id: d.version_id.or(d.delete_marker_version_id),
                request_charged: None,
            },
            http::StatusCode::NO_CONTENT,
        ))
    }

    pub(super) async fn delete_objects_impl(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        if i.delete.objects.len() > 1000 {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            ));
        }
        let quiet = i.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut failed = Vec::new();
        for o in &i.delete.objects {
            let cond = o.e_tag.as_ref().map(|e| ETagCondition::ETag(e.clone()));
            match self
                .delete_one(&b, &o.key, o.version_id.as_deref(), cond.as_ref())
                .await
            {
                Ok(d) => deleted.push(d),
                Err(e) => failed.push(s3s::dto::Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key.clone()),
                    message: e.message().map(str::to_string),
                    version_id: o.version_id.clone(),
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: (!quiet).then_some(deleted),
            errors: (!failed.is_empty()).then_some(failed),
            request_charged: None,
        }))
    }
}

pub(super) fn stored_checksum_alg(c: &Option<StoredChecksum>) -> Option<Algorithm> {
    valued(c).and_then(|c| Algorithm::parse(&c.algorithm))
}
