//! The S3 protocol adapter: s3s parses requests (SigV4, aws-chunked bodies, XML) and calls
//! the [`s3s::S3`] methods here, which validate S3 semantics and call the object layer.
//! Errors are returned as AWS returns them (`errors.rs`).

mod acl;
mod auth;
mod bucket;
mod conditions;
mod copy;
mod errors;
mod listing;
mod multipart;
mod object;
mod policy;
mod tagging;

pub use auth::{AccessControl, Credentials, KeyStore};
pub use policy::BucketPolicy;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::{ETag, Owner, Timestamp};
use s3s::{S3Result, s3_error};

use crate::index::{Bucket, ObjectVersion, StoredChecksum, Versioning};
use crate::objects::ObjectLayer;

/// Largest object a single PUT (or copy) may write, as on AWS.
pub const MAX_PUT_BYTES: u64 = 5 << 30;
/// Largest object assembled from parts.
pub const MAX_OBJECT_BYTES: u64 = 5 << 40;
/// Smallest part but the last, as on AWS.
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// User metadata limit (keys and values, UTF-8 bytes), as on AWS.
pub const MAX_USER_METADATA_BYTES: usize = 2048;

/// The S3 service of one gateway.
#[derive(Clone)]
pub struct S3Gateway {
    pub(crate) layer: Arc<ObjectLayer>,
    pub(crate) region: String,
    pub(crate) min_part_bytes: u64,
}

impl S3Gateway {
    pub fn new(layer: Arc<ObjectLayer>, region: impl Into<String>) -> Self {
        S3Gateway {
            layer,
            region: region.into(),
            min_part_bytes: MIN_PART_BYTES,
        }
    }

    /// Changes the smallest part size (tests use small parts).
    pub fn with_min_part_bytes(mut self, bytes: u64) -> Self {
        self.min_part_bytes = bytes;
        self
    }

    pub(crate) async fn bucket(&self, name: &str) -> S3Result<Bucket> {
        self.layer
            .index()
            .bucket(name)
            .await
            .map_err(errors::index)?
            .ok_or_else(|| s3_error!(NoSuchBucket, "The specified bucket does not exist"))
    }
}

pub(crate) fn owner() -> Owner {
    Owner {
        display_name: Some("ferrobay".to_string()),
        id: Some("ferrobay".to_string()),
    }
}

pub(crate) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64))
}

pub(crate) fn etag(value: &str) -> ETag {
    ETag::Strong(value.to_string())
}

/// The version id to report: none for versions of a never-versioned bucket.
pub(crate) fn reported_version(bucket: &Bucket, version_id: &str) -> Option<String> {
    (bucket.versioning != Versioning::Unversioned || version_id != crate::index::NULL_VERSION)
        .then(|| version_id.to_string())
}

/// Sets the `checksum_*` and `checksum_type` fields of an output from a stored checksum.
macro_rules! set_checksum_fields {
    ($out:expr, $stored:expr) => {
        if let Some(c) = $stored {
            match c.algorithm.as_str() {
                "CRC32" => $out.checksum_crc32 = Some(c.value.clone()),
                "CRC32C" => $out.checksum_crc32c = Some(c.value.clone()),
                "CRC64NVME" => $out.checksum_crc64nvme = Some(c.value.clone()),
                "SHA1" => $out.checksum_sha1 = Some(c.value.clone()),
                "SHA256" => $out.checksum_sha256 = Some(c.value.clone()),
                _ => {}
            }
        }
    };
}
pub(crate) use set_checksum_fields;

/// A stored checksum that has a value (an upload may only record the algorithm).
pub(crate) fn valued(c: &Option<StoredChecksum>) -> Option<&StoredChecksum> {
    c.as_ref().filter(|c| !c.value.is_empty())
}

pub(crate) fn is_multipart(v: &ObjectVersion) -> bool {
    !v.attrs.part_sizes.is_empty()
}

