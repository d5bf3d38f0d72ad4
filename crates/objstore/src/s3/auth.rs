//! Who may do what: access keys (the root user's from the configuration, more in the
//! index) for SigV4, and bucket policies for anonymous requests.

use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{S3Result, s3_error};

use super::policy::BucketPolicy;
use crate::index::{Index, ops};

/// An access key pair.
#[derive(Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

impl Credentials {
    /// A new key pair from the system's randomness: the access key `FB` and 18 of `A-Z0-9`,
    /// the secret 40 letters and digits.
    pub fn generate() -> Credentials {
        fn random_text(len: usize, alphabet: &[u8]) -> String {
            use rand::Rng as _;
            let mut rng = rand::rng();
            (0..len)
                .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
                .collect()
        }
        Credentials {
            access_key: format!(
                "FB{}",
                random_text(18, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            ),
            secret_key: random_text(
                40,
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            ),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a secret.
        f.debug_struct("Credentials")
            .field("access_key", &self.access_key)
            .finish_non_exhaustive()
    }
}

/// Resolves access keys for signature checks: the root user, then the index.
pub struct KeyStore {
    root: Credentials,
    index: Index,
}

impl KeyStore {
    pub fn new(root: Credentials, index: Index) -> Self {
        KeyStore { root, index }
    }
}

#[async_trait::async_trait]
impl S3Auth for KeyStore {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if access_key == self.root.access_key {
            return Ok(SecretKey::from(self.root.secret_key.as_str()));
        }
        let ak = access_key.to_string();
        let found = self
            .index
            .read(move |tx| ops::secret_key(tx, &ak))
            .await
            .map_err(super::errors::index)?;
        found.map(SecretKey::from).ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
    }
}

/// Signed requests pass; anonymous ones need a bucket policy that allows them.
pub struct AccessControl {
    index: Index,
}

impl AccessControl {
    pub fn new(index: Index) -> Self {
        AccessControl { index }
    }
}

/// The IAM action of an S3 operation (as policies name them).
fn action_of(op: &str) -> String {
    match op {
        "HeadObject" => "s3:GetObject".into(),
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "s3:ListBucket".into(),
        "ListObjectVersions" => "s3:ListBucketVersions".into(),
        "GetObjectTagging" => "s3:GetObjectTagging".into(),
        "CreateMultipartUpload"
        | "UploadPart"
        | "CompleteMultipartUpload"
        | "UploadPartCopy"
        | "CopyObject" => "s3:PutObject".into(),
        "ListParts" => "s3:ListMultipartUploadParts".into(),
        "AbortMultipartUpload" => "s3:AbortMultipartUpload".into(),
        "ListMultipartUploads" => "s3:ListBucketMultipartUploads".into(),
        "DeleteObjects" => "s3:DeleteObject".into(),
        other => format!("s3:{other}"),
    }
}

fn access_denied() -> s3s::S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

#[async_trait::async_trait]
impl S3Access for AccessControl {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() {
            return Ok(());
        }
        let (bucket, resource) = match cx.s3_path() {
            S3Path::Root => return Err(access_denied()),
            S3Path::Bucket { bucket } => (bucket.to_string(), format!("arn:aws:s3:::{bucket}")),
            S3Path::Object { bucket, key } => {
                (bucket.to_string(), format!("arn:aws:s3:::{bucket}/{key}"))
            }
        };
        let action = action_of(cx.s3_op().name());
        let name = bucket.clone();
        let b = self
            .index
            .read(move |tx| ops::bucket(tx, &name))
            .await
            .map_err(super::errors::index)?;
        let Some(policy) = b.and_then(|b| b.policy) else {
            return Err(access_denied());
        };
        match BucketPolicy::parse(&policy, &bucket) {
            Ok(p) if p.allows_anonymous(&action, &resource) => Ok(()),
            _ => Err(access_denied()),
        }
    }
}
