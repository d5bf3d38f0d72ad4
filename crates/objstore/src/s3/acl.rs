//! ACLs, read-only: every bucket and object belongs to the one owner with
//! FULL_CONTROL (access is governed by access keys and bucket policies instead).

use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result};

use super::{S3Gateway, owner};

fn owner_grants() -> Grants {
    vec![Grant {
        grantee: Some(Grantee {
            display_name: owner().display_name,
            id: owner().id,
            type_: Type::from_static(Type::CANONICAL_USER),
            email_address: None,
            uri: None,
        }),
        permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
    }]
}

impl S3Gateway {
    pub(super) async fn get_bucket_acl_impl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        self.bucket(&req.input.bucket).await?;
        Ok(S3Response::new(GetBucketAclOutput {
            grants: Some(owner_grants()),
            owner: Some(owner()),
        }))
    }

    pub(super) async fn get_object_acl_impl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let b = self.bucket(&req.input.bucket).await?;
        self.find_version(&b, &req.input.key, req.input.version_id.as_deref())
            .await?;
        Ok(S3Response::new(GetObjectAclOutput {
            grants: Some(owner_grants()),
            owner: Some(owner()),
            request_charged: None,
        }))
    }
}
