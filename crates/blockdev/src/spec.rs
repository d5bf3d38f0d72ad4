//! Drive specifications as given on the command line: `ram:1G`, `file:/img:100G`, `/dev/sdb`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::{
    BlockDevice, BlockError, FileDevice, IoEngine, NullDevice, OpenOptions, RamDevice,
    SECTOR_SIZE_BYTES,
};

/// A parsed drive specification.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DriveSpec {
    /// `ram:SIZE`: sparse RAM disk.
    Ram { size_bytes: u64 },
    /// `null:SIZE`: reads zeroes, drops writes.
    Null { size_bytes: u64 },
    /// `file:PATH:SIZE` (create sparse if missing, grow if smaller) or `file:PATH` (must
    /// exist).
    File {
        path: PathBuf,
        create_size_bytes: Option<u64>,
    },
    /// `/dev/...` or `blk:PATH`: a kernel block device.
    BlockDevice { path: PathBuf },
    /// `volume:NAME`: a local erasure-coded volume. Only parsed here: the volume layer
    /// (which knows where its members are) assembles it; [`open_drive`] refuses it.
    Volume { name: String },
}

/// A bad drive or size string, with a one-line message naming the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("invalid drive \"{input}\": {reason}")]
    Drive { input: String, reason: String },
    #[error("invalid size \"{input}\": {reason}")]
    Size { input: String, reason: String },
}

/// Parses a byte size: a decimal number with an optional binary unit, case-insensitive:
/// `B`, `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB`, `P`/`PiB` (1K = 1024). Decimal units
/// (`GB`) are rejected as ambiguous.
///
/// Not `bytesize`'s parser (which prints our sizes): it reads `1G` as 10^9 bytes and
/// saturates on overflow; nor `parse-size`, which takes fractions and spaces (`1.5 G`).
/// Sizes from users are exact, binary and checked.
pub fn parse_size_bytes(s: &str) -> Result<u64, SpecError> {
    let err = |reason: String| SpecError::Size {
        input: s.to_string(),
        reason,
    };
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(err(
            "expected a number with an optional unit K, M, G, T (e.g. 64G)".into(),
        ));
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        "p" | "pib" => 50,
        "kb" | "mb" | "gb" | "tb" | "pb" => {
            let binary = &unit[..1];
            return Err(err(format!(
                "ambiguous unit \"{unit}\" (sizes are binary: use {binary} or {binary}iB)"
            )));
        }
        _ => {
            return Err(err(format!(
                "unknown unit \"{unit}\" (expected K, M, G, T or P)"
            )));
        }
    };
    let number: u64 = digits.parse().map_err(|_| err("number too large".into()))?;
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| err("too large (over 16 EiB)".into()))
}

/// Parses `ram:SIZE`, `null:SIZE`, `file:PATH[:SIZE]`, `blk:PATH` or `/dev/...`.
/// Sizes must be non-zero multiples of 512 bytes.
pub fn parse_drive_spec(s: &str) -> Result<DriveSpec, SpecError> {
    let err = |reason: String| SpecError::Drive {
        input: s.to_string(),
        reason,
    };
    let device_size = |size: &str| -> Result<u64, SpecError> {
        let size_bytes = parse_size_bytes(size).map_err(|e| err(e.to_string()))?;
        if size_bytes == 0 || !size_bytes.is_multiple_of(SECTOR_SIZE_BYTES) {
            return Err(err(format!(
                "size {size_bytes} bytes is not a non-zero multiple of {SECTOR_SIZE_BYTES}"
            )));
        }
        Ok(size_bytes)
    };
    if s.starts_with("/dev/") {
        return Ok(DriveSpec::BlockDevice {
            path: PathBuf::from(s),
        });
    }
    if s.starts_with('/') {
        return Err(err(
            "a bare path must be under /dev (use file:PATH for an image file)".into(),
        ));
    }
    let Some((kind, rest)) = s.split_once(':') else {
        return Err(err(
            "expected ram:SIZE, null:SIZE, file:PATH[:SIZE], blk:PATH or a /dev path".into(),
        ));
    };
    match kind {
        "ram" => Ok(DriveSpec::Ram {
            size_bytes: device_size(rest)?,
        }),
        "null" => Ok(DriveSpec::Null {
            size_bytes: device_size(rest)?,
        }),
        "volume" if rest.is_empty() => Err(err("missing volume name after \"volume:\"".into())),
        "volume" => Ok(DriveSpec::Volume {
            name: rest.to_string(),
        }),
        "blk" if rest.is_empty() => Err(err("missing device path after \"blk:\"".into())),
        "blk" => Ok(DriveSpec::BlockDevice {
            path: PathBuf::from(rest),
        }),
        "file" => {
            // The last ":..." is a size when it starts with a digit; otherwise part of the path.
            let (path, create_size_bytes) = match rest.rsplit_once(':') {
                Some((path, size)) if size.starts_with(|c: char| c.is_ascii_digit()) => {
                    (path, Some(device_size(size)?))
                }
                _ => (rest, None),
            };
            if path.is_empty() {
                return Err(err("missing file path after \"file:\"".into()));
            }
            Ok(DriveSpec::File {
                path: PathBuf::from(path),
                create_size_bytes,
            })
        }
        _ => Err(err(format!(
            "unknown kind \"{kind}\" (expected ram, null, file, volume or a /dev path)"
        ))),
    }
}