#[async_trait::async_trait]
impl s3s::S3 for S3Gateway {
    async fn create_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::CreateBucketInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::CreateBucketOutput>> {
        self.create_bucket_impl(req).await
    }
    async fn delete_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteBucketInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::DeleteBucketOutput>> {
        self.delete_bucket_impl(req).await
    }
    async fn head_bucket(
        &self,
        req: s3s::S3Request<s3s::dto::HeadBucketInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::HeadBucketOutput>> {
        self.head_bucket_impl(req).await
    }
    async fn list_buckets(
        &self,
        req: s3s::S3Request<s3s::dto::ListBucketsInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::ListBucketsOutput>> {
        self.list_buckets_impl(req).await
    }
    async fn get_bucket_location(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketLocationInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetBucketLocationOutput>> {
        self.get_bucket_location_impl(req).await
    }
    async fn get_bucket_acl(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketAclInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetBucketAclOutput>> {
        self.get_bucket_acl_impl(req).await
    }
    async fn get_object_acl(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectAclInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetObjectAclOutput>> {
        self.get_object_acl_impl(req).await
    }
    async fn get_bucket_versioning(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketVersioningInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetBucketVersioningOutput>> {
        self.get_bucket_versioning_impl(req).await
    }
    async fn put_bucket_versioning(
        &self,
        req: s3s::S3Request<s3s::dto::PutBucketVersioningInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::PutBucketVersioningOutput>> {
        self.put_bucket_versioning_impl(req).await
    }
    async fn get_bucket_policy(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketPolicyInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetBucketPolicyOutput>> {
        self.get_bucket_policy_impl(req).await
    }
    async fn put_bucket_policy(
        &self,
        req: s3s::S3Request<s3s::dto::PutBucketPolicyInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::PutBucketPolicyOutput>> {
        self.put_bucket_policy_impl(req).await
    }
    async fn delete_bucket_policy(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteBucketPolicyInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::DeleteBucketPolicyOutput>> {
        self.delete_bucket_policy_impl(req).await
    }
    async fn get_bucket_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::GetBucketTaggingInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetBucketTaggingOutput>> {
        self.get_bucket_tagging_impl(req).await
    }
    async fn put_bucket_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::PutBucketTaggingInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::PutBucketTaggingOutput>> {
        self.put_bucket_tagging_impl(req).await
    }
    async fn delete_bucket_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteBucketTaggingInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::DeleteBucketTaggingOutput>> {
        self.delete_bucket_tagging_impl(req).await
    }
    async fn put_object(
        &self,
        req: s3s::S3Request<s3s::dto::PutObjectInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::PutObjectOutput>> {
        self.put_object_impl(req).await
    }
    async fn get_object(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetObjectOutput>> {
        self.get_object_impl(req).await
    }
    async fn head_object(
        &self,
        req: s3s::S3Request<s3s::dto::HeadObjectInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::HeadObjectOutput>> {
        self.head_object_impl(req).await
    }
    async fn delete_object(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::DeleteObjectOutput>> {
        self.delete_object_impl(req).await
    }
    async fn delete_objects(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectsInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::DeleteObjectsOutput>> {
        self.delete_objects_impl(req).await
    }
    async fn copy_object(
        &self,
        req: s3s::S3Request<s3s::dto::CopyObjectInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::CopyObjectOutput>> {
        self.copy_object_impl(req).await
    }
    async fn get_object_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectTaggingInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::GetObjectTaggingOutput>> {
        self.get_object_tagging_impl(req).await
    }
    async fn put_object_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::PutObjectTaggingInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::PutObjectTaggingOutput>> {
        self.put_object_tagging_impl(req).await
    }
    async fn delete_object_tagging(
        &self,
        req: s3s::S3Request<s3s::dto::DeleteObjectTaggingInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::DeleteObjectTaggingOutput>> {
        self.delete_object_tagging_impl(req).await
    }
    async fn list_objects(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::ListObjectsOutput>> {
        self.list_objects_impl(req).await
    }
    async fn list_objects_v2(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsV2Input>,
    ) -> S3Result<s3s::S3Response<s3s::dto::ListObjectsV2Output>> {
        self.list_objects_v2_impl(req).await
    }
    async fn list_object_versions(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectVersionsInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::ListObjectVersionsOutput>> {
        self.list_object_versions_impl(req).await
    }
    async fn create_multipart_upload(
        &self,
        req: s3s::S3Request<s3s::dto::CreateMultipartUploadInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::CreateMultipartUploadOutput>> {
        self.create_multipart_upload_impl(req).await
    }
    async fn upload_part(
        &self,
        req: s3s::S3Request<s3s::dto::UploadPartInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::UploadPartOutput>> {
        self.upload_part_impl(req).await
    }
    async fn upload_part_copy(
        &self,
        req: s3s::S3Request<s3s::dto::UploadPartCopyInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::UploadPartCopyOutput>> {
        self.upload_part_copy_impl(req).await
    }
    async fn complete_multipart_upload(
        &self,
        req: s3s::S3Request<s3s::dto::CompleteMultipartUploadInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::CompleteMultipartUploadOutput>> {
        self.complete_multipart_upload_impl(req).await
    }
    async fn abort_multipart_upload(
        &self,
        req: s3s::S3Request<s3s::dto::AbortMultipartUploadInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::AbortMultipartUploadOutput>> {
        self.abort_multipart_upload_impl(req).await
    }
    async fn list_parts(
        &self,
        req: s3s::S3Request<s3s::dto::ListPartsInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::ListPartsOutput>> {
        self.list_parts_impl(req).await
    }
    async fn list_multipart_uploads(
        &self,
        req: s3s::S3Request<s3s::dto::ListMultipartUploadsInput>,
    ) -> S3Result<s3s::S3Response<s3s::dto::ListMultipartUploadsOutput>> {
        self.list_multipart_uploads_impl(req).await
    }
}
