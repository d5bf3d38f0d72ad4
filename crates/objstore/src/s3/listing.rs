//! ListObjects (V1 and V2) and ListObjectVersions: paging, prefixes and delimiters come
//! from the index; this maps S3's markers and tokens onto it and encodes keys when the
//! client asks for `encoding-type=url`.

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::{S3Gateway, errors, etag, owner, reported_version, timestamp};
use crate::index::ops::{self, ListParams};

const MAX_KEYS: i32 = 1000;

/// Applies `encoding-type=url` to keys and prefixes in a response.
pub(super) struct Encoder {
    url: bool,
}

impl Encoder {
    pub fn new(t: Option<&EncodingType>) -> Self {
        Encoder {
            url: t.is_some_and(|t| t.as_str().eq_ignore_ascii_case("url")),
        }
    }

    pub fn apply(&self, s: &str) -> String {
        if self.url {
            // Unreserved characters and '/' stay; everything else is percent-encoded.
            urlencoding::encode(s).replace("%2F", "/")
        } else {
            s.to_string()
        }
    }
}

fn check_encoding(t: Option<&EncodingType>) -> S3Result<()> {
    match t {
        Some(t) if !t.as_str().eq_ignore_ascii_case("url") => Err(errors::invalid_argument(
            "Invalid Encoding Method specified in Request",
        )),
        _ => Ok(()),
    }
}

fn max_keys(n: Option<i32>) -> S3Result<usize> {
    match n {
        Some(n) if n < 0 => Err(errors::invalid_argument("maxKeys should be non-negative")),
        Some(n) => Ok(n.min(MAX_KEYS) as usize),
        None => Ok(MAX_KEYS as usize),
    }
}

fn token_of(key: &str) -> String {
    crate::checksum::b64(key.as_bytes())
}

fn key_of(token: &str) -> S3Result<String> {
    crate::checksum::unb64(token)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| errors::invalid_argument("The continuation token provided is incorrect"))
}

struct Page {
    objects: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
    truncated: bool,
    next: Option<String>,
}

impl S3Gateway {
    async fn list_page(
        &self,
        bucket: &str,
        q: ListParams<'_>,
        enc: &Encoder,
        with_owner: bool,
    ) -> S3Result<Page> {
        let b = self.bucket(bucket).await?;
        let (p, d, a, id, max) = (
            q.prefix.to_string(),
            q.delimiter.map(str::to_string),
            q.after.map(str::to_string),
            b.id,
            q.max,
        );
        let listing = self
            .layer
            .index()
            .read(move |tx| {
                ops::list_objects(
                    tx,
                    id,
                    &ListParams {
                        prefix: &p,
                        delimiter: d.as_deref(),
                        after: a.as_deref(),
                        max,
                    },
                )
            })
            .await
            .map_err(errors::index)?;
        Ok(Page {
            objects: listing
                .entries
                .iter()
                .map(|e| Object {
                    key: Some(enc.apply(&e.key)),
                    size: Some(e.size as i64),
                    e_tag: Some(etag(&e.etag)),
                    last_modified: Some(timestamp(e.mtime_ms)),
                    storage_class: Some(ObjectStorageClass::from_static(
                        ObjectStorageClass::STANDARD,
                    )),
                    owner: with_owner.then(owner),
                    ..Default::default()
                })
                .collect(),
            prefixes: listing
                .common_prefixes
                .iter()
                .map(|p| CommonPrefix {
                    prefix: Some(enc.apply(p)),
                })
                .collect(),
            truncated: listing.truncated,
            next: listing.next_key,
        })
    }