/// Formats a size with the largest binary unit that divides it exactly.
fn format_size(size_bytes: u64) -> String {
    for (shift, unit) in [(50, "P"), (40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if size_bytes != 0 && size_bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", size_bytes >> shift);
        }
    }
    size_bytes.to_string()
}

/// Formats back to a string that [`parse_drive_spec`] accepts.
impl fmt::Display for DriveSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriveSpec::Ram { size_bytes } => write!(f, "ram:{}", format_size(*size_bytes)),
            DriveSpec::Null { size_bytes } => write!(f, "null:{}", format_size(*size_bytes)),
            DriveSpec::File {
                path,
                create_size_bytes: Some(size),
            } => {
                write!(f, "file:{}:{}", path.display(), format_size(*size))
            }
            DriveSpec::File {
                path,
                create_size_bytes: None,
            } => {
                write!(f, "file:{}", path.display())
            }
            DriveSpec::BlockDevice { path } if path.starts_with("/dev/") => {
                write!(f, "{}", path.display())
            }
            DriveSpec::BlockDevice { path } => write!(f, "blk:{}", path.display()),
            DriveSpec::Volume { name } => write!(f, "volume:{name}"),
        }
    }
}

impl std::str::FromStr for DriveSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<DriveSpec, SpecError> {
        parse_drive_spec(s)
    }
}

