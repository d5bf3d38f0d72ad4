//! The index operations on both engines: SQLite always, PostgreSQL when its binaries are
//! installed (required under FERROBAY_REQUIRE_ALL=1).

use super::*;
use crate::layout::{Geometry, Piece};
use crate::testing::PgServer;
use testkit::prereq::missing as skip_or_fail;

const G: Geometry = Geometry { data: 2, parity: 1 };

fn piece(n: u8) -> Piece {
    Piece {
        id: [n; 16],
        size: 100,
        geometry: G,
        shard_bytes: 64,
        stores: vec!["a".into(), "b".into(), "c".into()],
    }
}

fn version(key: &str, etag: &str, data: ObjectData) -> NewVersion {
    NewVersion {
        key: key.to_string(),
        size: match &data {
            ObjectData::Inline(b) => b.len() as u64,
            ObjectData::Pieces(p) => p.iter().map(|p| p.size).sum(),
        },
        etag: etag.to_string(),
        mtime_ms: 1000,
        attrs: ObjectAttrs {
            content_type: Some("text/plain".into()),
            ..ObjectAttrs::default()
        },
        data,
    }
}

async fn bucket(index: &Index, name: &str) -> Bucket {
    let n = name.to_string();
    index
        .write(move |tx| ops::create_bucket(tx, &n, G, 5))
        .await
        .expect("create bucket");
    index.bucket(name).await.expect("read").expect("exists")
}

async fn put(
    index: &Index,
    b: i64,
    v: NewVersion,
    cond: WriteCondition,
    vid: &str,
) -> Result<String, IndexError> {
    let vid = vid.to_string();
    // Pieces of a write carry an intent row until the commit.
    let pieces = v.data.pieces().to_vec();
    index
        .write(move |tx| ops::gc_add(tx, &pieces, i64::MAX))
        .await
        .expect("intent");
    index
        .write(move |tx| ops::put_version(tx, b, &v, &cond, &vid, 50))
        .await
}

async fn buckets_and_unversioned_objects(index: &Index) {
    let b = bucket(index, "plain").await;
    assert_eq!(b.versioning, Versioning::Unversioned);
    assert_eq!(b.geometry, G);
    let again = index
        .write(|tx| ops::create_bucket(tx, "plain", G, 6))
        .await;
    assert_eq!(again, Err(IndexError::BucketExists));

    let v1 = put(
        index,
        b.id,
        version("k", "e1", ObjectData::Pieces(vec![piece(1)])),
        WriteCondition::default(),
        "x",
    )
    .await;
    assert_eq!(v1.as_deref(), Ok(NULL_VERSION));
    // Create-only fails on an existing key; If-Match needs the current ETag.
    let create_only = WriteCondition {
        if_none_match_any: true,
        ..Default::default()
    };
    assert_eq!(
        put(
            index,
            b.id,
            version("k", "e2", ObjectData::Inline(b"x".to_vec())),
            create_only.clone(),
            "x"
        )
        .await,
        Err(IndexError::PreconditionFailed)
    );
    let wrong_etag = WriteCondition {
        if_match: Some("nope".into()),
        ..Default::default()
    };
    assert_eq!(
        put(
            index,
            b.id,
            version("k", "e2", ObjectData::Inline(b"x".to_vec())),
            wrong_etag,
            "x"
        )
        .await,
        Err(IndexError::PreconditionFailed)
    );
    let right_etag = WriteCondition {
        if_match: Some("e1".into()),
        ..Default::default()
    };
    put(
        index,
        b.id,
        version("k", "e2", ObjectData::Inline(b"hi".to_vec())),
        right_etag,
        "x",
    )
    .await
    .expect("if-match");
    let cur = index
        .read(move |tx| ops::latest(tx, b.id, "k"))
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(cur.etag, "e2");
    assert_eq!(cur.data, ObjectData::Inline(b"hi".to_vec()));
    assert_eq!(cur.attrs.content_type.as_deref(), Some("text/plain"));
    // The overwritten version's piece is queued for deletion at the given due time.
    let due = index
        .write(|tx| ops::gc_claim(tx, 50, 1000, 10))
        .await
        .expect("claim");
    assert_eq!(due, vec![piece(1)]);

    assert_eq!(
        index.write(|tx| ops::delete_bucket(tx, "plain")).await,
        Err(IndexError::BucketNotEmpty)
    );
    let d = index
        .write(move |tx| ops::delete_object(tx, b.id, "k", None, "x", 7, 60))
        .await
        .expect("delete");
    assert_eq!(
        d,
        DeleteResult {
            version_id: None,
            delete_marker: false
        }
    );
    index
        .write(|tx| ops::delete_bucket(tx, "plain"))
        .await
        .expect("delete empty bucket");
    assert_eq!(index.bucket("plain").await, Ok(None));
}

