//! What the index stores, as the rest of the gateway sees it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::layout::{Geometry, Piece};

/// A bucket's versioning state (S3: never enabled, Enabled, Suspended).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versioning {
    Unversioned,
    Enabled,
    Suspended,
}

impl Versioning {
    pub fn to_i64(self) -> i64 {
        match self {
            Versioning::Unversioned => 0,
            Versioning::Enabled => 1,
            Versioning::Suspended => 2,
        }
    }

    pub fn from_i64(v: i64) -> Option<Self> {
        match v {
            0 => Some(Versioning::Unversioned),
            1 => Some(Versioning::Enabled),
            2 => Some(Versioning::Suspended),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub id: i64,
    pub name: String,
    pub created_ms: i64,
    pub versioning: Versioning,
    pub geometry: Geometry,
    pub policy: Option<String>,
    pub tagging: Option<String>,
}

/// An object checksum as S3 reports it: algorithm (`CRC32`, `CRC32C`, `SHA1`, `SHA256`,
/// `CRC64NVME`), base64 value, and type (`FULL_OBJECT` or `COMPOSITE`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredChecksum {
    pub algorithm: String,
    pub value: String,
    pub kind: String,
}

/// Everything about a version besides size, ETag, time and data: stored as JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ObjectAttrs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub website_redirect_location: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub user_metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<StoredChecksum>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
    /// Multipart objects: the size of each part, in order (GET/HEAD ?partNumber=).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub part_sizes: Vec<u64>,
}

/// Where a version's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectData {
    /// In the index row itself (small objects).
    Inline(Vec<u8>),
    /// Erasure-coded pieces, concatenated in order.
    Pieces(Vec<Piece>),
}

impl ObjectData {
    pub fn pieces(&self) -> &[Piece] {
        match self {
            ObjectData::Inline(_) => &[],
            ObjectData::Pieces(p) => p,
        }
    }
}

/// One version of an object (or a delete marker).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectVersion {
    pub row_id: i64,
    pub key: String,
    /// `null` for versions written while versioning was off or suspended.
    pub version_id: String,
    pub is_latest: bool,
    pub delete_marker: bool,
    pub size: u64,
    /// Without quotes.
    pub etag: String,
    pub mtime_ms: i64,
    pub attrs: ObjectAttrs,
    pub data: ObjectData,
}

/// The version id S3 gives versions written while versioning was off or suspended.
pub const NULL_VERSION: &str = "null";

/// A version to be written.
#[derive(Clone, Debug)]
pub struct NewVersion {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub mtime_ms: i64,
    pub attrs: ObjectAttrs,
    pub data: ObjectData,
}

/// Conditions a write checks against the current version, atomically with the write.
#[derive(Clone, Debug, Default)]
pub struct WriteCondition {
    /// `If-None-Match: *`: fail if a current version exists (create only).
    pub if_none_match_any: bool,
    /// `If-Match: etag` (unquoted; `*` matches any existing version).
    pub if_match: Option<String>,
    /// `If-None-Match: etag` (unquoted): fail if the current version has this ETag.
    pub if_none_match: Option<String>,
}

/// One entry of an object listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub mtime_ms: i64,
}

/// One entry of a version listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionEntry {
    pub key: String,
    pub version_id: String,
    pub is_latest: bool,
    pub delete_marker: bool,
    pub size: u64,
    pub etag: String,
    pub mtime_ms: i64,
}

/// A page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing<T> {
    pub entries: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    /// Last key or common prefix returned (the V1 NextMarker, V2 continuation).
    pub next_key: Option<String>,
    /// With `next_key`, for version and upload listings: the last version / upload id.
    pub next_sub: Option<String>,
}

/// What the delete of a key or version did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeleteResult {
    /// The version removed or the delete marker created (None: unversioned bucket).
    pub version_id: Option<String>,
    /// Whether the version deleted or created is a delete marker.
    pub delete_marker: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    pub upload_id: String,
    pub bucket_id: i64,
    pub key: String,
    pub created_ms: i64,
    pub attrs: ObjectAttrs,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub part_number: i64,
    pub size: u64,
    pub etag: String,
    pub mtime_ms: i64,
    pub attrs: ObjectAttrs,
    pub pieces: Vec<Piece>,
}
