//! Layout parameters: which RAID level, how many members, stripe unit.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Most member slots a volume can have (spares come on top, see `format::MAX_ENTRIES`).
pub const MAX_SLOTS: usize = 32;
/// Most parity members of a rotating layout (the erasure crate's limit for this engine).
pub const MAX_PARITY: usize = 4;
/// Default stripe unit (chunk): 64 KiB, like md.
pub const DEFAULT_STRIPE_UNIT_BYTES: u64 = 64 << 10;
/// Stripe units are multiples of this, so every member I/O suits 4 KiB-sector members.
pub const STRIPE_UNIT_ALIGN_BYTES: u64 = 4096;
/// Largest stripe unit accepted.
pub const MAX_STRIPE_UNIT_BYTES: u64 = 16 << 20;

/// RAID level. The on-disk code is [`Level::code`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Raid0,
    Raid1,
    Raid10,
    Raid5,
    Raid6,
    /// General Reed-Solomon k+m with rotating parity.
    Erasure,
}

impl Level {
    pub fn code(self) -> u8 {
        match self {
            Level::Raid0 => 0,
            Level::Raid1 => 1,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
            Level::Raid10 => 10,
            Level::Erasure => 100,
        }
    }

    pub fn from_code(code: u8) -> Option<Level> {
        Some(match code {
            0 => Level::Raid0,
            1 => Level::Raid1,
            5 => Level::Raid5,
            6 => Level::Raid6,
            10 => Level::Raid10,
            100 => Level::Erasure,
            _ => return None,
        })
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid10 => "raid10",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Erasure => "erasure",
        })
    }
}

/// Why a layout is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("{level} needs {need}, got {members} members")]
    MemberCount {
        level: Level,
        members: usize,
        need: &'static str,
    },
    #[error("inconsistent {level} parameters: k={k} m={m} copies={copies} for {members} members")]
    Inconsistent {
        level: Level,
        members: usize,
        k: usize,
        m: usize,
        copies: usize,
    },
    #[error("stripe unit {0} bytes: must be a multiple of 4096 between 4 KiB and 16 MiB")]
    StripeUnit(u64),
    #[error("members too small: {member_bytes} usable bytes is less than one stripe unit")]
    TooSmall { member_bytes: u64 },
    #[error(
        "members too large: {members} members of {member_bytes} usable bytes make a volume \
         over 16 EiB"
    )]
    TooLarge { members: usize, member_bytes: u64 },
    #[error("invalid level \"{0}\" (expected raid0, raid1, raid10, raid10:C, raid5, raid6 or K+M)")]
    Parse(String),
}

/// The shape of a volume: level, member count, data/parity split, stripe unit.
///
/// Canonical values: raid0 k=n m=0 c=1; raid1 k=1 m=n-1 c=n; raid10 k=1 m=c-1 c;
/// raid5 k=n-1 m=1; raid6 k=n-2 m=2; erasure k, m (n=k+m), c=1. `m` is always the number
/// of member failures every byte survives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LayoutParams {
    pub level: Level,
    pub members: usize,
    pub k: usize,
    pub m: usize,
    pub copies: usize,
    pub stripe_unit_bytes: u64,
}

/// `raid6 (4+2), 6 members, stripe unit 64 KiB`: for logs and status lines.
impl fmt::Display for LayoutParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = match self.level {
            Level::Raid0 | Level::Raid1 => String::new(),
            Level::Raid10 => format!(" ({} copies)", self.copies),
            Level::Raid5 | Level::Raid6 => format!(" ({}+{})", self.k, self.m),
            Level::Erasure => String::new(),
        };
        let su = self.stripe_unit_bytes;
        let su = if su.is_multiple_of(1 << 20) {
            format!("{} MiB", su >> 20)
        } else {
            format!("{} KiB", su >> 10)
        };
        write!(
            f,
            "{}{shape}, {} members, stripe unit {su}",
            self.level_name(),
            self.members
        )
    }
}

/// The two families the math distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// md's "near" layout: each chunk stored `copies` times on consecutive slots
    /// (raid0 = 1 copy, raid1 = n copies, raid10).
    Near { copies: usize },
    /// k data + m parity chunks per row, parity rotating left-symmetric (raid5/6, k+m).
    Rotating { k: usize, m: usize },
}

impl LayoutParams {
    pub fn raid0(members: usize) -> LayoutParams {
        Self::make(Level::Raid0, members, members, 0, 1)
    }

    pub fn raid1(members: usize) -> LayoutParams {
        Self::make(Level::Raid1, members, 1, members.saturating_sub(1), members)
    }

    pub fn raid10(members: usize, copies: usize) -> LayoutParams {
        Self::make(Level::Raid10, members, 1, copies.saturating_sub(1), copies)
    }

    pub fn raid5(members: usize) -> LayoutParams {
        Self::make(Level::Raid5, members, members.saturating_sub(1), 1, 1)
    }