async fn versions_and_delete_markers(index: &Index) {
    let b = bucket(index, "versioned").await;
    index
        .write(|tx| ops::set_versioning(tx, "versioned", Versioning::Enabled))
        .await
        .expect("enable");
    for (i, vid) in ["v1", "v2", "v3"].iter().enumerate() {
        let got = put(
            index,
            b.id,
            version(
                "k",
                &format!("e{i}"),
                ObjectData::Pieces(vec![piece(10 + i as u8)]),
            ),
            WriteCondition::default(),
            vid,
        )
        .await;
        assert_eq!(got.as_deref(), Ok(*vid));
    }
    // A delete without a version id puts a marker on top; the data stays.
    let d = index
        .write(move |tx| ops::delete_object(tx, b.id, "k", None, "m1", 9, 60))
        .await
        .expect("delete");
    assert_eq!(
        d,
        DeleteResult {
            version_id: Some("m1".into()),
            delete_marker: true
        }
    );
    let listed = index
        .read(move |tx| {
            ops::list_objects(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 10,
                },
            )
        })
        .await
        .expect("list");
    assert!(listed.entries.is_empty(), "a deleted key is not listed");
    let versions = index
        .read(move |tx| {
            ops::list_versions(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 10,
                },
                None,
            )
        })
        .await
        .expect("versions");
    let ids: Vec<(&str, bool, bool)> = versions
        .entries
        .iter()
        .map(|v| (v.version_id.as_str(), v.is_latest, v.delete_marker))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("m1", true, true),
            ("v3", false, false),
            ("v2", false, false),
            ("v1", false, false)
        ]
    );
    // Paging versions two at a time with the key and version markers.
    let first = index
        .read(move |tx| {
            ops::list_versions(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 2,
                },
                None,
            )
        })
        .await
        .expect("page 1");
    assert!(first.truncated);
    assert_eq!(
        (first.next_key.as_deref(), first.next_sub.as_deref()),
        (Some("k"), Some("v3"))
    );
    let second = index
        .read(move |tx| {
            ops::list_versions(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: Some("k"),
                    max: 2,
                },
                Some("v3"),
            )
        })
        .await
        .expect("page 2");
    let ids: Vec<&str> = second
        .entries
        .iter()
        .map(|v| v.version_id.as_str())
        .collect();
    assert_eq!(ids, vec!["v2", "v1"]);
    assert!(!second.truncated);
    // Removing the marker makes v3 current again; removing v3 then makes v2 current.
    for (vid, now_current) in [("m1", "v3"), ("v3", "v2")] {
        let v = vid.to_string();
        index
            .write(move |tx| ops::delete_object(tx, b.id, "k", Some(&v), "unused", 9, 60))
            .await
            .expect("delete version");
        let cur = index
            .read(move |tx| ops::latest(tx, b.id, "k"))
            .await
            .expect("read")
            .expect("current");
        assert_eq!(cur.version_id, now_current);
    }
    // Suspended: writes replace the null version only.
    index
        .write(|tx| ops::set_versioning(tx, "versioned", Versioning::Suspended))
        .await
        .expect("suspend");
    for n in [20u8, 21] {
        let got = put(
            index,
            b.id,
            version("k", "en", ObjectData::Pieces(vec![piece(n)])),
            WriteCondition::default(),
            "ignored",
        )
        .await;
        assert_eq!(got.as_deref(), Ok(NULL_VERSION));
    }
    let versions = index
        .read(move |tx| {
            ops::list_versions(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 10,
                },
                None,
            )
        })
        .await
        .expect("versions");
    let ids: Vec<&str> = versions
        .entries
        .iter()
        .map(|v| v.version_id.as_str())
        .collect();
    assert_eq!(ids, vec!["null", "v2", "v1"]);
}

