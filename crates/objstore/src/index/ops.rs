//! The index operations, each run inside one transaction on either engine.

use crate::format::PieceId;
use crate::layout::{Geometry, Piece};

use super::IndexError;
use super::list::{self, Item, Lower, PageQuery};
use super::sql::{Row, Tx, Value};
use super::types::*;

const BUCKET_COLS: &str =
    "id, name, created_ms, versioning, data_shards, parity_shards, policy, tagging";
const OBJECT_COLS: &str = "id, key, version_id, is_latest, delete_marker, size, etag, mtime_ms, \
                           attrs, pieces, inline_data";

fn corrupt(what: &str, e: impl std::fmt::Display) -> IndexError {
    IndexError::Corrupt(format!("{what}: {e}"))
}

fn bucket_from(row: &Row) -> Result<Bucket, IndexError> {
    let shards = |i| -> Result<u8, IndexError> {
        u8::try_from(row.int(i)?).map_err(|e| corrupt("bucket shard count", e))
    };
    Ok(Bucket {
        id: row.int(0)?,
        name: row.text(1)?,
        created_ms: row.int(2)?,
        versioning: Versioning::from_i64(row.int(3)?)
            .ok_or_else(|| corrupt("bucket versioning", row.int(3).unwrap_or(-1)))?,
        geometry: Geometry {
            data: shards(4)?,
            parity: shards(5)?,
        },
        policy: row.opt_text(6)?,
        tagging: row.opt_text(7)?,
    })
}

pub fn attrs_json(a: &ObjectAttrs) -> String {
    // Serializing plain strings and numbers cannot fail.
    serde_json::to_string(a).unwrap_or_else(|_| "{}".to_string())
}

fn attrs_from(text: &str) -> Result<ObjectAttrs, IndexError> {
    serde_json::from_str(text).map_err(|e| corrupt("object attributes", e))
}

fn pieces_json(p: &[Piece]) -> String {
    serde_json::to_string(p).unwrap_or_else(|_| "[]".to_string())
}

fn pieces_from(text: &str) -> Result<Vec<Piece>, IndexError> {
    let pieces: Vec<Piece> = serde_json::from_str(text).map_err(|e| corrupt("shard map", e))?;
    for p in &pieces {
        p.validate().map_err(|e| corrupt("shard map", e))?;
    }
    Ok(pieces)
}

fn data_columns(data: &ObjectData) -> (Value, Value) {
    match data {
        ObjectData::Inline(bytes) => (Value::Null, Value::Blob(bytes.clone())),
        ObjectData::Pieces(p) => (Value::Text(pieces_json(p)), Value::Null),
    }
}

fn size_from(v: i64) -> Result<u64, IndexError> {
    u64::try_from(v).map_err(|e| corrupt("size", e))
}

fn object_from(row: &Row) -> Result<ObjectVersion, IndexError> {
    let data = match (row.opt_text(9)?, row.opt_blob(10)?) {
        (Some(pieces), _) => ObjectData::Pieces(pieces_from(&pieces)?),
        (None, Some(bytes)) => ObjectData::Inline(bytes),
        (None, None) => ObjectData::Inline(Vec::new()),
    };
    Ok(ObjectVersion {
        row_id: row.int(0)?,
        key: row.key(1)?,
        version_id: row.text(2)?,
        is_latest: row.int(3)? != 0,
        delete_marker: row.int(4)? != 0,
        size: size_from(row.int(5)?)?,
        etag: row.text(6)?,
        mtime_ms: row.int(7)?,
        attrs: attrs_from(&row.text(8)?)?,
        data,
    })
}

// ---- buckets -------------------------------------------------------------------------

pub fn bucket(tx: &mut dyn Tx, name: &str) -> Result<Option<Bucket>, IndexError> {
    tx.query_opt(
        &format!("SELECT {BUCKET_COLS} FROM buckets WHERE name = ?1"),
        &[name.into()],
    )?
    .map(|r| bucket_from(&r))
    .transpose()
}

fn bucket_by_id(tx: &mut dyn Tx, id: i64) -> Result<Bucket, IndexError> {
    let row = tx
        .query_opt(
            &format!("SELECT {BUCKET_COLS} FROM buckets WHERE id = ?1"),
            &[id.into()],
        )?
        .ok_or(IndexError::NoSuchBucket)?;
    bucket_from(&row)
}

pub fn buckets(tx: &mut dyn Tx) -> Result<Vec<Bucket>, IndexError> {
    tx.query(
        &format!("SELECT {BUCKET_COLS} FROM buckets ORDER BY name"),
        &[],
    )?
    .iter()
    .map(bucket_from)
    .collect()
}