    pub(super) async fn list_objects_impl(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let i = req.input;
        check_encoding(i.encoding_type.as_ref())?;
        let enc = Encoder::new(i.encoding_type.as_ref());
        let max = max_keys(i.max_keys)?;
        let prefix = i.prefix.clone().unwrap_or_default();
        let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
        let marker = i.marker.clone().filter(|m| !m.is_empty());
        let page = self
            .list_page(
                &i.bucket,
                ListParams {
                    prefix: &prefix,
                    delimiter: delimiter.as_deref(),
                    after: marker.as_deref(),
                    max,
                },
                &enc,
                true,
            )
            .await?;
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(i.bucket),
            prefix: Some(enc.apply(&prefix)),
            marker: Some(marker.map(|m| enc.apply(&m)).unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            // NextMarker is returned (as AWS does) only with a delimiter.
            next_marker: (page.truncated && delimiter.is_some())
                .then(|| page.next.as_deref().map(|k| enc.apply(k)))
                .flatten(),
            contents: Some(page.objects),
            common_prefixes: Some(page.prefixes),
            delimiter: delimiter.map(|d| enc.apply(&d)),
            encoding_type: i.encoding_type,
            request_charged: None,
        }))
    }

    pub(super) async fn list_objects_v2_impl(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let i = req.input;
        check_encoding(i.encoding_type.as_ref())?;
        let enc = Encoder::new(i.encoding_type.as_ref());
        let max = max_keys(i.max_keys)?;
        let prefix = i.prefix.clone().unwrap_or_default();
        let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
        let after = match i.continuation_token.as_deref() {
            Some(t) => Some(key_of(t)?),
            None => i.start_after.clone().filter(|s| !s.is_empty()),
        };
        let page = self
            .list_page(
                &i.bucket,
                ListParams {
                    prefix: &prefix,
                    delimiter: delimiter.as_deref(),
                    after: after.as_deref(),
                    max,
                },
                &enc,
                i.fetch_owner.unwrap_or(false),
            )
            .await?;
        let key_count = (page.objects.len() + page.prefixes.len()) as i32;
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(i.bucket),
            prefix: Some(enc.apply(&prefix)),
            max_keys: Some(max as i32),
            key_count: Some(key_count),
            continuation_token: i.continuation_token,
            is_truncated: Some(page.truncated),
            next_continuation_token: page
                .truncated
                .then(|| page.next.as_deref().map(token_of))
                .flatten(),
            contents: Some(page.objects),
            common_prefixes: Some(page.prefixes),
            delimiter: delimiter.map(|d| enc.apply(&d)),
            encoding_type: i.encoding_type,
            start_after: i.start_after.map(|s| enc.apply(&s)),
            request_charged: None,
        }))
    }

    pub(super) async fn list_object_versions_impl(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let i = req.input;
        check_encoding(i.encoding_type.as_ref())?;
        let enc = Encoder::new(i.encoding_type.as_ref());
        let max = max_keys(i.max_keys)?;
        let b = self.bucket(&i.bucket).await?;
        let prefix = i.prefix.clone().unwrap_or_default();
        let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
        let key_marker = i.key_marker.clone().filter(|k| !k.is_empty());
        let version_marker = i.version_id_marker.clone().filter(|v| !v.is_empty());
        if version_marker.is_some() && key_marker.is_none() {
            return Err(errors::invalid_argument(
                "A version-id marker cannot be specified without a key marker.",
            ));
        }
        let (p, d, k, vm, id) = (
            prefix.clone(),
            delimiter.clone(),
            key_marker.clone(),
            version_marker.clone(),
            b.id,
        );
        let listing = self
            .layer
            .index()
            .read(move |tx| {
                ops::list_versions(
                    tx,
                    id,
                    &ListParams {
                        prefix: &p,
                        delimiter: d.as_deref(),
                        after: k.as_deref(),
                        max,
                    },
                    vm.as_deref(),
                )
            })
            .await
            .map_err(errors::index)?;
        let mut versions = Vec::new();
        let mut markers = Vec::new();
        for e in &listing.entries {
            let version_id =
                reported_version(&b, &e.version_id).or_else(|| Some("null".to_string()));
            if e.delete_marker {
                markers.push(DeleteMarkerEntry {
                    key: Some(enc.apply(&e.key)),
                    version_id,
                    is_latest: Some(e.is_latest),
                    last_modified: Some(timestamp(e.mtime_ms)),
                    owner: Some(owner()),
                });
            } else {
                versions.push(ObjectVersion {
                    key: Some(enc.apply(&e.key)),
                    version_id,
                    is_latest: Some(e.is_latest),
                    last_modified: Some(timestamp(e.mtime_ms)),
                    size: Some(e.size as i64),
                    e_tag: Some(etag(&e.etag)),
                    owner: Some(owner()),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    ..Default::default()
                });
            }
        }
        if listing.truncated && listing.next_key.is_none() {
            return Err(s3_error!(
                InternalError,
                "truncated listing without a marker"
            ));
        }
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(b.name),
            prefix: Some(enc.apply(&prefix)),
            key_marker: Some(key_marker.map(|k| enc.apply(&k)).unwrap_or_default()),
            version_id_marker: Some(version_marker.unwrap_or_default()),
            max_keys: Some(max as i32),
            is_truncated: Some(listing.truncated),
            next_key_marker: listing
                .truncated
                .then(|| listing.next_key.as_deref().map(|k| enc.apply(k)))
                .flatten(),
            next_version_id_marker: listing.truncated.then_some(listing.next_sub).flatten(),
            versions: Some(versions),
            delete_markers: Some(markers),
            common_prefixes: Some(
                listing
                    .common_prefixes
                    .iter()
                    .map(|p| CommonPrefix {
                        prefix: Some(enc.apply(p)),
                    })
                    .collect(),
            ),
            delimiter: delimiter.map(|d| enc.apply(&d)),
            encoding_type: i.encoding_type,
            request_charged: None,
        }))
    }
}