async fn listings_follow_the_model(index: &Index) {
    let b = bucket(index, "listing").await;
    let mut keys = std::collections::BTreeSet::new();
    for d in ["a", "a/b", "b", "é", "日本"] {
        for f in 0..7 {
            keys.insert(format!("{d}/f{f}"));
        }
    }
    keys.insert("plain".to_string());
    keys.insert("a".to_string());
    for k in &keys {
        put(
            index,
            b.id,
            version(k, "e", ObjectData::Inline(vec![])),
            WriteCondition::default(),
            "x",
        )
        .await
        .expect("put");
    }
    for (prefix, delim) in [
        ("", Some("/")),
        ("a/", Some("/")),
        ("", None),
        ("a", None),
        ("zz", Some("/")),
    ] {
        for max in [1usize, 2, 5, 1000] {
            let mut got_keys = Vec::new();
            let mut got_prefixes = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let p = prefix.to_string();
                let a = after.clone();
                let page = index
                    .read(move |tx| {
                        ops::list_objects(
                            tx,
                            b.id,
                            &ListParams {
                                prefix: &p,
                                delimiter: delim,
                                after: a.as_deref(),
                                max,
                            },
                        )
                    })
                    .await
                    .expect("list");
                assert!(page.entries.len() + page.common_prefixes.len() <= max);
                got_keys.extend(page.entries.into_iter().map(|e| e.key));
                got_prefixes.extend(page.common_prefixes);
                if !page.truncated {
                    break;
                }
                after = page.next_key;
            }
            let mut want_keys = Vec::new();
            let mut want_prefixes: Vec<String> = Vec::new();
            for k in keys.iter().filter(|k| k.starts_with(prefix)) {
                match delim.and_then(|d| k[prefix.len()..].find(d)) {
                    Some(pos) => {
                        let cp = k[..prefix.len() + pos + 1].to_string();
                        if want_prefixes.last() != Some(&cp) {
                            want_prefixes.push(cp);
                        }
                    }
                    None => want_keys.push(k.clone()),
                }
            }
            assert_eq!(
                got_keys, want_keys,
                "prefix {prefix:?} delim {delim:?} max {max}"
            );
            assert_eq!(
                got_prefixes, want_prefixes,
                "prefix {prefix:?} delim {delim:?} max {max}"
            );
        }
    }
}

