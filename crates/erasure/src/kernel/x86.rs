//! x86-64 SIMD kernels. Each submodule defines the vector primitives of one instruction
//! set; [`simd_kernel!`] stamps out the same loop over them: per block of `U * W` bytes,
//! every input vector is loaded once and multiplied into up to four output accumulators,
//! which are stored once. Tails shorter than one vector go to the scalar kernel.

use super::{CoefRow, Kernel, MAX_INPUTS};

/// Dispatches to the kernel's loop; returns how many leading bytes it processed (a
/// multiple of its vector width), the caller finishes the rest.
pub(super) fn dot(
    kernel: Kernel,
    coefs: &[CoefRow],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
    accumulate: bool,
) -> usize {
    let run = match kernel {
        Kernel::Scalar => return 0,
        Kernel::Avx2 => avx2::dot,
        Kernel::Avx512 => avx512::dot,
        Kernel::GfniAvx2 => gfni_avx2::dot,
        Kernel::GfniAvx512 => gfni_avx512::dot,
    };
    call(run, coefs, inputs, outputs, len, accumulate)
}

type DotFn = unsafe fn(&[CoefRow], &[&[u8]], &mut [&mut [u8]], usize, bool) -> usize;

#[allow(unsafe_code)]
fn call(
    run: DotFn,
    coefs: &[CoefRow],
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    len: usize,
    accumulate: bool,
) -> usize {
    // SAFETY: `super::dot` asserted that the CPU supports the kernel, that every input and
    // output holds exactly `len` bytes, that there are at most MAX_INPUTS inputs and
    // MAX_OUTPUTS outputs, and at least as many coefficient rows as outputs.
    unsafe { run(coefs, inputs, outputs, len, accumulate) }
}

