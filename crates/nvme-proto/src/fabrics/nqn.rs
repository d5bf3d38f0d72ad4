//! NVMe Qualified Names (NVMe Base 2.0 "NVMe Qualified Names").
//!
//! Two forms: `nqn.yyyy-mm.reverse.domain[:anything]` and the UUID form
//! `nqn.2014-08.org.nvmexpress:uuid:xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
//! NQNs travel in 256-byte NUL-terminated fields but are at most 223 bytes long.

use thiserror::Error;

/// The well-known NQN of a discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Prefix of the UUID form of an NQN.
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";
/// Longest NQN in bytes, without the terminating NUL.
pub const NQN_MAX_BYTES: usize = 223;
/// Size of an NQN field in Connect data, Identify Controller and the discovery log.
pub const NQN_FIELD_BYTES: usize = 256;

/// Why a string is not a valid NQN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum NqnError {
    #[error("NQN is {len_bytes} bytes, more than 223")]
    TooLong { len_bytes: usize },
    #[error("NQN does not start with \"nqn.\"")]
    MissingPrefix,
    #[error("NQN date is not yyyy-mm")]
    BadDate,
    #[error("NQN reverse domain name is empty or has a bad label")]
    BadDomain,
    #[error("NQN UUID is not 8-4-4-4-12 hex digits")]
    BadUuid,
    #[error("NQN contains a NUL or control character")]
    BadCharacter,
}

/// Checks `s` against the NQN rules: length, the `nqn.yyyy-mm.` date, a reverse domain
/// name of non-empty labels of ASCII letters, digits and '-', then nothing or ':' and a
/// user-chosen string; or the UUID form.
pub fn validate_nqn(s: &str) -> Result<(), NqnError> {
    if s.len() > NQN_MAX_BYTES {
        return Err(NqnError::TooLong { len_bytes: s.len() });
    }
    if s.chars().any(char::is_control) {
        return Err(NqnError::BadCharacter);
    }
    if let Some(uuid) = s.strip_prefix(UUID_NQN_PREFIX) {
        return if is_uuid(uuid) {
            Ok(())
        } else {
            Err(NqnError::BadUuid)
        };
    }
    let rest = s.strip_prefix("nqn.").ok_or(NqnError::MissingPrefix)?;
    let b = rest.as_bytes();
    // yyyy-mm followed by '.'.
    let date_ok = b.len() > 8
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && matches!((b[5] - b'0') * 10 + (b[6] - b'0'), 1..=12)
        && b[7] == b'.';
    if !date_ok {
        return Err(NqnError::BadDate);
    }
    let after_date = &rest[8..];
    let domain = after_date.split(':').next().unwrap_or("");
    let labels_ok = !domain.is_empty()
        && domain
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-'));
    if !labels_ok {
        return Err(NqnError::BadDomain);
    }
    Ok(())
}

/// Whether `s` is a UUID in its 36-character text form.
fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Formats the UUID form of an NQN for a 16-byte UUID.
pub fn uuid_nqn(uuid: &[u8; 16]) -> String {
    let mut s = String::with_capacity(UUID_NQN_PREFIX.len() + 36);
    s.push_str(UUID_NQN_PREFIX);
    for (i, byte) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_well_known_forms() {
        assert_eq!(validate_nqn(DISCOVERY_NQN), Ok(()));
        assert_eq!(validate_nqn("nqn.2026-01.io.ferrobay:n1:d0"), Ok(()));
        assert_eq!(
            validate_nqn("nqn.2014-08.org.nvmexpress:uuid:0f8fad5b-d9cb-469f-a165-70867728950e"),
            Ok(())
        );
        assert_eq!(validate_nqn(&uuid_nqn(&[0xAB; 16])), Ok(()));
    }

    #[test]
    fn rejects_bad_forms() {
        assert_eq!(
            validate_nqn("iqn.2026-01.io.x"),
            Err(NqnError::MissingPrefix)
        );
        assert_eq!(validate_nqn("nqn.26-01.io.x"), Err(NqnError::BadDate));
        assert_eq!(validate_nqn("nqn.2026-13.io.x"), Err(NqnError::BadDate));
        assert_eq!(validate_nqn("nqn.2026-01."), Err(NqnError::BadDate));
        assert_eq!(validate_nqn("nqn.2026-01.io..x"), Err(NqnError::BadDomain));
        assert_eq!(validate_nqn("nqn.2026-01.:x"), Err(NqnError::BadDomain));
        assert_eq!(
            validate_nqn("nqn.2014-08.org.nvmexpress:uuid:not-a-uuid"),
            Err(NqnError::BadUuid)
        );
        assert_eq!(
            validate_nqn("nqn.2026-01.io.x:a\0b"),
            Err(NqnError::BadCharacter)
        );
        let long = format!("nqn.2026-01.io.x:{}", "a".repeat(223));
        assert!(matches!(validate_nqn(&long), Err(NqnError::TooLong { .. })));
        let max = format!("nqn.2026-01.io.x:{}", "a".repeat(223 - 17));
        assert_eq!(max.len(), 223);
        assert_eq!(validate_nqn(&max), Ok(()));
    }

    #[test]
    fn uuid_nqn_text() {
        let mut u = [0u8; 16];
        u[0] = 0x12;
        u[15] = 0xEF;
        assert_eq!(
            uuid_nqn(&u),
            "nqn.2014-08.org.nvmexpress:uuid:12000000-0000-0000-0000-0000000000ef"
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,300}") {
            let _ = validate_nqn(&s);
        }
    }
}
