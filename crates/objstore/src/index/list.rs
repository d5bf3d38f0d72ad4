//! Ordered, paginated listings with prefix and delimiter, shared by ListObjects,
//! ListObjectVersions and ListMultipartUploads. A listing walks the key range of the
//! prefix in index order; a key holding the delimiter after the prefix becomes a common
//! prefix, and the walk jumps past every key under it with one new range query, so a
//! page costs a few index range scans however many keys the prefixes hide.

use super::IndexError;
use super::sql::Value;

/// Where a range query starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lower {
    /// `key >= bytes`
    From(Vec<u8>),
    /// `key > bytes`
    After(Vec<u8>),
    /// Further items of `key` after position `sub` (in the listing's own order of items
    /// of one key), then `key > bytes`.
    Within(Vec<u8>, Value),
}

/// One listed item of type T under `key`; `sub` tells items of one key apart.
pub struct Item<T> {
    pub key: String,
    pub sub: Value,
    pub value: T,
}

pub struct Page<T> {
    pub items: Vec<Item<T>>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    /// The last key or common prefix returned, and the item position for a `Within`
    /// restart (None after a common prefix).
    pub last: Option<(String, Option<Value>)>,
}

/// The smallest byte string greater than every string starting with `prefix`, or None
/// when there is none (empty prefix, or all 0xff).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// What a page request asks for.
pub struct PageQuery<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    /// Start here (a marker, a continuation, or the prefix itself).
    pub start: Lower,
    /// Common prefixes at or before this key were returned on an earlier page.
    pub marker_key: Option<&'a str>,
    pub max: usize,
}

