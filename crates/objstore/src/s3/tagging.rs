//! Object and bucket tags: validation as AWS does it, stored with the version (objects)
//! or the bucket.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::{S3Gateway, errors, reported_version};
use crate::index::{IndexError, NULL_VERSION, ops};

const MAX_OBJECT_TAGS: usize = 10;
const MAX_BUCKET_TAGS: usize = 50;
const MAX_TAG_KEY_CHARS: usize = 128;
const MAX_TAG_VALUE_CHARS: usize = 256;

fn invalid_tag(msg: &str) -> S3Error {
    S3Error::with_message(S3ErrorCode::InvalidTag, msg.to_string())
}

/// Checks a tag set; returns it as pairs.
pub(super) fn validate(tags: &[(String, String)], max: usize) -> S3Result<()> {
    if tags.len() > max {
        return Err(invalid_tag(&format!(
            "Object tags cannot be greater than {max}"
        )));
    }
    let mut seen = std::collections::HashSet::new();
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > MAX_TAG_KEY_CHARS {
            return Err(invalid_tag(
                "The TagKey you have provided is too long, max 128",
            ));
        }
        if v.chars().count() > MAX_TAG_VALUE_CHARS {
            return Err(invalid_tag(
                "The TagValue you have provided is too long, max 256",
            ));
        }
        if k.starts_with("aws:") {
            return Err(invalid_tag("Your TagKey cannot be prefixed with aws:"));
        }
        if !seen.insert(k) {
            return Err(invalid_tag(
                "Cannot provide multiple Tags with the same key",
            ));
        }
    }
    Ok(())
}

fn pairs(tagging: Tagging) -> Vec<(String, String)> {
    tagging
        .tag_set
        .into_iter()
        .map(|t| (t.key.unwrap_or_default(), t.value.unwrap_or_default()))
        .collect()
}

/// Tags in key order, as S3 lists them.
fn tag_set(pairs: &[(String, String)]) -> TagSet {
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// The `x-amz-tagging` header (URL query form) as pairs.
pub(super) fn from_header(header: Option<&str>) -> S3Result<Vec<(String, String)>> {
    let Some(h) = header.filter(|h| !h.is_empty()) else {
        return Ok(Vec::new());
    };
    let pairs: Vec<(String, String)> = url::form_urlencoded_parse(h)
        .ok_or_else(|| invalid_tag("The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates."))?;
    validate(&pairs, MAX_OBJECT_TAGS)?;
    Ok(pairs)
}

mod url {
    /// `a=b&c=d` with percent-encoding and `+` for space.
    pub fn form_urlencoded_parse(s: &str) -> Option<Vec<(String, String)>> {
        let decode = |t: &str| {
            urlencoding::decode(&t.replace('+', " "))
                .ok()
                .map(|c| c.into_owned())
        };
        s.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                Some((decode(k)?, decode(v)?))
            })
            .collect()
    }
}

impl S3Gateway {
    pub(super) async fn get_object_tagging_impl(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let v = self
            .find_version(&b, &req.input.key, req.input.version_id.as_deref())
            .await?;
        Ok(S3Response::new(GetObjectTaggingOutput {
            tag_set: tag_set(&v.attrs.tags),
            version_id: reported_version(&b, &v.version_id),
        }))
    }

    async fn set_tags(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
        tags: Vec<(String, String)>,
    ) -> S3Result<Option<String>> {
        let b = self.bucket(bucket).await?;
        let (id, k, vid) = (b.id, key.to_string(), version_id.map(str::to_string));
        let written = self
            .layer
            .index()
            .write(move |tx| ops::set_object_tags(tx, id, &k, vid.as_deref(), tags.clone()))
            .await
            .map_err(|e| match e {
                IndexError::NoSuchVersion if version_id == Some(NULL_VERSION) => {
                    errors::index(IndexError::NoSuchKey)
                }
                other => errors::index(other),
            })?;
        Ok(reported_version(&b, &written))
    }

    pub(super) async fn put_object_tagging_impl(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        let i = req.input;
        let tags = pairs(i.tagging);
        validate(&tags, MAX_OBJECT_TAGS)?;
        let version_id = self
            .set_tags(&i.bucket, &i.key, i.version_id.as_deref(), tags)
            .await?;
        Ok(S3Response::new(PutObjectTaggingOutput { version_id }))
    }

    pub(super) async fn delete_object_tagging_impl(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        let i = req.input;
        let version_id = self
            .set_tags(&i.bucket, &i.key, i.version_id.as_deref(), Vec::new())
            .await?;
        Ok(S3Response::with_status(
            DeleteObjectTaggingOutput { version_id },
            http::StatusCode::NO_CONTENT,
        ))
    }

    pub(super) async fn get_bucket_tagging_impl(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let tags: Vec<(String, String)> = b
            .tagging
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .filter(|t: &Vec<(String, String)>| !t.is_empty())
            .ok_or_else(|| s3_error!(NoSuchTagSet, "The TagSet does not exist"))?;
        Ok(S3Response::new(GetBucketTaggingOutput {
            tag_set: tag_set(&tags),
        }))
    }

    pub(super) async fn put_bucket_tagging_impl(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let tags = pairs(req.input.tagging);
        validate(&tags, MAX_BUCKET_TAGS)?;
        let doc = serde_json::to_string(&tags).map_err(|e| s3_error!(InternalError, "{e}"))?;
        let name = b.name;
        self.layer
            .index()
            .write(move |tx| ops::set_bucket_doc(tx, &name, false, Some(doc.clone())))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::with_status(
            PutBucketTaggingOutput {},
            http::StatusCode::NO_CONTENT,
        ))
    }

    pub(super) async fn delete_bucket_tagging_impl(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let name = b.name;
        self.layer
            .index()
            .write(move |tx| ops::set_bucket_doc(tx, &name, false, None))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::with_status(
            DeleteBucketTaggingOutput {},
            http::StatusCode::NO_CONTENT,
        ))
    }
}
