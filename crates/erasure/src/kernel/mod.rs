//! GF(2^8) dot-product kernels: `out_j (^)= sum_i coef[j][i] * in_i` for up to
//! [`MAX_PARITY_SHARDS`] outputs in one pass over the inputs, so every input byte is loaded
//! once per call (ISA-L's `gf_Nvect_dot_prod` structure). Encode, reconstruct and parity
//! update are all this one operation with different coefficients.

use crate::matrix::{MAX_DATA_SHARDS, MAX_PARITY_SHARDS};

mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Most inputs of one kernel call.
pub(crate) const MAX_INPUTS: usize = MAX_DATA_SHARDS;
/// Most outputs of one kernel call.
pub(crate) const MAX_OUTPUTS: usize = MAX_PARITY_SHARDS;

/// One coefficient row per output, one column per input.
pub(crate) type CoefRow = [u8; MAX_INPUTS];

/// An implementation of the GF(2^8) arithmetic. All compute identical bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Portable table lookups, 4 KiB at a time. Always available.
    Scalar,
    /// 32-byte vectors, PSHUFB on nibble tables (AVX2).
    Avx2,
    /// 64-byte vectors, PSHUFB on nibble tables (AVX-512BW): ISA-L 2.30's method.
    Avx512,
    /// 32-byte vectors, GF2P8AFFINEQB (GFNI + AVX2).
    GfniAvx2,
    /// 64-byte vectors, GF2P8AFFINEQB (GFNI + AVX-512BW). Fastest where present.
    GfniAvx512,
}

impl Kernel {
    /// Every kernel, slowest first.
    pub const ALL: [Kernel; 5] = [
        Kernel::Scalar,
        Kernel::Avx2,
        Kernel::Avx512,
        Kernel::GfniAvx2,
        Kernel::GfniAvx512,
    ];

    /// Whether this CPU can run the kernel (runtime detection, cached by std).
    pub fn is_available(self) -> bool {
        match self {
            Kernel::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::GfniAvx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::GfniAvx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("gfni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The kernels this CPU can run, slowest first.
    pub fn available() -> impl Iterator<Item = Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.is_available())
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        Kernel::available().last().unwrap_or(Kernel::Scalar)
    }

    /// A short lowercase name (`scalar`, `avx2`, `avx512`, `gfni-avx2`, `gfni-avx512`).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Scalar => "scalar",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
            Kernel::GfniAvx2 => "gfni-avx2",
            Kernel::GfniAvx512 => "gfni-avx512",
        }
    }

    /// The kernel called `name` (as printed by [`Kernel::name`]).
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `outputs[j] = sum_i coefs[j][i] * inputs[i]`, or `^=` that sum when `accumulate`.
///
/// Callers validate shapes and return typed errors; the asserts here only guard the
/// memory safety of the SIMD kernels and never fire through the public API.
pub(crate) fn dot(
    kernel: Kernel,
    coefs: &[CoefRow],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) {
    let len = outputs.first().map_or(0, |o| o.len());
    assert!(inputs.len() <= MAX_INPUTS && outputs.len() <= MAX_OUTPUTS);
    assert!(coefs.len() >= outputs.len());
    assert!(inputs.iter().all(|s| s.len() == len) && outputs.iter().all(|s| s.len() == len));
    if len == 0 || outputs.is_empty() {
        return;
    }
    let done = match kernel {
        Kernel::Scalar => 0,
        #[cfg(target_arch = "x86_64")]
        _ => {
            assert!(
                kernel.is_available(),
                "kernel {kernel} is not supported by this CPU"
            );
            x86::dot(kernel, coefs, inputs, outputs, len, accumulate)
        }
        #[cfg(not(target_arch = "x86_64"))]
        _ => panic!("kernel {kernel} is not supported by this CPU"),
    };
    if done < len {
        scalar::dot_from(coefs, inputs, outputs, done, accumulate);
    }
}
