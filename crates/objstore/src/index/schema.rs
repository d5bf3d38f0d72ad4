//! The index schema, one text for both engines (`{id}`, `{blob}`, `{int}` are filled in
//! per dialect). Keys are stored as bytes so that both engines order them bytewise, the
//! order S3 lists in. Documented in `docs/object.md` ("Index schema").

/// Bump with a migration when the schema changes.
pub const SCHEMA_VERSION: i64 = 1;

pub const TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS schema_version (version {int} NOT NULL)",
    // versioning: 0 never enabled, 1 enabled, 2 suspended.
    "CREATE TABLE IF NOT EXISTS buckets (
        id {id},
        name TEXT NOT NULL UNIQUE,
        created_ms {int} NOT NULL,
        versioning {int} NOT NULL,
        data_shards {int} NOT NULL,
        parity_shards {int} NOT NULL,
        policy TEXT,
        tagging TEXT
    )",
    // One row per object version (delete markers included). attrs: JSON (content
    // headers, user metadata, checksum, tags, part sizes); pieces: JSON shard maps of
    // the erasure-coded data, or NULL when the bytes are inline (small objects).
    "CREATE TABLE IF NOT EXISTS objects (
        id {id},
        bucket_id {int} NOT NULL REFERENCES buckets(id),
        key {blob} NOT NULL,
        version_id TEXT NOT NULL,
        is_latest {int} NOT NULL,
        delete_marker {int} NOT NULL,
        size {int} NOT NULL,
        etag TEXT NOT NULL,
        mtime_ms {int} NOT NULL,
        attrs TEXT NOT NULL,
        pieces TEXT,
        inline_data {blob}
    )",
    "CREATE UNIQUE INDEX IF NOT EXISTS objects_version ON objects (bucket_id, key, version_id)",
    "CREATE INDEX IF NOT EXISTS objects_history ON objects (bucket_id, key, id)",
    // The listing index: only current versions; unique, so two writers of one key
    // cannot both make theirs the current version.
    "CREATE UNIQUE INDEX IF NOT EXISTS objects_latest ON objects (bucket_id, key) WHERE is_latest = 1",
    "CREATE TABLE IF NOT EXISTS uploads (
        upload_id TEXT PRIMARY KEY,
        bucket_id {int} NOT NULL REFERENCES buckets(id),
        key {blob} NOT NULL,
        created_ms {int} NOT NULL,
        attrs TEXT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS uploads_by_key ON uploads (bucket_id, key, created_ms)",
    "CREATE TABLE IF NOT EXISTS parts (
        upload_id TEXT NOT NULL REFERENCES uploads(upload_id),
        part_number {int} NOT NULL,
        size {int} NOT NULL,
        etag TEXT NOT NULL,
        mtime_ms {int} NOT NULL,
        attrs TEXT NOT NULL,
        pieces TEXT,
        inline_data {blob},
        PRIMARY KEY (upload_id, part_number)
    )",
    // Pieces whose shards must be deleted once due: written by a PUT that has not
    // committed yet (an intent: due after a grace period, removed by the commit), or no
    // longer referenced (overwritten, deleted, aborted). claimed: a reaper is deleting.
    "CREATE TABLE IF NOT EXISTS piece_gc (
        piece_id {blob} PRIMARY KEY,
        piece TEXT NOT NULL,
        due_ms {int} NOT NULL,
        claimed {int} NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS piece_gc_due ON piece_gc (due_ms)",
    // Pieces known to miss shards (written while stores were down, or a failed heal).
    "CREATE TABLE IF NOT EXISTS piece_degraded (
        piece_id {blob} PRIMARY KEY,
        piece TEXT NOT NULL,
        since_ms {int} NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS access_keys (
        access_key TEXT PRIMARY KEY,
        secret_key TEXT NOT NULL,
        created_ms {int} NOT NULL
    )",
];
