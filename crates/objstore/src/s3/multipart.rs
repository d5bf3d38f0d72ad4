//! Multipart uploads: create, upload part (and part copy), complete, abort, list parts
//! and uploads. Parts are always erasure-coded pieces; the completed object is the
//! concatenation of its parts' pieces (no data is copied at completion).

use s3s::crypto::Checksum;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::conditions::{self, ChecksumSpec, Expected};
use super::copy::{SourceConditions, copy_range};
use super::object::{ContentHeaders, attrs_from, new_version_id};
use super::{
    MAX_OBJECT_BYTES, MAX_PUT_BYTES, S3Gateway, errors, etag, owner, reported_version,
    set_checksum_fields, tagging, timestamp, valued,
};
use crate::checksum::{self, Algorithm};
use crate::index::{
    Bucket, IndexError, NewVersion, ObjectAttrs, ObjectData, Part, StoredChecksum, Upload, ops,
};
use crate::objects::ingest::IngestRequest;

const MAX_PART_NUMBER: i32 = 10_000;
const MAX_LISTED: i32 = 1000;

fn composite_allowed(alg: Algorithm) -> bool {
    alg != Algorithm::Crc64Nvme
}

impl S3Gateway {
    async fn upload_of(&self, b: &Bucket, key: &str, upload_id: &str) -> S3Result<Upload> {
        let uid = upload_id.to_string();
        let u = self
            .layer
            .index()
            .read(move |tx| ops::upload(tx, &uid))
            .await
            .map_err(errors::index)?;
        u.filter(|u| u.bucket_id == b.id && u.key == key)
            .ok_or_else(|| errors::index(IndexError::NoSuchUpload))
    }