pub fn create_bucket(
    tx: &mut dyn Tx,
    name: &str,
    g: Geometry,
    now_ms: i64,
) -> Result<(), IndexError> {
    if bucket(tx, name)?.is_some() {
        return Err(IndexError::BucketExists);
    }
    tx.exec(
        "INSERT INTO buckets (name, created_ms, versioning, data_shards, parity_shards) \
         VALUES (?1, ?2, 0, ?3, ?4)",
        &[
            name.into(),
            now_ms.into(),
            i64::from(g.data).into(),
            i64::from(g.parity).into(),
        ],
    )?;
    Ok(())
}

pub fn delete_bucket(tx: &mut dyn Tx, name: &str) -> Result<(), IndexError> {
    let b = bucket(tx, name)?.ok_or(IndexError::NoSuchBucket)?;
    let used = tx.query_opt(
        "SELECT 1 FROM objects WHERE bucket_id = ?1 LIMIT 1",
        &[b.id.into()],
    )?;
    let uploads = tx.query_opt(
        "SELECT 1 FROM uploads WHERE bucket_id = ?1 LIMIT 1",
        &[b.id.into()],
    )?;
    if used.is_some() || uploads.is_some() {
        return Err(IndexError::BucketNotEmpty);
    }
    tx.exec("DELETE FROM buckets WHERE id = ?1", &[b.id.into()])?;
    Ok(())
}

pub fn set_versioning(tx: &mut dyn Tx, name: &str, v: Versioning) -> Result<(), IndexError> {
    let n = tx.exec(
        "UPDATE buckets SET versioning = ?2 WHERE name = ?1",
        &[name.into(), v.to_i64().into()],
    )?;
    if n == 0 {
        return Err(IndexError::NoSuchBucket);
    }
    Ok(())
}

/// Sets (Some) or removes (None) the bucket's policy or tagging document.
pub fn set_bucket_doc(
    tx: &mut dyn Tx,
    name: &str,
    policy: bool,
    doc: Option<String>,
) -> Result<(), IndexError> {
    let col = if policy { "policy" } else { "tagging" };
    let n = tx.exec(
        &format!("UPDATE buckets SET {col} = ?2 WHERE name = ?1"),
        &[name.into(), doc.into()],
    )?;
    if n == 0 {
        return Err(IndexError::NoSuchBucket);
    }
    Ok(())
}

// ---- piece bookkeeping -------------------------------------------------------------------

/// Queues pieces for deletion at `due_ms`.
pub fn gc_add(tx: &mut dyn Tx, pieces: &[Piece], due_ms: i64) -> Result<(), IndexError> {
    for p in pieces {
        tx.exec(
            "INSERT INTO piece_gc (piece_id, piece, due_ms, claimed) VALUES (?1, ?2, ?3, 0) \
             ON CONFLICT (piece_id) DO NOTHING",
            &[
                p.id.as_slice().into(),
                pieces_json(std::slice::from_ref(p)).into(),
                due_ms.into(),
            ],
        )?;
        tx.exec(
            "DELETE FROM piece_degraded WHERE piece_id = ?1",
            &[p.id.as_slice().into()],
        )?;
    }
    Ok(())
}

/// Removes the write intents of pieces about to be committed. Fails if a reaper has
/// claimed one (the write took longer than the grace period: its shards are going).
fn gc_commit_intents(tx: &mut dyn Tx, pieces: &[Piece]) -> Result<(), IndexError> {
    for p in pieces {
        let n = tx.exec(
            "DELETE FROM piece_gc WHERE piece_id = ?1 AND claimed = 0",
            &[p.id.as_slice().into()],
        )?;
        if n != 1 {
            return Err(IndexError::IntentLost(hex::encode(p.id)));
        }
    }
    Ok(())
}

/// Updates the shard map of a write intent (its size grew) and, with `due_ms`, when it
/// becomes garbage. A claimed intent is left alone.
pub fn gc_intent_update(
    tx: &mut dyn Tx,
    piece: &Piece,
    due_ms: Option<i64>,
) -> Result<(), IndexError> {
    tx.exec(
        "UPDATE piece_gc SET piece = ?2, due_ms = COALESCE(?3, due_ms) WHERE piece_id = ?1 AND claimed = 0",
        &[
            piece.id.as_slice().into(),
            pieces_json(std::slice::from_ref(piece)).into(),
            due_ms.into(),
        ],
    )?;
    Ok(())
}

