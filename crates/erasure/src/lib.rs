//! Reed-Solomon erasure coding over GF(2^8) for RAID-5 (k+1, XOR), RAID-6 (k+2, P+Q as
//! Linux md defines them) and general k+m codes with m <= 4. Format and design:
//! `docs/erasure.md`.
//!
//! ```
//! use erasure::ReedSolomon;
//! let rs = ReedSolomon::new(4, 2)?;
//! let data: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 4096]).collect();
//! let mut parity = vec![vec![0u8; 4096]; 2];
//! let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
//! let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
//! rs.encode(&data_refs, &mut parity_refs)?;
//!
//! // Lose data shard 1 and P, rebuild both.
//! let mut shards: Vec<Vec<u8>> = data.iter().chain(&parity).cloned().collect();
//! shards[1].fill(0);
//! shards[4].fill(0);
//! let present = [true, false, true, true, false, true];
//! let mut refs: Vec<&mut [u8]> = shards.iter_mut().map(Vec::as_mut_slice).collect();
//! rs.reconstruct(&mut refs, &present)?;
//! assert_eq!(shards[1], data[1]);
//! assert_eq!(shards[4], parity[0]);
//! # Ok::<(), erasure::ErasureError>(())
//! ```

mod codec;
mod error;
pub mod gf;
mod kernel;
mod matrix;
pub mod reference;

pub use codec::ReedSolomon;
pub use error::ErasureError;
pub use kernel::Kernel;
pub use matrix::{MAX_DATA_SHARDS, MAX_PARITY_SHARDS, PARITY_MATRIX};