/// Generates `dot` (the entry) and its monomorphic loops for the primitives in scope:
/// `V` (vector), `X` (an input vector prepared for multiplication), `T` (a coefficient
/// prepared for multiplication), `W` (bytes per vector), `U` (vectors per step), and the
/// functions `table`, `prep`, `mul`, `zero`, `xor`, `load`, `store`.
macro_rules! simd_kernel {
    ($features:literal) => {
        /// # Safety
        /// The CPU supports the module's features; all inputs and outputs hold `len`
        /// bytes; at most `MAX_INPUTS` inputs, at most 4 outputs, `coefs.len() >= outputs`.
        #[allow(unsafe_code)]
        #[target_feature(enable = $features)]
        pub(super) unsafe fn dot(
            coefs: &[CoefRow],
            inputs: &[&[u8]],
            outputs: &mut [&mut [u8]],
            len: usize,
            accumulate: bool,
        ) -> usize {
            let n = inputs.len().min(MAX_INPUTS);
            if outputs.len() == 1 && coefs[0][..n].iter().all(|&c| c == 1) {
                // SAFETY: forwarded preconditions, one output.
                return unsafe { xor_1(inputs, &mut *outputs[0], len, accumulate) };
            }
            // SAFETY: forwarded preconditions; each arm matches OUTS to outputs.len().
            unsafe {
                match (outputs.len(), accumulate) {
                    (1, false) => dot_n::<1, false>(coefs, inputs, outputs, len),
                    (2, false) => dot_n::<2, false>(coefs, inputs, outputs, len),
                    (3, false) => dot_n::<3, false>(coefs, inputs, outputs, len),
                    (4, false) => dot_n::<4, false>(coefs, inputs, outputs, len),
                    (1, true) => dot_n::<1, true>(coefs, inputs, outputs, len),
                    (2, true) => dot_n::<2, true>(coefs, inputs, outputs, len),
                    (3, true) => dot_n::<3, true>(coefs, inputs, outputs, len),
                    (4, true) => dot_n::<4, true>(coefs, inputs, outputs, len),
                    _ => 0,
                }
            }
        }

        /// # Safety
        /// As [`dot`], and `outputs.len() == OUTS`.
        #[allow(unsafe_code)]
        #[target_feature(enable = $features)]
        unsafe fn dot_n<const OUTS: usize, const ACC: bool>(
            coefs: &[CoefRow],
            inputs: &[&[u8]],
            outputs: &mut [&mut [u8]],
            len: usize,
        ) -> usize {
            let n = inputs.len().min(MAX_INPUTS);
            let mut tabs = [[table(0); MAX_INPUTS]; OUTS];
            for (tab_row, coef_row) in tabs.iter_mut().zip(coefs) {
                for (t, &c) in tab_row.iter_mut().zip(coef_row).take(n) {
                    *t = table(c);
                }
            }
            let mut src = [core::ptr::null::<u8>(); MAX_INPUTS];
            for (s, input) in src.iter_mut().zip(inputs) {
                *s = input.as_ptr();
            }
            let mut dst = [core::ptr::null_mut::<u8>(); OUTS];
            for (d, out) in dst.iter_mut().zip(outputs.iter_mut()) {
                *d = out.as_mut_ptr();
            }
            let mut off = 0;
            if OUTS <= 2 {
                // Few accumulators: wider blocks fit in the registers.
                while off + U_FEW * W <= len {
                    // SAFETY: off + U_FEW * W <= len, every pointer addresses `len` bytes.
                    unsafe { step::<OUTS, ACC, U_FEW>(&tabs, &src, n, &dst, off) };
                    off += U_FEW * W;
                }
            }
            while off + U * W <= len {
                // SAFETY: off + U * W <= len, and every pointer addresses `len` bytes.
                unsafe { step::<OUTS, ACC, U>(&tabs, &src, n, &dst, off) };
                off += U * W;
            }
            while off + W <= len {
                // SAFETY: as above with one vector.
                unsafe { step::<OUTS, ACC, 1>(&tabs, &src, n, &dst, off) };
                off += W;
            }
            off
        }

        /// Vectors per block of the XOR loop (256 bytes measured best for every width).
        const XOR_VECTORS: usize = 256 / W;

        /// All coefficients 1 (RAID-5 parity, rebuild through P): XOR without multiplies.
        ///
        /// # Safety
        /// As [`dot`] with one output.
        #[allow(unsafe_code)]
        #[target_feature(enable = $features)]
        unsafe fn xor_1(
            inputs: &[&[u8]],
            output: &mut [u8],
            len: usize,
            accumulate: bool,
        ) -> usize {
            let dst = output.as_mut_ptr();
            let mut off = 0;
            while off + XOR_VECTORS * W <= len {
                let mut acc = [zero(); XOR_VECTORS];
                for (u, a) in acc.iter_mut().enumerate() {
                    if accumulate {
                        // SAFETY: off + XOR_VECTORS * W <= len = output.len().
                        *a = unsafe { load(dst.add(off + u * W)) };
                    }
                }
                for input in inputs {
                    let p = input.as_ptr();
                    for (u, a) in acc.iter_mut().enumerate() {
                        // SAFETY: every input holds `len` bytes.
                        *a = xor(*a, unsafe { load(p.add(off + u * W)) });
                    }
                }
                for (u, &a) in acc.iter().enumerate() {
                    // SAFETY: as for the loads; `output` is exclusively borrowed.
                    unsafe { store(dst.add(off + u * W), a) };
                }
                off += XOR_VECTORS * W;
            }
            off
        }

        /// One block of `S` vectors at `off` for every output.
        ///
        /// # Safety
        /// `src[..n]` and `dst` are valid for reads (and writes) of `off + S * W` bytes,
        /// the outputs do not overlap the inputs.
        #[allow(unsafe_code)]
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn step<const OUTS: usize, const ACC: bool, const S: usize>(
            tabs: &[[T; MAX_INPUTS]; OUTS],
            src: &[*const u8; MAX_INPUTS],
            n: usize,
            dst: &[*mut u8; OUTS],
            off: usize,
        ) {
            let mut acc = [[zero(); OUTS]; S];
            if ACC {
                for (u, acc_u) in acc.iter_mut().enumerate() {
                    for (a, &d) in acc_u.iter_mut().zip(dst) {
                        // SAFETY: in bounds by the function's contract.
                        *a = unsafe { load(d.add(off + u * W)) };
                    }
                }
            }
            for i in 0..n {
                let p = src[i];
                let mut x = [prep(zero()); S];
                for (u, xu) in x.iter_mut().enumerate() {
                    // SAFETY: in bounds by the function's contract.
                    *xu = prep(unsafe { load(p.add(off + u * W)) });
                }
                for j in 0..OUTS {
                    let t = tabs[j][i];
                    for u in 0..S {
                        acc[u][j] = xor(acc[u][j], mul(x[u], t));
                    }
                }
            }
            for (u, acc_u) in acc.iter().enumerate() {
                for (&a, &d) in acc_u.iter().zip(dst) {
                    // SAFETY: in bounds by the function's contract; `d` is exclusively
                    // borrowed by the caller.
                    unsafe { store(d.add(off + u * W), a) };
                }
            }
        }
    };
}