    pub fn raid6(members: usize) -> LayoutParams {
        Self::make(Level::Raid6, members, members.saturating_sub(2), 2, 1)
    }

    pub fn erasure(k: usize, m: usize) -> LayoutParams {
        Self::make(Level::Erasure, k + m, k, m, 1)
    }

    fn make(level: Level, members: usize, k: usize, m: usize, copies: usize) -> LayoutParams {
        LayoutParams {
            level,
            members,
            k,
            m,
            copies,
            stripe_unit_bytes: DEFAULT_STRIPE_UNIT_BYTES,
        }
    }

    /// The level as people write it: `raid6`, `raid10`, `4+2` for erasure coding.
    pub fn level_name(&self) -> String {
        match self.level {
            Level::Erasure => format!("{}+{}", self.k, self.m),
            other => other.to_string(),
        }
    }

    pub fn with_stripe_unit(mut self, stripe_unit_bytes: u64) -> LayoutParams {
        self.stripe_unit_bytes = stripe_unit_bytes;
        self
    }

    pub fn family(&self) -> Family {
        match self.level {
            Level::Raid0 | Level::Raid1 | Level::Raid10 => Family::Near {
                copies: self.copies,
            },
            Level::Raid5 | Level::Raid6 | Level::Erasure => Family::Rotating {
                k: self.k,
                m: self.m,
            },
        }
    }

    /// Member failures every byte survives.
    pub fn tolerance(&self) -> usize {
        self.m
    }

    /// Checks member count, canonical k/m/copies and the stripe unit.
    pub fn validate(&self) -> Result<(), LayoutError> {
        let n = self.members;
        let count_err = |need| LayoutError::MemberCount {
            level: self.level,
            members: n,
            need,
        };
        let (min_n, need) = match self.level {
            Level::Raid0 => (1, "1 to 32 members"),
            Level::Raid1 => (2, "2 to 32 members"),
            Level::Raid10 => (
                self.copies.max(2),
                "at least `copies` (>= 2) and at most 32 members",
            ),
            Level::Raid5 => (3, "3 to 32 members"),
            Level::Raid6 => (4, "4 to 32 members"),
            Level::Erasure => (2, "k >= 1, 1 <= m <= 4, k + m <= 32"),
        };
        if n < min_n || n > MAX_SLOTS {
            return Err(count_err(need));
        }
        let canonical = match self.level {
            Level::Raid0 => LayoutParams::raid0(n),
            Level::Raid1 => LayoutParams::raid1(n),
            Level::Raid10 => LayoutParams::raid10(n, self.copies),
            Level::Raid5 => LayoutParams::raid5(n),
            Level::Raid6 => LayoutParams::raid6(n),
            Level::Erasure => {
                if self.k == 0 || self.m == 0 || self.m > MAX_PARITY {
                    return Err(count_err(need));
                }
                LayoutParams::erasure(self.k, self.m)
            }
        };
        if self.level == Level::Raid10 && self.copies < 2 {
            return Err(count_err(need));
        }
        if (
            canonical.members,
            canonical.k,
            canonical.m,
            canonical.copies,
        ) != (n, self.k, self.m, self.copies)
        {
            return Err(LayoutError::Inconsistent {
                level: self.level,
                members: n,
                k: self.k,
                m: self.m,
                copies: self.copies,
            });
        }
        let su = self.stripe_unit_bytes;
        if !(STRIPE_UNIT_ALIGN_BYTES..=MAX_STRIPE_UNIT_BYTES).contains(&su)
            || !su.is_multiple_of(STRIPE_UNIT_ALIGN_BYTES)
        {
            return Err(LayoutError::StripeUnit(su));
        }
        Ok(())
    }
}

/// What the CLI's `--level` names, before the member count is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LevelSpec {
    Raid0,
    Raid1,
    Raid10 { copies: usize },
    Raid5,
    Raid6,
    Erasure { k: usize, m: usize },
}

impl LevelSpec {
    /// The layout for `members` slots (validated).
    pub fn params(
        self,
        members: usize,
        stripe_unit_bytes: u64,
    ) -> Result<LayoutParams, LayoutError> {
        let p = match self {
            LevelSpec::Raid0 => LayoutParams::raid0(members),
            LevelSpec::Raid1 => LayoutParams::raid1(members),
            LevelSpec::Raid10 { copies } => LayoutParams::raid10(members, copies),
            LevelSpec::Raid5 => LayoutParams::raid5(members),
            LevelSpec::Raid6 => LayoutParams::raid6(members),
            LevelSpec::Erasure { k, m } => {
                if k + m != members {
                    return Err(LayoutError::MemberCount {
                        level: Level::Erasure,
                        members,
                        need: "exactly k + m members",
                    });
                }
                LayoutParams::erasure(k, m)
            }
        }
        .with_stripe_unit(stripe_unit_bytes);
        p.validate()?;
        Ok(p)
    }
}