/// Claims up to `limit` due pieces for deletion; claimed pieces become due again at
/// `retry_ms` in case the reaper dies or a store is unreachable.
pub fn gc_claim(
    tx: &mut dyn Tx,
    now_ms: i64,
    retry_ms: i64,
    limit: usize,
) -> Result<Vec<Piece>, IndexError> {
    let rows = tx.query(
        "SELECT piece_id, piece FROM piece_gc WHERE due_ms <= ?1 ORDER BY due_ms LIMIT ?2",
        &[now_ms.into(), (limit as i64).into()],
    )?;
    let mut out = Vec::new();
    for r in rows {
        tx.exec(
            "UPDATE piece_gc SET claimed = 1, due_ms = ?2 WHERE piece_id = ?1",
            &[r.blob(0)?.into(), retry_ms.into()],
        )?;
        out.extend(pieces_from(&r.text(1)?)?);
    }
    Ok(out)
}

pub fn gc_done(tx: &mut dyn Tx, piece: &PieceId) -> Result<(), IndexError> {
    tx.exec(
        "DELETE FROM piece_gc WHERE piece_id = ?1",
        &[piece.as_slice().into()],
    )?;
    Ok(())
}

pub fn degraded_add(tx: &mut dyn Tx, pieces: &[Piece], now_ms: i64) -> Result<(), IndexError> {
    for p in pieces {
        tx.exec(
            "INSERT INTO piece_degraded (piece_id, piece, since_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (piece_id) DO NOTHING",
            &[
                p.id.as_slice().into(),
                pieces_json(std::slice::from_ref(p)).into(),
                now_ms.into(),
            ],
        )?;
    }
    Ok(())
}

pub fn degraded_list(tx: &mut dyn Tx, limit: usize) -> Result<Vec<Piece>, IndexError> {
    let rows = tx.query(
        "SELECT piece FROM piece_degraded ORDER BY since_ms LIMIT ?1",
        &[(limit as i64).into()],
    )?;
    let mut out = Vec::new();
    for r in rows {
        out.extend(pieces_from(&r.text(0)?)?);
    }
    Ok(out)
}

pub fn degraded_remove(tx: &mut dyn Tx, piece: &PieceId) -> Result<(), IndexError> {
    tx.exec(
        "DELETE FROM piece_degraded WHERE piece_id = ?1",
        &[piece.as_slice().into()],
    )?;
    Ok(())
}

/// Pieces referenced by object versions and parts, for the scanner: rows after
/// `cursor` (object row id; parts come after all objects, as negative cursors would be
/// confusing, they use a separate call).
pub fn object_pieces_after(
    tx: &mut dyn Tx,
    cursor: i64,
    limit: usize,
) -> Result<Vec<(i64, Vec<Piece>)>, IndexError> {
    let rows = tx.query(
        "SELECT id, pieces FROM objects WHERE id > ?1 AND pieces IS NOT NULL ORDER BY id LIMIT ?2",
        &[cursor.into(), (limit as i64).into()],
    )?;
    rows.iter()
        .map(|r| Ok((r.int(0)?, pieces_from(&r.text(1)?)?)))
        .collect()
}

pub fn part_pieces(tx: &mut dyn Tx) -> Result<Vec<Piece>, IndexError> {
    let rows = tx.query("SELECT pieces FROM parts WHERE pieces IS NOT NULL", &[])?;
    let mut out = Vec::new();
    for r in rows {
        out.extend(pieces_from(&r.text(0)?)?);
    }
    Ok(out)
}

// ---- objects -------------------------------------------------------------------------

/// The current version of `key` (possibly a delete marker).
pub fn latest(
    tx: &mut dyn Tx,
    bucket_id: i64,
    key: &str,
) -> Result<Option<ObjectVersion>, IndexError> {
    tx.query_opt(
        &format!(
            "SELECT {OBJECT_COLS} FROM objects WHERE bucket_id = ?1 AND key = ?2 AND is_latest = 1"
        ),
        &[bucket_id.into(), key.as_bytes().into()],
    )?
    .map(|r| object_from(&r))
    .transpose()
}

pub fn version(
    tx: &mut dyn Tx,
    bucket_id: i64,
    key: &str,
    version_id: &str,
) -> Result<Option<ObjectVersion>, IndexError> {
    tx.query_opt(
        &format!(
            "SELECT {OBJECT_COLS} FROM objects WHERE bucket_id = ?1 AND key = ?2 AND version_id = ?3"
        ),
        &[bucket_id.into(), key.as_bytes().into(), version_id.into()],
    )?
    .map(|r| object_from(&r))
    .transpose()
}