    pub(super) async fn create_multipart_upload_impl(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let tags = tagging::from_header(i.tagging.as_deref())?;
        let mut attrs = attrs_from(
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
        let algorithm = match &i.checksum_algorithm {
            Some(a) => Some(Algorithm::parse(a.as_str()).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "Value for x-amz-checksum-algorithm header is invalid."
                )
            })?),
            None => None,
        };
        let kind = i.checksum_type.as_ref().map(|t| t.as_str().to_string());
        if let Some(alg) = algorithm {
            let kind = kind.unwrap_or_else(|| {
                if composite_allowed(alg) {
                    ChecksumType::COMPOSITE
                } else {
                    ChecksumType::FULL_OBJECT
                }
                .to_string()
            });
            let ok = match kind.as_str() {
                ChecksumType::FULL_OBJECT => alg.is_crc(),
                ChecksumType::COMPOSITE => composite_allowed(alg),
                _ => false,
            };
            if !ok {
                return Err(s3_error!(
                    InvalidRequest,
                    "The {} checksum algorithm does not support the {kind} checksum type",
                    alg.name()
                ));
            }
            attrs.checksum = Some(StoredChecksum {
                algorithm: alg.name().to_string(),
                value: String::new(),
                kind,
            });
        } else if kind.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            ));
        }
        let u = Upload {
            upload_id: new_version_id(),
            bucket_id: b.id,
            key: i.key.clone(),
            created_ms: self.layer.now_ms(),
            attrs: attrs.clone(),
        };
        let upload_id = u.upload_id.clone();
        self.layer
            .index()
            .write(move |tx| ops::create_upload(tx, &u))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(b.name),
            key: Some(i.key),
            upload_id: Some(upload_id),
            checksum_algorithm: attrs
                .checksum
                .as_ref()
                .map(|c| ChecksumAlgorithm::from(c.algorithm.clone())),
            checksum_type: attrs
                .checksum
                .as_ref()
                .map(|c| ChecksumType::from(c.kind.clone())),
            ..Default::default()
        }))
    }

    /// Stores one part's bytes and records it; nothing stays stored on failure.
    #[allow(clippy::too_many_arguments)]
    async fn store_part<S, E>(
        &self,
        b: &Bucket,
        u: &Upload,
        part_number: i32,
        body: S,
        size_hint: Option<u64>,
        spec: &ChecksumSpec,
        md5_expected: Option<[u8; 16]>,
        trailers: Option<&s3s::TrailingHeaders>,
    ) -> S3Result<Part>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin + Send,
        E: crate::objects::ingest::BodyFault,
    {
        if !(1..=MAX_PART_NUMBER).contains(&part_number) {
            return Err(errors::invalid_argument(
                "Part number must be an integer between 1 and 10000, inclusive",
            ));
        }
        let upload_alg = u
            .attrs
            .checksum
            .as_ref()
            .and_then(|c| Algorithm::parse(&c.algorithm));
        let mut spec = spec.clone();
        match (upload_alg, spec.algorithm) {
            (Some(want), Some(got)) if want != got => {
                return Err(s3_error!(
                    InvalidRequest,
                    "Checksum Type mismatch occurred, expected checksum Type: {}, actual checksum Type: {}",
                    want.name().to_ascii_lowercase(),
                    got.name().to_ascii_lowercase()
                ));
            }
            (Some(want), None) => spec.algorithm = Some(want),
            _ => {}
        }
        let req = IngestRequest {
            geometry: b.geometry,
            checksum: spec.algorithm,
            size_hint,
            max_bytes: MAX_PUT_BYTES,
            allow_inline: false,
        };
        let ingested = self.layer.ingest(body, req).await.map_err(errors::ingest)?;
        let checked = conditions::check_md5(md5_expected, &ingested.md5).and_then(|()| {
            conditions::verify_checksum(&spec, ingested.checksum.as_ref(), trailers)
        });
        let checksum = match checked {
            Ok(c) => c,
            Err(e) => {
                self.layer.discard(&ingested.data).await;
                return Err(e);
            }
        };
        let part = Part {
            part_number: i64::from(part_number),
            size: ingested.size,
            etag: hex::encode(ingested.md5),
            mtime_ms: self.layer.now_ms(),
            attrs: ObjectAttrs {
                checksum,
                ..Default::default()
            },
            pieces: ingested.data.pieces().to_vec(),
        };
        let (p, uid, bid, key, due) = (
            part.clone(),
            u.upload_id.clone(),
            b.id,
            u.key.clone(),
            self.layer.gc_due_ms(),
        );
        if let Err(e) = self
            .layer
            .index()
            .write(move |tx| ops::put_part(tx, &uid, bid, &key, &p, due))
            .await
        {
            self.layer.discard(&ingested.data).await;
            return Err(errors::index(e));
        }
        self.layer.mark_degraded(ingested.degraded).await;
        Ok(part)
    }

    pub(super) async fn upload_part_impl(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let trailers = req.trailing_headers;
        let headers = req.headers;
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
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
        let size_hint = i.content_length.map(|n| n as u64);
        let part = match i.body {
            Some(body) => {
                self.store_part(
                    &b,
                    &u,
                    i.part_number,
                    body,
                    size_hint,
                    &spec,
                    md5,
                    trailers.as_ref(),
                )
                .await?
            }
            None => {
                let empty = futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>();
                self.store_part(
                    &b,
                    &u,
                    i.part_number,
                    empty,
                    Some(0),
                    &spec,
                    md5,
                    trailers.as_ref(),
                )
                .await?
            }
        };
        let mut out = UploadPartOutput {
            e_tag: Some(etag(&part.etag)),
            ..Default::default()
        };
        set_checksum_fields!(out, valued(&part.attrs.checksum));
        Ok(S3Response::new(out))
    }

    pub(super) async fn upload_part_copy_impl(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
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
        let range = copy_range(i.copy_source_range.as_deref(), src.size)?;
        if range.end - range.start > MAX_PUT_BYTES {
            return Err(s3_error!(
                InvalidRequest,
                "The specified copy range is larger than the maximum part size"
            ));
        }
        let size = range.end - range.start;
        let body = self.layer.read_range(src.data.clone(), range);
        let spec = ChecksumSpec {
            algorithm: None,
            expected: Expected::Nothing,
        };
        let part = self
            .store_part(&b, &u, i.part_number, body, Some(size), &spec, None, None)
            .await?;
        let mut result = CopyPartResult {
            e_tag: Some(etag(&part.etag)),
            last_modified: Some(timestamp(part.mtime_ms)),
            ..Default::default()
        };
        set_checksum_fields!(result, valued(&part.attrs.checksum));
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(result),
            copy_source_version_id: reported_version(&src_bucket, &src.version_id),
            ..Default::default()
        }))
    }

    pub(super) async fn complete_multipart_upload_impl(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
        let requested = i.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        if requested.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "The XML you provided was not well-formed or did not validate against our published schema"
            ));
        }
        let uid = u.upload_id.clone();
        let stored = self
            .layer
            .index()
            .read(move |tx| ops::parts(tx, &uid, 0, MAX_PART_NUMBER as usize + 1))
            .await
            .map_err(errors::index)?;
        let invalid_part = || {
            S3Error::with_message(
                S3ErrorCode::InvalidPart,
                "One or more of the specified parts could not be found. The part may not have been uploaded, \
                 or the specified entity tag may not have matched the part's entity tag.",
            )
        };
        let upload_checksum = u.attrs.checksum.clone();
        let upload_alg = upload_checksum
            .as_ref()
            .and_then(|c| Algorithm::parse(&c.algorithm));
        // Order first, then each part, then sizes: the order AWS reports problems in.
        let mut last = 0;
        for r in &requested {
            let number = r.part_number.ok_or_else(invalid_part)?;
            if number <= last {
                return Err(s3_error!(
                    InvalidPartOrder,
                    "The list of parts was not in ascending order. The parts list must be specified in order by part number."
                ));
            }
            last = number;
        }
        let mut chosen: Vec<&Part> = Vec::with_capacity(requested.len());
        for r in &requested {
            let number = r.part_number.ok_or_else(invalid_part)?;
            let p = stored
                .iter()
                .find(|p| p.part_number == i64::from(number))
                .ok_or_else(invalid_part)?;
            if r.e_tag.as_ref().is_some_and(|e| e.value() != p.etag) {
                return Err(invalid_part());
            }
            if let Some(alg) = upload_alg {
                let given = match alg {
                    Algorithm::Crc32 => r.checksum_crc32.as_ref(),
                    Algorithm::Crc32c => r.checksum_crc32c.as_ref(),
                    Algorithm::Crc64Nvme => r.checksum_crc64nvme.as_ref(),
                    Algorithm::Sha1 => r.checksum_sha1.as_ref(),
                    Algorithm::Sha256 => r.checksum_sha256.as_ref(),
                };
                let have = valued(&p.attrs.checksum).map(|c| c.value.as_str());
                if given.is_some_and(|g| Some(g.as_str()) != have) {
                    return Err(invalid_part());
                }
            }
            chosen.push(p);
        }
        if chosen[..chosen.len() - 1]
            .iter()
            .any(|p| p.size < self.min_part_bytes)
        {
            return Err(s3_error!(
                EntityTooSmall,
                "Your proposed upload is smaller than the minimum allowed object size."
            ));
        }
        let size: u64 = chosen.iter().map(|p| p.size).sum();
        if size > MAX_OBJECT_BYTES {
            return Err(s3_error!(
                EntityTooLarge,
                "Your proposed upload exceeds the maximum allowed object size."
            ));
        }
        // ETag: MD5 of the parts' binary MD5s, then "-" and the part count.
        let mut md5 = s3s::crypto::Md5::new();
        for p in &chosen {
            md5.update(
                &hex::decode(&p.etag).map_err(|_| s3_error!(InternalError, "damaged part ETag"))?,
            );
        }
        let etag_value = format!("{}-{}", hex::encode(md5.finalize()), chosen.len());
        let checksum = match (&upload_checksum, upload_alg) {
            (Some(c), Some(alg)) => Some(final_checksum(alg, &c.kind, &chosen)?),
            _ => None,
        };
        let mut attrs = u.attrs.clone();
        attrs.checksum = checksum;
        attrs.part_sizes = chosen.iter().map(|p| p.size).collect();
        let v = NewVersion {
            key: u.key.clone(),
            size,
            etag: etag_value,
            mtime_ms: self.layer.now_ms(),
            attrs,
            data: ObjectData::Pieces(
                chosen
                    .iter()
                    .flat_map(|p| p.pieces.iter().cloned())
                    .collect(),
            ),
        };
        let cond = conditions::write_condition(i.if_match.as_ref(), i.if_none_match.as_ref())?;
        let (nv, uid, bid, new_vid, due) = (
            v.clone(),
            u.upload_id.clone(),
            b.id,
            new_version_id(),
            self.layer.gc_due_ms(),
        );
        let vid = self
            .layer
            .index()
            .write(move |tx| ops::complete_upload(tx, &uid, bid, &nv, &cond, &new_vid, due))
            .await
            .map_err(errors::index)?;
        let mut out = CompleteMultipartUploadOutput {
            bucket: Some(b.name.clone()),
            key: Some(v.key.clone()),
            location: Some(format!("/{}/{}", b.name, v.key)),
            e_tag: Some(etag(&v.etag)),
            version_id: reported_version(&b, &vid),
            ..Default::default()
        };
        set_checksum_fields!(out, valued(&v.attrs.checksum));
        out.checksum_type = valued(&v.attrs.checksum).map(|c| ChecksumType::from(c.kind.clone()));
        Ok(S3Response::new(out))
    }

    pub(super) async fn abort_multipart_upload_impl(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
        let (uid, due) = (u.upload_id, self.layer.now_ms());
        self.layer
            .index()
            .write(move |tx| ops::finish_upload(tx, &uid, &[], due))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::with_status(
            AbortMultipartUploadOutput::default(),
            http::StatusCode::NO_CONTENT,
        ))
    }

    pub(super) async fn list_parts_impl(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let u = self.upload_of(&b, &i.key, &i.upload_id).await?;
        let max = i.max_parts.unwrap_or(MAX_LISTED).clamp(0, MAX_LISTED);
        let marker = i.part_number_marker.unwrap_or(0).max(0);
        let uid = u.upload_id.clone();
        let mut parts = self
            .layer
            .index()
            .read(move |tx| ops::parts(tx, &uid, i64::from(marker), max as usize + 1))
            .await
            .map_err(errors::index)?;
        let truncated = parts.len() > max as usize;
        parts.truncate(max as usize);
        let next = parts.last().map(|p| p.part_number as i32);
        let listed = parts
            .iter()
            .map(|p| {
                let mut o = s3s::dto::Part {
                    part_number: Some(p.part_number as i32),
                    e_tag: Some(etag(&p.etag)),
                    size: Some(p.size as i64),
                    last_modified: Some(timestamp(p.mtime_ms)),
                    ..Default::default()
                };
                set_checksum_fields!(o, valued(&p.attrs.checksum));
                o
            })
            .collect();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(b.name),
            key: Some(u.key),
            upload_id: Some(u.upload_id),
            max_parts: Some(max),
            part_number_marker: i.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            parts: Some(listed),
            owner: Some(owner()),
            initiator: Some(Initiator {
                display_name: Some("ferrobay".into()),
                id: Some("ferrobay".into()),
            }),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            checksum_algorithm: u
                .attrs
                .checksum
                .as_ref()
                .map(|c| ChecksumAlgorithm::from(c.algorithm.clone())),
            checksum_type: u
                .attrs
                .checksum
                .as_ref()
                .map(|c| ChecksumType::from(c.kind.clone())),
            ..Default::default()
        }))
    }

    pub(super) async fn list_multipart_uploads_impl(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let i = req.input;
        let b = self.bucket(&i.bucket).await?;
        let max = i.max_uploads.unwrap_or(MAX_LISTED).clamp(0, MAX_LISTED);
        let (prefix, delimiter, key_marker, uid_marker, id) = (
            i.prefix.clone().unwrap_or_default(),
            i.delimiter.clone().filter(|d| !d.is_empty()),
            i.key_marker.clone().filter(|k| !k.is_empty()),
            i.upload_id_marker.clone().filter(|k| !k.is_empty()),
            b.id,
        );
        let page = self
            .layer
            .index()
            .read(move |tx| {
                ops::list_uploads(
                    tx,
                    id,
                    &ops::ListParams {
                        prefix: &prefix,
                        delimiter: delimiter.as_deref(),
                        after: key_marker.as_deref(),
                        max: max as usize,
                    },
                    uid_marker.as_deref(),
                )
            })
            .await
            .map_err(errors::index)?;
        let enc = super::listing::Encoder::new(i.encoding_type.as_ref());
        let uploads = page
            .entries
            .iter()
            .map(|u| MultipartUpload {
                key: Some(enc.apply(&u.key)),
                upload_id: Some(u.upload_id.clone()),
                initiated: Some(timestamp(u.created_ms)),
                owner: Some(owner()),
                initiator: Some(Initiator {
                    display_name: Some("ferrobay".into()),
                    id: Some("ferrobay".into()),
                }),
                storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
                checksum_algorithm: u
                    .attrs
                    .checksum
                    .as_ref()
                    .map(|c| ChecksumAlgorithm::from(c.algorithm.clone())),
                checksum_type: u
                    .attrs
                    .checksum
                    .as_ref()
                    .map(|c| ChecksumType::from(c.kind.clone())),
            })
            .collect();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(b.name),
            prefix: i.prefix.map(|p| enc.apply(&p)),
            delimiter: i.delimiter.map(|d| enc.apply(&d)),
            key_marker: i.key_marker.map(|k| enc.apply(&k)),
            upload_id_marker: i.upload_id_marker,
            max_uploads: Some(max),
            is_truncated: Some(page.truncated),
            next_key_marker: page
                .truncated
                .then(|| page.next_key.as_deref().map(|k| enc.apply(k)))
                .flatten(),
            next_upload_id_marker: page.truncated.then_some(page.next_sub).flatten(),
            uploads: Some(uploads),
            common_prefixes: Some(
                page.common_prefixes
                    .iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(enc.apply(p)),
                    })
                    .collect(),
            ),
            encoding_type: i.encoding_type,
            request_charged: None,
        }))
    }
}