/// Builds one page. `fetch(lower, upper, limit)` returns up to `limit` items in order
/// from `lower` and below `upper` (None: no bound).
pub fn page<T>(
    q: PageQuery<'_>,
    mut fetch: impl FnMut(&Lower, Option<&[u8]>, usize) -> Result<Vec<Item<T>>, IndexError>,
) -> Result<Page<T>, IndexError> {
    let upper = prefix_end(q.prefix.as_bytes());
    let mut out = Page {
        items: Vec::new(),
        prefixes: Vec::new(),
        truncated: false,
        last: None,
    };
    if q.max == 0 {
        return Ok(out);
    }
    let mut lower = q.start;
    // With a delimiter, a batch may end at its first row (a common prefix makes the walk
    // jump): batches start small and double while no jump happens, so neither many
    // prefixes nor many plain keys read rows that are thrown away.
    const FIRST_BATCH: usize = 8;
    let mut batch_limit = if q.delimiter.is_some() {
        FIRST_BATCH
    } else {
        usize::MAX
    };
    'walk: loop {
        let want = (q.max - (out.items.len() + out.prefixes.len()) + 1).min(batch_limit);
        batch_limit = batch_limit.saturating_mul(2);
        let batch = fetch(&lower, upper.as_deref(), want)?;
        if batch.is_empty() {
            break;
        }
        let batch_len = batch.len();
        for item in batch {
            let prefix_of = q.delimiter.and_then(|d| {
                let rest = item.key.get(q.prefix.len()..)?;
                rest.find(d)
                    .map(|pos| item.key[..q.prefix.len() + pos + d.len()].to_string())
            });
            if let Some(cp) = prefix_of {
                let seen = q.marker_key.is_some_and(|m| cp.as_str() <= m)
                    || out.prefixes.last() == Some(&cp);
                if !seen {
                    if out.items.len() + out.prefixes.len() == q.max {
                        out.truncated = true;
                        break 'walk;
                    }
                    out.last = Some((cp.clone(), None));
                    out.prefixes.push(cp.clone());
                }
                match prefix_end(cp.as_bytes()) {
                    Some(end) => lower = Lower::From(end),
                    None => break 'walk,
                }
                batch_limit = FIRST_BATCH;
                continue 'walk;
            }
            if out.items.len() + out.prefixes.len() == q.max {
                out.truncated = true;
                break 'walk;
            }
            lower = Lower::Within(item.key.as_bytes().to_vec(), item.sub.clone());
            out.last = Some((item.key.clone(), Some(item.sub.clone())));
            out.items.push(item);
        }
        if batch_len < want {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    type Fetched = Result<Vec<Item<()>>, IndexError>;

    /// The model: a sorted set of keys, one item per key.
    fn fetch_from<'a>(
        keys: &'a BTreeSet<String>,
        calls: &'a mut usize,
    ) -> impl FnMut(&Lower, Option<&[u8]>, usize) -> Fetched + 'a {
        move |lower, upper, limit| {
            *calls += 1;
            Ok(keys
                .iter()
                .filter(|k| match lower {
                    Lower::From(b) => k.as_bytes() >= b.as_slice(),
                    Lower::After(b) | Lower::Within(b, _) => k.as_bytes() > b.as_slice(),
                })
                .filter(|k| upper.is_none_or(|u| k.as_bytes() < u))
                .take(limit)
                .map(|k| Item {
                    key: k.clone(),
                    sub: Value::Null,
                    value: (),
                })
                .collect())
        }
    }

    /// All pages of a listing, following `last` as a continuation.
    fn list_all(
        keys: &BTreeSet<String>,
        prefix: &str,
        delim: Option<&str>,
        max: usize,
    ) -> (Vec<String>, Vec<String>, usize) {
        let mut got_keys = Vec::new();
        let mut got_prefixes = Vec::new();
        let mut marker: Option<String> = None;
        let mut pages = 0;
        loop {
            pages += 1;
            let start = match &marker {
                Some(m) => Lower::After(m.as_bytes().to_vec()),
                None => Lower::From(prefix.as_bytes().to_vec()),
            };
            let mut calls = 0;
            let p = page(
                PageQuery {
                    prefix,
                    delimiter: delim,
                    start,
                    marker_key: marker.as_deref(),
                    max,
                },
                fetch_from(keys, &mut calls),
            )
            .expect("page");
            assert!(p.items.len() + p.prefixes.len() <= max);
            got_keys.extend(p.items.iter().map(|i| i.key.clone()));
            got_prefixes.extend(p.prefixes.iter().cloned());
            if !p.truncated {
                break;
            }
            marker = Some(p.last.expect("truncated page has a last entry").0);
            assert!(pages < 10_000);
        }
        (got_keys, got_prefixes, pages)
    }

    fn model(
        keys: &BTreeSet<String>,
        prefix: &str,
        delim: Option<&str>,
    ) -> (Vec<String>, Vec<String>) {
        let mut ks = Vec::new();
        let mut ps: Vec<String> = Vec::new();
        for k in keys.iter().filter(|k| k.starts_with(prefix)) {
            match delim.and_then(|d| k[prefix.len()..].find(d).map(|p| (p, d))) {
                Some((p, d)) => {
                    let cp = k[..prefix.len() + p + d.len()].to_string();
                    if ps.last() != Some(&cp) {
                        ps.push(cp);
                    }
                }
                None => ks.push(k.clone()),
            }
        }
        (ks, ps)
    }

    #[test]
    fn prefix_end_carries() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn common_prefixes_cost_few_queries_and_rows() {
        let keys: BTreeSet<String> = (0..10)
            .flat_map(|d| (0..100).map(move |f| format!("dir{d}/file{f:03}")))
            .collect();
        let mut calls = 0;
        let mut rows = 0;
        let mut inner = fetch_from(&keys, &mut calls);
        let p = page(
            PageQuery {
                prefix: "",
                delimiter: Some("/"),
                start: Lower::From(vec![]),
                marker_key: None,
                max: 1000,
            },
            |l, u, n| {
                let batch = inner(l, u, n)?;
                rows += batch.len();
                Ok(batch)
            },
        )
        .expect("page");
        assert_eq!(p.prefixes.len(), 10);
        assert!(p.items.is_empty() && !p.truncated);
        drop(inner);
        assert!(calls <= 11, "{calls} queries");
        // 1,000 keys under 10 prefixes: a small first batch per prefix, not all rows.
        assert!(rows <= 10 * 8, "{rows} rows read");
    }

    proptest! {
        #[test]
        fn pages_concatenate_to_the_model(
            keys in proptest::collection::btree_set("[ab/]{0,5}", 0..40),
            prefix in "[ab/]{0,2}",
            use_delim in any::<bool>(),
            max in 1usize..5,
        ) {
            let delim = use_delim.then_some("/");
            let (ks, ps, _) = list_all(&keys, &prefix, delim, max);
            let (mk, mp) = model(&keys, &prefix, delim);
            prop_assert_eq!(ks, mk);
            prop_assert_eq!(ps, mp);
        }
    }
}