fn check_condition(
    current: Option<&ObjectVersion>,
    cond: &WriteCondition,
) -> Result<(), IndexError> {
    let live = current.filter(|v| !v.delete_marker);
    if cond.if_none_match_any && live.is_some() {
        return Err(IndexError::PreconditionFailed);
    }
    if let (Some(not), Some(v)) = (&cond.if_none_match, live)
        && *not == v.etag
    {
        return Err(IndexError::PreconditionFailed);
    }
    if let Some(want) = &cond.if_match {
        match live {
            None => return Err(IndexError::NoSuchKey),
            Some(v) if want != "*" && *want != v.etag => {
                return Err(IndexError::PreconditionFailed);
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Removes the `null` version of `key`, if any, queuing its pieces; returns whether it
/// was the current version.
fn remove_null_version(
    tx: &mut dyn Tx,
    bucket_id: i64,
    key: &str,
    gc_due_ms: i64,
) -> Result<bool, IndexError> {
    let Some(old) = version(tx, bucket_id, key, NULL_VERSION)? else {
        return Ok(false);
    };
    gc_add(tx, old.data.pieces(), gc_due_ms)?;
    tx.exec("DELETE FROM objects WHERE id = ?1", &[old.row_id.into()])?;
    Ok(old.is_latest)
}

fn insert_version(
    tx: &mut dyn Tx,
    bucket_id: i64,
    version_id: &str,
    delete_marker: bool,
    v: &NewVersion,
) -> Result<(), IndexError> {
    tx.exec(
        "UPDATE objects SET is_latest = 0 WHERE bucket_id = ?1 AND key = ?2 AND is_latest = 1",
        &[bucket_id.into(), v.key.as_bytes().into()],
    )?;
    let (pieces, inline) = data_columns(&v.data);
    let size = i64::try_from(v.size).map_err(|e| corrupt("size", e))?;
    tx.exec(
        "INSERT INTO objects (bucket_id, key, version_id, is_latest, delete_marker, size, etag, \
         mtime_ms, attrs, pieces, inline_data) VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        &[
            bucket_id.into(),
            v.key.as_bytes().into(),
            version_id.into(),
            i64::from(delete_marker).into(),
            size.into(),
            v.etag.as_str().into(),
            v.mtime_ms.into(),
            attrs_json(&v.attrs).into(),
            pieces,
            inline,
        ],
    )?;
    Ok(())
}

/// Makes `v` the current version of its key, checking `cond` first. Versioned buckets
/// keep the old versions; otherwise the `null` version is replaced (its pieces queued
/// for deletion at `gc_due_ms`). `new_version_id` is used when versioning is enabled.
/// Returns the version id written.
pub fn put_version(
    tx: &mut dyn Tx,
    bucket_id: i64,
    v: &NewVersion,
    cond: &WriteCondition,
    new_version_id: &str,
    gc_due_ms: i64,
) -> Result<String, IndexError> {
    let b = bucket_by_id(tx, bucket_id)?;
    let current = latest(tx, bucket_id, &v.key)?;
    check_condition(current.as_ref(), cond)?;
    gc_commit_intents(tx, v.data.pieces())?;
    let version_id = match b.versioning {
        Versioning::Enabled => new_version_id,
        Versioning::Unversioned | Versioning::Suspended => {
            remove_null_version(tx, bucket_id, &v.key, gc_due_ms)?;
            NULL_VERSION
        }
    };
    insert_version(tx, bucket_id, version_id, false, v)?;
    Ok(version_id.to_string())
}

/// Deletes `key` (S3 DeleteObject): with `version_id`, removes that version for good
/// (the next newest becomes current); without, removes the object (unversioned) or
/// puts a delete marker on top (versioned).
pub fn delete_object(
    tx: &mut dyn Tx,
    bucket_id: i64,
    key: &str,
    version_id: Option<&str>,
    new_version_id: &str,
    now_ms: i64,
    gc_due_ms: i64,
) -> Result<DeleteResult, IndexError> {
    let b = bucket_by_id(tx, bucket_id)?;
    if let Some(vid) = version_id {
        let Some(old) = version(tx, bucket_id, key, vid)? else {
            // Deleting a version that does not exist succeeds (S3 does the same).
            return Ok(DeleteResult {
                version_id: Some(vid.to_string()),
                delete_marker: false,
            });
        };
        gc_add(tx, old.data.pieces(), gc_due_ms)?;
        tx.exec("DELETE FROM objects WHERE id = ?1", &[old.row_id.into()])?;
        if old.is_latest {
            promote_newest(tx, bucket_id, key)?;
        }
        return Ok(DeleteResult {
            version_id: Some(vid.to_string()),
            delete_marker: old.delete_marker,
        });
    }
    let marker = |key: &str| NewVersion {
        key: key.to_string(),
        size: 0,
        etag: String::new(),
        mtime_ms: now_ms,
        attrs: ObjectAttrs::default(),
        data: ObjectData::Inline(Vec::new()),
    };
    match b.versioning {
        Versioning::Unversioned => {
            remove_null_version(tx, bucket_id, key, gc_due_ms)?;
            Ok(DeleteResult {
                version_id: None,
                delete_marker: false,
            })
        }
        Versioning::Enabled => {
            insert_version(tx, bucket_id, new_version_id, true, &marker(key))?;
            Ok(DeleteResult {
                version_id: Some(new_version_id.to_string()),
                delete_marker: true,
            })
        }
        Versioning::Suspended => {
            remove_null_version(tx, bucket_id, key, gc_due_ms)?;
            insert_version(tx, bucket_id, NULL_VERSION, true, &marker(key))?;
            Ok(DeleteResult {
                version_id: Some(NULL_VERSION.to_string()),
                delete_marker: true,
            })
        }
    }
}

fn promote_newest(tx: &mut dyn Tx, bucket_id: i64, key: &str) -> Result<(), IndexError> {
    tx.exec(
        "UPDATE objects SET is_latest = 1 WHERE id = (SELECT id FROM objects \
         WHERE bucket_id = ?1 AND key = ?2 ORDER BY id DESC LIMIT 1)",
        &[bucket_id.into(), key.as_bytes().into()],
    )?;
    Ok(())
}

/// Replaces the tags of a version (current when `version_id` is None).
pub fn set_object_tags(
    tx: &mut dyn Tx,
    bucket_id: i64,
    key: &str,
    version_id: Option<&str>,
    tags: Vec<(String, String)>,
) -> Result<String, IndexError> {
    let v = match version_id {
        Some(vid) => version(tx, bucket_id, key, vid)?.ok_or(IndexError::NoSuchVersion)?,
        None => latest(tx, bucket_id, key)?
            .filter(|v| !v.delete_marker)
            .ok_or(IndexError::NoSuchKey)?,
    };
    if v.delete_marker {
        return Err(IndexError::MethodNotAllowed);
    }
    let mut attrs = v.attrs;
    attrs.tags = tags;
    tx.exec(
        "UPDATE objects SET attrs = ?2 WHERE id = ?1",
        &[v.row_id.into(), attrs_json(&attrs).into()],
    )?;
    Ok(v.version_id)
}

// ---- listings ------------------------------------------------------------------------

fn range_sql(
    lower: &Lower,
    upper: Option<&[u8]>,
    first_param: usize,
    params: &mut Vec<Value>,
) -> String {
    let p = first_param;
    let mut sql = match lower {
        Lower::From(k) => {
            params.push(k.clone().into());
            format!("key >= ?{p}")
        }
        Lower::After(k) | Lower::Within(k, _) => {
            params.push(k.clone().into());
            format!("key > ?{p}")
        }
    };
    if let Some(u) = upper {
        params.push(u.to_vec().into());
        sql.push_str(&format!(" AND key < ?{}", p + 1));
    }
    sql
}

pub struct ListParams<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// List keys after this one (exclusive): marker, start-after or continuation.
    pub after: Option<&'a str>,
    pub max: usize,
}

fn start_of(prefix: &str, after: Option<&str>) -> Lower {
    match after {
        Some(a) if a.as_bytes() >= prefix.as_bytes() => Lower::After(a.as_bytes().to_vec()),
        _ => Lower::From(prefix.as_bytes().to_vec()),
    }
}

/// Current versions (not delete markers) of keys under `prefix`, in key order.
pub fn list_objects(
    tx: &mut dyn Tx,
    bucket_id: i64,
    q: &ListParams<'_>,
) -> Result<Listing<ListEntry>, IndexError> {
    let page = list::page(
        PageQuery {
            prefix: q.prefix,
            delimiter: q.delimiter,
            start: start_of(q.prefix, q.after),
            marker_key: q.after,
            max: q.max,
        },
        |lower, upper, limit| {
            let mut params = vec![Value::Int(bucket_id)];
            let range = range_sql(lower, upper, 2, &mut params);
            params.push(Value::Int(limit as i64));
            let n = params.len();
            let rows = tx.query(
                &format!(
                    "SELECT key, size, etag, mtime_ms FROM objects WHERE bucket_id = ?1 \
                     AND is_latest = 1 AND delete_marker = 0 AND {range} ORDER BY key LIMIT ?{n}"
                ),
                &params,
            )?;
            rows.iter()
                .map(|r| {
                    let key = r.key(0)?;
                    Ok(Item {
                        key: key.clone(),
                        sub: Value::Null,
                        value: ListEntry {
                            key,
                            size: size_from(r.int(1)?)?,
                            etag: r.text(2)?,
                            mtime_ms: r.int(3)?,
                        },
                    })
                })
                .collect()
        },
    )?;
    Ok(Listing {
        entries: page.items.into_iter().map(|i| i.value).collect(),
        common_prefixes: page.prefixes,
        truncated: page.truncated,
        next_key: page.last.map(|l| l.0),
        next_sub: None,
    })
}

/// All versions and delete markers under `prefix`: key order, newest first per key.
/// `key_marker` + `version_marker` continue after that version.
pub fn list_versions(
    tx: &mut dyn Tx,
    bucket_id: i64,
    q: &ListParams<'_>,
    version_marker: Option<&str>,
) -> Result<Listing<VersionEntry>, IndexError> {
    // A version marker continues within its key: find that version's row id.
    let mut start = start_of(q.prefix, q.after);
    if let (Some(key), Some(vid)) = (q.after, version_marker)
        && let Some(v) = version(tx, bucket_id, key, vid)?
    {
        start = Lower::Within(key.as_bytes().to_vec(), Value::Int(v.row_id));
    }
    let marker_key = match &start {
        Lower::Within(..) => None,
        _ => q.after,
    };
    let page = list::page(
        PageQuery {
            prefix: q.prefix,
            delimiter: q.delimiter,
            start,
            marker_key,
            max: q.max,
        },
        |lower, upper, limit| {
            let mut params = vec![Value::Int(bucket_id)];
            let range = range_sql(lower, upper, 2, &mut params);
            let range = match lower {
                Lower::Within(k, id) => {
                    let n = params.len();
                    params.push(k.clone().into());
                    params.push(id.clone());
                    format!("(({range}) OR (key = ?{} AND id < ?{}))", n + 1, n + 2)
                }
                _ => range,
            };
            params.push(Value::Int(limit as i64));
            let n = params.len();
            let rows = tx.query(
                &format!(
                    "SELECT key, id, version_id, is_latest, delete_marker, size, etag, mtime_ms \
                     FROM objects WHERE bucket_id = ?1 AND {range} ORDER BY key, id DESC LIMIT ?{n}"
                ),
                &params,
            )?;
            rows.iter()
                .map(|r| {
                    let key = r.key(0)?;
                    Ok(Item {
                        key: key.clone(),
                        sub: Value::Int(r.int(1)?),
                        value: VersionEntry {
                            key,
                            version_id: r.text(2)?,
                            is_latest: r.int(3)? != 0,
                            delete_marker: r.int(4)? != 0,
                            size: size_from(r.int(5)?)?,
                            etag: r.text(6)?,
                            mtime_ms: r.int(7)?,
                        },
                    })
                })
                .collect()
        },
    )?;
    let next_sub = page
        .items
        .last()
        .filter(|_| matches!(page.last, Some((_, Some(_)))))
        .map(|i| i.value.version_id.clone());
    Ok(Listing {
        entries: page.items.into_iter().map(|i| i.value).collect(),
        common_prefixes: page.prefixes,
        truncated: page.truncated,
        next_key: page.last.map(|l| l.0),
        next_sub,
    })
}

// ---- multipart uploads ------------------------------------------------------------------

pub fn create_upload(tx: &mut dyn Tx, u: &Upload) -> Result<(), IndexError> {
    tx.exec(
        "INSERT INTO uploads (upload_id, bucket_id, key, created_ms, attrs) VALUES (?1, ?2, ?3, ?4, ?5)",
        &[
            u.upload_id.as_str().into(),
            u.bucket_id.into(),
            u.key.as_bytes().into(),
            u.created_ms.into(),
            attrs_json(&u.attrs).into(),
        ],
    )?;
    Ok(())
}

pub fn upload(tx: &mut dyn Tx, upload_id: &str) -> Result<Option<Upload>, IndexError> {
    let Some(r) = tx.query_opt(
        "SELECT upload_id, bucket_id, key, created_ms, attrs FROM uploads WHERE upload_id = ?1",
        &[upload_id.into()],
    )?
    else {
        return Ok(None);
    };
    Ok(Some(Upload {
        upload_id: r.text(0)?,
        bucket_id: r.int(1)?,
        key: r.key(2)?,
        created_ms: r.int(3)?,
        attrs: attrs_from(&r.text(4)?)?,
    }))
}

fn part_from(r: &Row) -> Result<Part, IndexError> {
    Ok(Part {
        part_number: r.int(0)?,
        size: size_from(r.int(1)?)?,
        etag: r.text(2)?,
        mtime_ms: r.int(3)?,
        attrs: attrs_from(&r.text(4)?)?,
        pieces: match r.opt_text(5)? {
            Some(p) => pieces_from(&p)?,
            None => Vec::new(),
        },
    })
}

/// Records a part (replacing an earlier upload of the same number, whose pieces are
/// queued at `gc_due_ms`).
pub fn put_part(
    tx: &mut dyn Tx,
    upload_id: &str,
    bucket_id: i64,
    key: &str,
    part: &Part,
    gc_due_ms: i64,
) -> Result<(), IndexError> {
    match upload(tx, upload_id)? {
        Some(u) if u.bucket_id == bucket_id && u.key == key => {}
        _ => return Err(IndexError::NoSuchUpload),
    }
    gc_commit_intents(tx, &part.pieces)?;
    if let Some(old) = tx.query_opt(
        "SELECT part_number, size, etag, mtime_ms, attrs, pieces FROM parts \
         WHERE upload_id = ?1 AND part_number = ?2",
        &[upload_id.into(), part.part_number.into()],
    )? {
        gc_add(tx, &part_from(&old)?.pieces, gc_due_ms)?;
        tx.exec(
            "DELETE FROM parts WHERE upload_id = ?1 AND part_number = ?2",
            &[upload_id.into(), part.part_number.into()],
        )?;
    }
    let size = i64::try_from(part.size).map_err(|e| corrupt("size", e))?;
    tx.exec(
        "INSERT INTO parts (upload_id, part_number, size, etag, mtime_ms, attrs, pieces) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        &[
            upload_id.into(),
            part.part_number.into(),
            size.into(),
            part.etag.as_str().into(),
            part.mtime_ms.into(),
            attrs_json(&part.attrs).into(),
            pieces_json(&part.pieces).into(),
        ],
    )?;
    Ok(())
}

pub fn parts(
    tx: &mut dyn Tx,
    upload_id: &str,
    after: i64,
    max: usize,
) -> Result<Vec<Part>, IndexError> {
    tx.query(
        "SELECT part_number, size, etag, mtime_ms, attrs, pieces FROM parts \
         WHERE upload_id = ?1 AND part_number > ?2 ORDER BY part_number LIMIT ?3",
        &[upload_id.into(), after.into(), (max as i64).into()],
    )?
    .iter()
    .map(part_from)
    .collect()
}

/// Removes an upload and its parts; their pieces are queued at `gc_due_ms`, except those
/// in `keep` (which a completed object now owns).
pub fn finish_upload(
    tx: &mut dyn Tx,
    upload_id: &str,
    keep: &[PieceId],
    gc_due_ms: i64,
) -> Result<(), IndexError> {
    let all = parts(tx, upload_id, 0, usize::MAX >> 1)?;
    for p in &all {
        let drop: Vec<Piece> = p
            .pieces
            .iter()
            .filter(|piece| !keep.contains(&piece.id))
            .cloned()
            .collect();
        gc_add(tx, &drop, gc_due_ms)?;
    }
    tx.exec(
        "DELETE FROM parts WHERE upload_id = ?1",
        &[upload_id.into()],
    )?;
    let n = tx.exec(
        "DELETE FROM uploads WHERE upload_id = ?1",
        &[upload_id.into()],
    )?;
    if n == 0 {
        return Err(IndexError::NoSuchUpload);
    }
    Ok(())
}

/// Commits a completed multipart upload as a new version, in one transaction with the
/// removal of the upload.
pub fn complete_upload(
    tx: &mut dyn Tx,
    upload_id: &str,
    bucket_id: i64,
    v: &NewVersion,
    cond: &WriteCondition,
    new_version_id: &str,
    gc_due_ms: i64,
) -> Result<String, IndexError> {
    match upload(tx, upload_id)? {
        Some(u) if u.bucket_id == bucket_id && u.key == v.key => {}
        _ => return Err(IndexError::NoSuchUpload),
    }
    let keep: Vec<PieceId> = v.data.pieces().iter().map(|p| p.id).collect();
    finish_upload(tx, upload_id, &keep, gc_due_ms)?;
    let b = bucket_by_id(tx, bucket_id)?;
    let current = latest(tx, bucket_id, &v.key)?;
    check_condition(current.as_ref(), cond)?;
    let version_id = match b.versioning {
        Versioning::Enabled => new_version_id,
        _ => {
            remove_null_version(tx, bucket_id, &v.key, gc_due_ms)?;
            NULL_VERSION
        }
    };
    insert_version(tx, bucket_id, version_id, false, v)?;
    Ok(version_id.to_string())
}

/// In-progress uploads under `prefix`, by key then upload id.
pub fn list_uploads(
    tx: &mut dyn Tx,
    bucket_id: i64,
    q: &ListParams<'_>,
    upload_id_marker: Option<&str>,
) -> Result<Listing<Upload>, IndexError> {
    let mut start = start_of(q.prefix, q.after);
    if let (Some(key), Some(uid)) = (q.after, upload_id_marker) {
        start = Lower::Within(key.as_bytes().to_vec(), Value::Text(uid.to_string()));
    }
    let marker_key = match &start {
        Lower::Within(..) => None,
        _ => q.after,
    };
    let page = list::page(
        PageQuery {
            prefix: q.prefix,
            delimiter: q.delimiter,
            start,
            marker_key,
            max: q.max,
        },
        |lower, upper, limit| {
            let mut params = vec![Value::Int(bucket_id)];
            let range = range_sql(lower, upper, 2, &mut params);
            let range = match lower {
                Lower::Within(k, uid) => {
                    let n = params.len();
                    params.push(k.clone().into());
                    params.push(uid.clone());
                    format!(
                        "(({range}) OR (key = ?{} AND upload_id > ?{}))",
                        n + 1,
                        n + 2
                    )
                }
                _ => range,
            };
            params.push(Value::Int(limit as i64));
            let n = params.len();
            let rows = tx.query(
                &format!(
                    "SELECT upload_id, bucket_id, key, created_ms, attrs FROM uploads \
                     WHERE bucket_id = ?1 AND {range} ORDER BY key, upload_id LIMIT ?{n}"
                ),
                &params,
            )?;
            rows.iter()
                .map(|r| {
                    let u = Upload {
                        upload_id: r.text(0)?,
                        bucket_id: r.int(1)?,
                        key: r.key(2)?,
                        created_ms: r.int(3)?,
                        attrs: attrs_from(&r.text(4)?)?,
                    };
                    Ok(Item {
                        key: u.key.clone(),
                        sub: Value::Text(u.upload_id.clone()),
                        value: u,
                    })
                })
                .collect()
        },
    )?;
    let next_sub = page
        .items
        .last()
        .filter(|_| matches!(page.last, Some((_, Some(_)))))
        .map(|i| i.value.upload_id.clone());
    Ok(Listing {
        entries: page.items.into_iter().map(|i| i.value).collect(),
        common_prefixes: page.prefixes,
        truncated: page.truncated,
        next_key: page.last.map(|l| l.0),
        next_sub,
    })
}

// ---- access keys -------------------------------------------------------------------------

pub fn add_access_key(
    tx: &mut dyn Tx,
    access_key: &str,
    secret_key: &str,
    now_ms: i64,
) -> Result<(), IndexError> {
    tx.exec(
        "INSERT INTO access_keys (access_key, secret_key, created_ms) VALUES (?1, ?2, ?3)",
        &[access_key.into(), secret_key.into(), now_ms.into()],
    )?;
    Ok(())
}

pub fn secret_key(tx: &mut dyn Tx, access_key: &str) -> Result<Option<String>, IndexError> {
    tx.query_opt(
        "SELECT secret_key FROM access_keys WHERE access_key = ?1",
        &[access_key.into()],
    )?
    .map(|r| r.text(0))
    .transpose()
}

pub fn delete_access_key(tx: &mut dyn Tx, access_key: &str) -> Result<bool, IndexError> {
    Ok(tx.exec(
        "DELETE FROM access_keys WHERE access_key = ?1",
        &[access_key.into()],
    )? > 0)
}

pub fn access_keys(tx: &mut dyn Tx) -> Result<Vec<(String, i64)>, IndexError> {
    tx.query(
        "SELECT access_key, created_ms FROM access_keys ORDER BY access_key",
        &[],
    )?
    .iter()
    .map(|r| Ok((r.text(0)?, r.int(1)?)))
    .collect()
}