/// The object checksum of a completed upload from its parts' checksums.
fn final_checksum(alg: Algorithm, kind: &str, parts: &[&Part]) -> S3Result<StoredChecksum> {
    let raw: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| {
            valued(&p.attrs.checksum)
                .filter(|c| c.algorithm == alg.name())
                .and_then(|c| checksum::unb64(&c.value))
                .ok_or_else(|| {
                    s3_error!(
                        InvalidPart,
                        "Part {} has no {} checksum",
                        p.part_number,
                        alg.name()
                    )
                })
        })
        .collect::<S3Result<_>>()?;
    let value = if kind == ChecksumType::FULL_OBJECT {
        let mut acc = checksum::empty(alg);
        for (p, r) in parts.iter().zip(&raw) {
            acc = checksum::combine_crc(alg, &acc, r, p.size).ok_or_else(|| {
                s3_error!(InternalError, "cannot combine {} checksums", alg.name())
            })?;
        }
        checksum::b64(&acc)
    } else {
        let mut h = checksum::Hasher::new(alg);
        for r in &raw {
            h.update(r);
        }
        format!("{}-{}", checksum::b64(&h.finalize()), parts.len())
    };
    Ok(StoredChecksum {
        algorithm: alg.name().to_string(),
        value,
        kind: kind.to_string(),
    })
}