async fn multipart_and_gc(index: &Index) {
    let b = bucket(index, "mp").await;
    // What earlier scenarios queued is due by 60.
    index
        .write(|tx| ops::gc_claim(tx, 60, 1000, 100))
        .await
        .expect("drain");
    let upload = Upload {
        upload_id: "u1".into(),
        bucket_id: b.id,
        key: "big".into(),
        created_ms: 1,
        attrs: ObjectAttrs::default(),
    };
    let u = upload.clone();
    index
        .write(move |tx| ops::create_upload(tx, &u))
        .await
        .expect("create upload");
    let part = |n: i64, p: u8| Part {
        part_number: n,
        size: 100,
        etag: format!("p{n}"),
        mtime_ms: 2,
        attrs: ObjectAttrs::default(),
        pieces: vec![piece(p)],
    };
    for (n, p) in [(1, 30u8), (2, 31), (2, 32), (3, 33)] {
        let pt = part(n, p);
        let pieces = pt.pieces.clone();
        index
            .write(move |tx| ops::gc_add(tx, &pieces, i64::MAX))
            .await
            .expect("intent");
        index
            .write(move |tx| ops::put_part(tx, "u1", b.id, "big", &pt, 70))
            .await
            .expect("put part");
    }
    let parts = index
        .read(|tx| ops::parts(tx, "u1", 0, 100))
        .await
        .expect("parts");
    let numbers: Vec<(i64, u8)> = parts
        .iter()
        .map(|p| (p.part_number, p.pieces[0].id[0]))
        .collect();
    assert_eq!(numbers, vec![(1, 30), (2, 32), (3, 33)]);
    let uploads = index
        .read(move |tx| {
            ops::list_uploads(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 10,
                },
                None,
            )
        })
        .await
        .expect("uploads");
    assert_eq!(uploads.entries, vec![upload]);
    // Complete with parts 1 and 2: part 3 and the replaced first part 2 are garbage.
    let v = version("big", "x-2", ObjectData::Pieces(vec![piece(30), piece(32)]));
    index
        .write(move |tx| {
            ops::complete_upload(tx, "u1", b.id, &v, &WriteCondition::default(), "x", 70)
        })
        .await
        .expect("complete");
    assert_eq!(index.read(|tx| ops::upload(tx, "u1")).await, Ok(None));
    let mut garbage: Vec<u8> = index
        .write(|tx| ops::gc_claim(tx, 70, 1000, 10))
        .await
        .expect("claim")
        .iter()
        .map(|p| p.id[0])
        .collect();
    garbage.sort();
    assert_eq!(garbage, vec![31, 33]);
    // A write whose intent was claimed by a reaper (it took too long) cannot commit.
    let slow = piece(40);
    let p = vec![slow.clone()];
    index
        .write(move |tx| ops::gc_add(tx, &p, 80))
        .await
        .expect("intent");
    let claimed = index
        .write(|tx| ops::gc_claim(tx, 80, 2000, 10))
        .await
        .expect("claim");
    assert_eq!(claimed, vec![slow.clone()]);
    let v = version("late", "e", ObjectData::Pieces(vec![slow]));
    let late = index
        .write(move |tx| ops::put_version(tx, b.id, &v, &WriteCondition::default(), "x", 90))
        .await;
    assert!(matches!(late, Err(IndexError::IntentLost(_))), "{late:?}");
    assert_eq!(
        index.read(move |tx| ops::latest(tx, b.id, "late")).await,
        Ok(None)
    );
}

async fn every_scenario(index: &Index) {
    buckets_and_unversioned_objects(index).await;
    versions_and_delete_markers(index).await;
    listings_follow_the_model(index).await;
    multipart_and_gc(index).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite:{}", dir.path().join("index.db").display());
    let index = Index::open(&url).await.expect("open");
    assert_eq!(index.engine(), "sqlite");
    every_scenario(&index).await;
    // Reopening finds the same data and schema.
    drop(index);
    let index = Index::open(&url).await.expect("reopen");
    assert!(index.bucket("versioned").await.expect("read").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_index() {
    let server = match PgServer::start() {
        Ok(s) => s,
        Err(why) => return skip_or_fail(&why),
    };
    let url = server.create_database().expect("database");
    let index = Index::open(&url).await.expect("open");
    assert_eq!(index.engine(), "postgresql");
    every_scenario(&index).await;
    concurrent_writers_of_one_key(&url).await;
}

/// Several gateways (separate pools) write one key at once: every write lands as its
/// own version and exactly one is current.
async fn concurrent_writers_of_one_key(url: &str) {
    let gateways = futures::future::join_all((0..4).map(|_| Index::open(url)))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .expect("open");
    let b = bucket(&gateways[0], "race").await;
    gateways[0]
        .write(|tx| ops::set_versioning(tx, "race", Versioning::Enabled))
        .await
        .expect("enable");
    let writes = gateways.iter().enumerate().flat_map(|(g, index)| {
        (0..10).map(move |i| {
            let vid = format!("g{g}-{i}");
            async move {
                put(
                    index,
                    b.id,
                    version("hot", &vid, ObjectData::Inline(vec![])),
                    WriteCondition::default(),
                    &vid,
                )
                .await
            }
        })
    });
    for r in futures::future::join_all(writes).await {
        r.expect("concurrent put");
    }
    let versions = gateways[0]
        .read(move |tx| {
            ops::list_versions(
                tx,
                b.id,
                &ListParams {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 100,
                },
                None,
            )
        })
        .await
        .expect("versions");
    assert_eq!(versions.entries.len(), 40);
    assert_eq!(versions.entries.iter().filter(|v| v.is_latest).count(), 1);
}