/// Opens a drive. RAM and null drives are named after their spec (`ram:1G`), files and
/// block devices after their path. Files and block devices use O_DIRECT.
pub async fn open_drive(
    spec: &DriveSpec,
    engine: IoEngine,
) -> Result<Arc<dyn BlockDevice>, BlockError> {
    Ok(match spec {
        // Refused beyond this machine's memory (see `ram` for the memory policy).
        DriveSpec::Ram { size_bytes } => Arc::new(RamDevice::open(spec.to_string(), *size_bytes)?),
        DriveSpec::Null { size_bytes } => Arc::new(NullDevice::new(spec.to_string(), *size_bytes)),
        DriveSpec::File {
            path,
            create_size_bytes,
        } => {
            let opts = OpenOptions {
                create_size_bytes: *create_size_bytes,
                engine,
                ..Default::default()
            };
            Arc::new(FileDevice::open(path, opts)?)
        }
        DriveSpec::BlockDevice { path } => {
            let opts = OpenOptions {
                engine,
                ..Default::default()
            };
            Arc::new(FileDevice::open(path, opts)?)
        }
        DriveSpec::Volume { name } => {
            return Err(BlockError::Io(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("volume:{name} is assembled by the volume layer, not opened as a device"),
            )));
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size_bytes("0"), Ok(0));
        assert_eq!(parse_size_bytes("4096"), Ok(4096));
        assert_eq!(parse_size_bytes("512B"), Ok(512));
        assert_eq!(parse_size_bytes("1K"), Ok(1024));
        assert_eq!(parse_size_bytes("1k"), Ok(1024));
        assert_eq!(parse_size_bytes("3M"), Ok(3 << 20));
        assert_eq!(parse_size_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_size_bytes("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size_bytes("1gib"), Ok(1 << 30));
        assert_eq!(parse_size_bytes("2T"), Ok(2 << 40));
        assert_eq!(parse_size_bytes("16383P"), Ok(16383 << 50));
        for bad in [
            "",
            "G",
            "1.5G",
            "-1G",
            "1X",
            "1 G",
            " 1G",
            "16384P",
            "99999999999999999999",
        ] {
            assert!(parse_size_bytes(bad).is_err(), "{bad:?} accepted");
        }
        let msg = parse_size_bytes("1GB").unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid size \"1GB\": ambiguous unit \"GB\" (sizes are binary: use G or GiB)"
        );
    }

    #[test]
    fn drive_specs() {
        assert_eq!(
            parse_drive_spec("ram:1G"),
            Ok(DriveSpec::Ram {
                size_bytes: 1 << 30
            })
        );
        assert_eq!(
            parse_drive_spec("null:1T"),
            Ok(DriveSpec::Null {
                size_bytes: 1 << 40
            })
        );
        assert_eq!(
            parse_drive_spec("file:/path/img:100G"),
            Ok(DriveSpec::File {
                path: "/path/img".into(),
                create_size_bytes: Some(100 << 30)
            })
        );
        assert_eq!(
            parse_drive_spec("file:/path/img"),
            Ok(DriveSpec::File {
                path: "/path/img".into(),
                create_size_bytes: None
            })
        );
        assert_eq!(
            parse_drive_spec("file:rel/a:b"),
            Ok(DriveSpec::File {
                path: "rel/a:b".into(),
                create_size_bytes: None
            })
        );
        assert_eq!(
            parse_drive_spec("/dev/sdb"),
            Ok(DriveSpec::BlockDevice {
                path: "/dev/sdb".into()
            })
        );
        assert_eq!(
            parse_drive_spec("blk:/dev/nvme0n1"),
            Ok(DriveSpec::BlockDevice {
                path: "/dev/nvme0n1".into()
            })
        );
    }

    #[test]
    fn drive_spec_errors_are_one_line_and_name_the_input() {
        let cases = [
            (
                "xyz:1G",
                "invalid drive \"xyz:1G\": unknown kind \"xyz\" (expected ram, null, file, volume or a /dev path)",
            ),
            (
                "ram:1X",
                "invalid drive \"ram:1X\": invalid size \"1X\": unknown unit \"X\" (expected K, M, G, T or P)",
            ),
            (
                "ram:",
                "invalid drive \"ram:\": invalid size \"\": expected a number with an optional unit K, M, G, T (e.g. 64G)",
            ),
            (
                "ram:0",
                "invalid drive \"ram:0\": size 0 bytes is not a non-zero multiple of 512",
            ),
            (
                "null:1000",
                "invalid drive \"null:1000\": size 1000 bytes is not a non-zero multiple of 512",
            ),
            (
                "file:",
                "invalid drive \"file:\": missing file path after \"file:\"",
            ),
            (
                "file::1G",
                "invalid drive \"file::1G\": missing file path after \"file:\"",
            ),
            (
                "file:/a:1Q",
                "invalid drive \"file:/a:1Q\": invalid size \"1Q\": unknown unit \"Q\" (expected K, M, G, T or P)",
            ),
            (
                "blk:",
                "invalid drive \"blk:\": missing device path after \"blk:\"",
            ),
            (
                "volume:",
                "invalid drive \"volume:\": missing volume name after \"volume:\"",
            ),
            (
                "/var/img",
                "invalid drive \"/var/img\": a bare path must be under /dev (use file:PATH for an image file)",
            ),
            (
                "xyz",
                "invalid drive \"xyz\": expected ram:SIZE, null:SIZE, file:PATH[:SIZE], blk:PATH or a /dev path",
            ),
        ];
        for (input, want) in cases {
            let got = parse_drive_spec(input).unwrap_err().to_string();
            assert_eq!(got, want);
            assert!(!got.contains('\n'));
        }
    }

    #[test]
    fn display_roundtrips() {
        for s in [
            "ram:1G",
            "null:1T",
            "ram:1536K",
            "file:/a/b:100G",
            "file:/a/b",
            "/dev/sdb",
            "blk:/x/y",
            "ram:512",
        ] {
            let spec = parse_drive_spec(s).unwrap();
            assert_eq!(spec.to_string(), s);
            assert_eq!(parse_drive_spec(&spec.to_string()).unwrap(), spec);
        }
    }

    #[tokio::test]
    async fn open_ram_and_null() {
        let dev = open_drive(&parse_drive_spec("ram:1G").unwrap(), IoEngine::Auto)
            .await
            .unwrap();
        assert_eq!(dev.info().size_bytes, 1 << 30);
        assert_eq!(dev.info().name, "ram:1G");
        assert_eq!(dev.info().kind, crate::DeviceKind::Ram);
        let dev = open_drive(
            &DriveSpec::Null {
                size_bytes: 1 << 40,
            },
            IoEngine::Auto,
        )
        .await
        .unwrap();
        assert_eq!(dev.info().kind, crate::DeviceKind::Null);
    }
}
