//! Bucket operations: create, delete, head, list, location, versioning, policy.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::policy::BucketPolicy;
use super::{S3Gateway, errors, owner, timestamp};
use crate::index::{IndexError, Versioning, ops};
use crate::layout::Geometry;

/// Header choosing a bucket's erasure code at creation (`K+M`, e.g. `4+2`).
pub const GEOMETRY_HEADER: &str = "x-ferrobay-erasure";

impl S3Gateway {
    pub(super) async fn create_bucket_impl(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = req.input.bucket.clone();
        if let Some(c) = req
            .input
            .create_bucket_configuration
            .as_ref()
            .and_then(|c| c.location_constraint.as_ref())
            && !c.as_str().is_empty()
            && c.as_str() != self.region
        {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("IllegalLocationConstraintException".into()),
                format!(
                    "The {} location constraint is incompatible for the region specific endpoint this \
                     request was sent to.",
                    c.as_str()
                ),
            );
            e.set_status_code(http::StatusCode::BAD_REQUEST);
            return Err(e);
        }
        let geometry = match req.headers.get(GEOMETRY_HEADER) {
            Some(v) => v
                .to_str()
                .ok()
                .and_then(|s| s.parse::<Geometry>().ok())
                .ok_or_else(|| {
                    errors::invalid_argument(format!("{GEOMETRY_HEADER}: expected K+M, e.g. 4+2"))
                })?,
            None => self.layer.config().default_geometry,
        };
        self.layer
            .data()
            .stores()
            .check_geometry(geometry.total())
            .map_err(|e| errors::invalid_argument(format!("{GEOMETRY_HEADER} {geometry}: {e}")))?;
        let now = self.layer.now_ms();
        let n = name.clone();
        match self
            .layer
            .index()
            .write(move |tx| ops::create_bucket(tx, &n, geometry, now))
            .await
        {
            // us-east-1 answers 200 to re-creating a bucket one owns (other regions
            // 409 BucketAlreadyOwnedByYou), and changes nothing.
            Err(IndexError::BucketExists) if self.region == "us-east-1" => {}
            r => r.map_err(errors::index)?,
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    pub(super) async fn delete_bucket_impl(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let name = req.input.bucket;
        self.layer
            .index()
            .write(move |tx| ops::delete_bucket(tx, &name))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    pub(super) async fn head_bucket_impl(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    pub(super) async fn list_buckets_impl(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let all = self
            .layer
            .index()
            .read(ops::buckets)
            .await
            .map_err(errors::index)?;
        let prefix = req.input.prefix.clone().unwrap_or_default();
        let buckets = all
            .into_iter()
            .filter(|b| b.name.starts_with(&prefix))
            .map(|b| Bucket {
                name: Some(b.name),
                creation_date: Some(timestamp(b.created_ms)),
                bucket_region: Some(self.region.clone()),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner()),
            prefix: req.input.prefix,
            continuation_token: None,
        }))
    }

    pub(super) async fn get_bucket_location_impl(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.bucket(&req.input.bucket).await?;
        // us-east-1 is reported as an empty constraint, as AWS does.
        let constraint = (self.region != "us-east-1")
            .then(|| BucketLocationConstraint::from(self.region.clone()));
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: constraint,
        }))
    }

    pub(super) async fn get_bucket_versioning_impl(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let status = match b.versioning {
            Versioning::Unversioned => None,
            Versioning::Enabled => Some(BucketVersioningStatus::from_static(
                BucketVersioningStatus::ENABLED,
            )),
            Versioning::Suspended => Some(BucketVersioningStatus::from_static(
                BucketVersioningStatus::SUSPENDED,
            )),
        };
        Ok(S3Response::new(GetBucketVersioningOutput {
            status,
            mfa_delete: None,
        }))
    }

    pub(super) async fn put_bucket_versioning_impl(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let v = match req
            .input
            .versioning_configuration
            .status
            .as_ref()
            .map(|s| s.as_str())
        {
            Some(BucketVersioningStatus::ENABLED) => Versioning::Enabled,
            Some(BucketVersioningStatus::SUSPENDED) => Versioning::Suspended,
            _ => {
                return Err(s3_error!(
                    MalformedXML,
                    "The XML you provided was not well-formed or did not validate against our published schema"
                ));
            }
        };
        if req
            .input
            .versioning_configuration
            .mfa_delete
            .as_ref()
            .is_some_and(|m| m.as_str() == "Enabled")
        {
            return Err(s3_error!(NotImplemented, "MFA Delete is not supported"));
        }
        let name = b.name;
        self.layer
            .index()
            .write(move |tx| ops::set_versioning(tx, &name, v))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::new(PutBucketVersioningOutput {}))
    }

    pub(super) async fn get_bucket_policy_impl(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let policy = b
            .policy
            .ok_or_else(|| s3_error!(NoSuchBucketPolicy, "The bucket policy does not exist"))?;
        Ok(S3Response::new(GetBucketPolicyOutput {
            policy: Some(policy),
        }))
    }

    pub(super) async fn put_bucket_policy_impl(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        BucketPolicy::parse(&req.input.policy, &b.name)
            .map_err(|msg| S3Error::with_message(S3ErrorCode::MalformedPolicy, msg))?;
        let (name, doc) = (b.name, req.input.policy);
        self.layer
            .index()
            .write(move |tx| ops::set_bucket_doc(tx, &name, true, Some(doc.clone())))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::with_status(
            PutBucketPolicyOutput {},
            http::StatusCode::NO_CONTENT,
        ))
    }

    pub(super) async fn delete_bucket_policy_impl(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        let name = b.name;
        self.layer
            .index()
            .write(move |tx| ops::set_bucket_doc(tx, &name, true, None))
            .await
            .map_err(errors::index)?;
        Ok(S3Response::with_status(
            DeleteBucketPolicyOutput {},
            http::StatusCode::NO_CONTENT,
        ))
    }
}