/// PSHUFB on 16-entry nibble tables, 32-byte vectors.
mod avx2 {
    use super::{CoefRow, MAX_INPUTS};
    use crate::gf::NIBBLE;
    use core::arch::x86_64::*;

    type V = __m256i;
    type X = (V, V);
    type T = (V, V);
    const W: usize = 32;
    const U: usize = 2;
    const U_FEW: usize = 2;

    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2")]
    #[inline]
    fn table(c: u8) -> T {
        let t = &NIBBLE[c as usize];
        // SAFETY: `t` is 32 readable bytes; unaligned loads.
        unsafe {
            let lo = _mm_loadu_si128(t.as_ptr().cast());
            let hi = _mm_loadu_si128(t.as_ptr().add(16).cast());
            (
                _mm256_broadcastsi128_si256(lo),
                _mm256_broadcastsi128_si256(hi),
            )
        }
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn prep(v: V) -> X {
        let mask = _mm256_set1_epi8(0x0f);
        (
            _mm256_and_si256(v, mask),
            _mm256_and_si256(_mm256_srli_epi64::<4>(v), mask),
        )
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn mul(x: X, t: T) -> V {
        _mm256_xor_si256(_mm256_shuffle_epi8(t.0, x.0), _mm256_shuffle_epi8(t.1, x.1))
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn zero() -> V {
        _mm256_setzero_si256()
    }
    #[target_feature(enable = "avx2")]
    #[inline]
    fn xor(a: V, b: V) -> V {
        _mm256_xor_si256(a, b)
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn load(p: *const u8) -> V {
        // SAFETY: the caller guarantees W readable bytes at p.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn store(p: *mut u8, v: V) {
        // SAFETY: the caller guarantees W writable bytes at p.
        unsafe { _mm256_storeu_si256(p.cast(), v) }
    }

    simd_kernel!("avx2");
}

/// PSHUFB on 16-entry nibble tables, 64-byte vectors (ISA-L 2.30's AVX-512 method).
mod avx512 {
    use super::{CoefRow, MAX_INPUTS};
    use crate::gf::NIBBLE;
    use core::arch::x86_64::*;

    type V = __m512i;
    type X = (V, V);
    type T = (V, V);
    const W: usize = 64;
    const U: usize = 4;
    const U_FEW: usize = 4;

    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn table(c: u8) -> T {
        let t = &NIBBLE[c as usize];
        // SAFETY: `t` is 32 readable bytes; unaligned loads.
        unsafe {
            let lo = _mm_loadu_si128(t.as_ptr().cast());
            let hi = _mm_loadu_si128(t.as_ptr().add(16).cast());
            (_mm512_broadcast_i32x4(lo), _mm512_broadcast_i32x4(hi))
        }
    }
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn prep(v: V) -> X {
        let mask = _mm512_set1_epi8(0x0f);
        (
            _mm512_and_si512(v, mask),
            _mm512_and_si512(_mm512_srli_epi64::<4>(v), mask),
        )
    }
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn mul(x: X, t: T) -> V {
        _mm512_xor_si512(_mm512_shuffle_epi8(t.0, x.0), _mm512_shuffle_epi8(t.1, x.1))
    }
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn zero() -> V {
        _mm512_setzero_si512()
    }
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    fn xor(a: V, b: V) -> V {
        _mm512_xor_si512(a, b)
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn load(p: *const u8) -> V {
        // SAFETY: the caller guarantees W readable bytes at p.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f,avx512bw")]
    #[inline]
    unsafe fn store(p: *mut u8, v: V) {
        // SAFETY: the caller guarantees W writable bytes at p.
        unsafe { _mm512_storeu_si512(p.cast(), v) }
    }

    simd_kernel!("avx512f,avx512bw");
}

/// GF2P8AFFINEQB with a per-coefficient 8x8 bit matrix, 32-byte vectors.
mod gfni_avx2 {
    use super::{CoefRow, MAX_INPUTS};
    use crate::gf::AFFINE;
    use core::arch::x86_64::*;

    type V = __m256i;
    type X = V;
    type T = u64;
    const W: usize = 32;
    const U: usize = 2;
    const U_FEW: usize = 4;

    #[inline]
    fn table(c: u8) -> T {
        AFFINE[c as usize]
    }
    #[inline]
    fn prep(v: V) -> X {
        v
    }
    #[target_feature(enable = "avx2,gfni")]
    #[inline]
    fn mul(x: X, t: T) -> V {
        _mm256_gf2p8affine_epi64_epi8::<0>(x, _mm256_set1_epi64x(t as i64))
    }
    #[target_feature(enable = "avx2,gfni")]
    #[inline]
    fn zero() -> V {
        _mm256_setzero_si256()
    }
    #[target_feature(enable = "avx2,gfni")]
    #[inline]
    fn xor(a: V, b: V) -> V {
        _mm256_xor_si256(a, b)
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2,gfni")]
    #[inline]
    unsafe fn load(p: *const u8) -> V {
        // SAFETY: the caller guarantees W readable bytes at p.
        unsafe { _mm256_loadu_si256(p.cast()) }
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2,gfni")]
    #[inline]
    unsafe fn store(p: *mut u8, v: V) {
        // SAFETY: the caller guarantees W writable bytes at p.
        unsafe { _mm256_storeu_si256(p.cast(), v) }
    }

    simd_kernel!("avx2,gfni");
}

/// GF2P8AFFINEQB with a per-coefficient 8x8 bit matrix, 64-byte vectors.
mod gfni_avx512 {
    use super::{CoefRow, MAX_INPUTS};
    use crate::gf::AFFINE;
    use core::arch::x86_64::*;

    type V = __m512i;
    type X = V;
    type T = u64;
    const W: usize = 64;
    const U: usize = 4;
    const U_FEW: usize = 4;

    #[inline]
    fn table(c: u8) -> T {
        AFFINE[c as usize]
    }
    #[inline]
    fn prep(v: V) -> X {
        v
    }
    #[target_feature(enable = "avx512f,avx512bw,gfni")]
    #[inline]
    fn mul(x: X, t: T) -> V {
        _mm512_gf2p8affine_epi64_epi8::<0>(x, _mm512_set1_epi64(t as i64))
    }
    #[target_feature(enable = "avx512f,avx512bw,gfni")]
    #[inline]
    fn zero() -> V {
        _mm512_setzero_si512()
    }
    #[target_feature(enable = "avx512f,avx512bw,gfni")]
    #[inline]
    fn xor(a: V, b: V) -> V {
        _mm512_xor_si512(a, b)
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f,avx512bw,gfni")]
    #[inline]
    unsafe fn load(p: *const u8) -> V {
        // SAFETY: the caller guarantees W readable bytes at p.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx512f,avx512bw,gfni")]
    #[inline]
    unsafe fn store(p: *mut u8, v: V) {
        // SAFETY: the caller guarantees W writable bytes at p.
        unsafe { _mm512_storeu_si512(p.cast(), v) }
    }

    simd_kernel!("avx512f,avx512bw,gfni");
}