impl FromStr for LevelSpec {
    type Err = LayoutError;

    /// `raid0`, `raid1`, `raid10` (2 copies), `raid10:3`, `raid5`, `raid6`, `4+2` or `ec4+2`.
    fn from_str(s: &str) -> Result<LevelSpec, LayoutError> {
        let err = || LayoutError::Parse(s.to_owned());
        let lower = s.trim().to_ascii_lowercase();
        Ok(match lower.as_str() {
            "raid0" => LevelSpec::Raid0,
            "raid1" => LevelSpec::Raid1,
            "raid10" => LevelSpec::Raid10 { copies: 2 },
            "raid5" => LevelSpec::Raid5,
            "raid6" => LevelSpec::Raid6,
            other => {
                if let Some(c) = other.strip_prefix("raid10:") {
                    LevelSpec::Raid10 {
                        copies: c.parse().map_err(|_| err())?,
                    }
                } else {
                    let km = other.strip_prefix("ec").unwrap_or(other);
                    let (k, m) = km.split_once('+').ok_or_else(err)?;
                    LevelSpec::Erasure {
                        k: k.parse().map_err(|_| err())?,
                        m: m.parse().map_err(|_| err())?,
                    }
                }
            }
        })
    }
}

impl fmt::Display for LevelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LevelSpec::Raid0 => f.write_str("raid0"),
            LevelSpec::Raid1 => f.write_str("raid1"),
            LevelSpec::Raid10 { copies: 2 } => f.write_str("raid10"),
            LevelSpec::Raid10 { copies } => write!(f, "raid10:{copies}"),
            LevelSpec::Raid5 => f.write_str("raid5"),
            LevelSpec::Raid6 => f.write_str("raid6"),
            LevelSpec::Erasure { k, m } => write!(f, "{k}+{m}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn level_codes_round_trip() {
        for l in [
            Level::Raid0,
            Level::Raid1,
            Level::Raid10,
            Level::Raid5,
            Level::Raid6,
            Level::Erasure,
        ] {
            assert_eq!(Level::from_code(l.code()), Some(l));
        }
        assert_eq!(Level::from_code(7), None);
    }

    #[test]
    fn validation() {
        assert!(LayoutParams::raid5(3).validate().is_ok());
        assert!(LayoutParams::raid5(2).validate().is_err());
        assert!(LayoutParams::raid6(4).validate().is_ok());
        assert!(LayoutParams::raid6(3).validate().is_err());
        assert!(LayoutParams::erasure(4, 2).validate().is_ok());
        assert!(LayoutParams::erasure(4, 5).validate().is_err());
        assert!(LayoutParams::erasure(0, 2).validate().is_err());
        assert!(LayoutParams::erasure(31, 2).validate().is_err());
        assert!(LayoutParams::raid10(3, 2).validate().is_ok());
        assert!(LayoutParams::raid10(2, 3).validate().is_err());
        assert!(LayoutParams::raid10(4, 1).validate().is_err());
        assert!(LayoutParams::raid1(1).validate().is_err());
        assert!(LayoutParams::raid0(1).validate().is_ok());
        let mut bad = LayoutParams::raid5(4);
        bad.k = 2;
        assert!(matches!(
            bad.validate(),
            Err(LayoutError::Inconsistent { .. })
        ));
        for su in [0, 512, 4097, 32 << 20] {
            assert!(
                LayoutParams::raid0(2)
                    .with_stripe_unit(su)
                    .validate()
                    .is_err()
            );
        }
        assert!(
            LayoutParams::raid0(2)
                .with_stripe_unit(12288)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn level_spec_parsing() {
        for (s, want) in [
            ("raid0", LevelSpec::Raid0),
            ("RAID6", LevelSpec::Raid6),
            ("raid10", LevelSpec::Raid10 { copies: 2 }),
            ("raid10:3", LevelSpec::Raid10 { copies: 3 }),
            ("4+2", LevelSpec::Erasure { k: 4, m: 2 }),
            ("ec10+4", LevelSpec::Erasure { k: 10, m: 4 }),
        ] {
            let got: LevelSpec = s.parse().unwrap();
            assert_eq!(got, want);
            assert_eq!(got.to_string().parse::<LevelSpec>().unwrap(), want);
        }
        for bad in ["raid7", "4-2", "raid10:x", "+"] {
            assert!(bad.parse::<LevelSpec>().is_err(), "{bad}");
        }
        assert_eq!(
            LevelSpec::Erasure { k: 4, m: 2 }.params(6, 65536).unwrap(),
            LayoutParams::erasure(4, 2)
        );
        assert!(LevelSpec::Erasure { k: 4, m: 2 }.params(5, 65536).is_err());
        assert_eq!(LevelSpec::Raid6.params(6, 65536).unwrap().k, 4);
    }
}
