//! Test data: deterministic bytes, and a byte comparison that fails readably.

/// `len` pseudo-random bytes that depend on `seed` (xorshift64: the same on every run).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Panics unless `got == want`, naming the lengths and the first differing offset
/// instead of printing megabytes of both.
#[track_caller]
pub fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let first = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: {} bytes read, {} written, first difference at {first:?}",
            got.len(),
            want.len()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_repeat_per_seed_and_differ_between_seeds() {
        assert_eq!(pattern(100, 7), pattern(100, 7));
        assert_ne!(pattern(100, 7), pattern(100, 8));
        assert_same(&pattern(10, 1), &pattern(10, 1), "same");
        let r = std::panic::catch_unwind(|| assert_same(b"abc", b"abd", "body"));
        let msg = *r.expect_err("differs").downcast::<String>().expect("text");
        assert!(msg.contains("first difference at Some(2)"), "{msg}");
    }
}
