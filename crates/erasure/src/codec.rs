//! The public Reed-Solomon code: validation, coefficient bookkeeping, kernel calls.

use crate::error::ErasureError;
use crate::gf;
use crate::kernel::{self, CoefRow, Kernel, MAX_INPUTS, MAX_OUTPUTS};
use crate::matrix::{self, MAX_DATA_SHARDS, MAX_PARITY_SHARDS, PARITY_MATRIX};

/// A systematic k+m Reed-Solomon code over GF(2^8) (see the crate docs for the matrix).
///
/// Shards are indexed `0..k` (data) then `k..k + m` (parity: P, Q, then two more rows).
/// All shards of one call have the same length, which may be any number of bytes; the
/// kernels are fastest on multiples of 64 (the remainder runs on the scalar path).
/// Encode, reconstruct and update never allocate; the struct is small and `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReedSolomon {
    data_shards: usize,
    parity_shards: usize,
    kernel: Kernel,
}

const MAX_SHARDS: usize = MAX_DATA_SHARDS + MAX_PARITY_SHARDS;
const _: () = assert!(MAX_INPUTS >= MAX_DATA_SHARDS && MAX_OUTPUTS >= MAX_PARITY_SHARDS);
const _: () = assert!(MAX_SHARDS <= 64, "shard sets are u64 masks");

impl ReedSolomon {
    /// A k+m code using the fastest kernel of this CPU.
    pub fn new(data_shards: usize, parity_shards: usize) -> Result<Self, ErasureError> {
        Self::with_kernel(data_shards, parity_shards, Kernel::best())
    }

    /// A k+m code using `kernel`, which must be available on this CPU.
    pub fn with_kernel(
        data_shards: usize,
        parity_shards: usize,
        kernel: Kernel,
    ) -> Result<Self, ErasureError> {
        if !(1..=MAX_DATA_SHARDS).contains(&data_shards)
            || !(1..=MAX_PARITY_SHARDS).contains(&parity_shards)
        {
            return Err(ErasureError::UnsupportedGeometry {
                data: data_shards,
                parity: parity_shards,
            });
        }
        if !kernel.is_available() {
            return Err(ErasureError::KernelUnavailable(kernel));
        }
        Ok(ReedSolomon {
            data_shards,
            parity_shards,
            kernel,
        })
    }

    /// k.
    pub fn data_shards(&self) -> usize {
        self.data_shards
    }

    /// m.
    pub fn parity_shards(&self) -> usize {
        self.parity_shards
    }

    /// k + m.
    pub fn total_shards(&self) -> usize {
        self.data_shards + self.parity_shards
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The coefficient of data shard `data` in parity shard `parity` (0 = P, 1 = Q, ...).
    pub fn coefficient(&self, parity: usize, data: usize) -> Option<u8> {
        (parity < self.parity_shards && data < self.data_shards)
            .then(|| PARITY_MATRIX[parity][data])
    }

    /// Computes all m parity shards from the k data shards.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), ErasureError> {
        check_count("data shards", self.data_shards, data.len())?;
        check_count("parity shards", self.parity_shards, parity.len())?;
        let len = data[0].len();
        check_lengths(len, data.iter().map(|s| s.len()).enumerate())?;
        check_lengths(
            len,
            parity
                .iter()
                .map(|s| s.len())
                .enumerate()
                .map(|(i, l)| (self.data_shards + i, l)),
        )?;
        kernel::dot(
            self.kernel,
            &PARITY_MATRIX[..self.parity_shards],
            data,
            parity,
            false,
        );
        Ok(())
    }

    /// [`encode`](Self::encode) on one slice of k + m shards (data first).
    pub fn encode_in_place(&self, shards: &mut [&mut [u8]]) -> Result<(), ErasureError> {
        check_count("shards", self.total_shards(), shards.len())?;
        let (data, parity) = shards.split_at_mut(self.data_shards);
        let mut inputs: [&[u8]; MAX_DATA_SHARDS] = [&[]; MAX_DATA_SHARDS];
        for (slot, shard) in inputs.iter_mut().zip(data.iter()) {
            *slot = shard;
        }
        self.encode(&inputs[..self.data_shards], parity)
    }

    /// Whether the parity shards match the data; `scratch` holds m buffers of the shard
    /// length and is overwritten with the expected parity.
    pub fn verify(
        &self,
        shards: &[&[u8]],
        scratch: &mut [&mut [u8]],
    ) -> Result<bool, ErasureError> {
        check_count("shards", self.total_shards(), shards.len())?;
        let (data, parity) = shards.split_at(self.data_shards);
        self.encode(data, scratch)?;
        check_lengths(
            data[0].len(),
            parity
                .iter()
                .map(|s| s.len())
                .enumerate()
                .map(|(i, l)| (self.data_shards + i, l)),
        )?;
        Ok(parity.iter().zip(scratch.iter()).all(|(p, s)| p == s))
    }

    /// Rebuilds every shard whose `present` entry is false, from the present ones.
    /// `shards` holds k + m buffers of one length; at most m may be missing.
    pub fn reconstruct(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
    ) -> Result<(), ErasureError> {
        self.reconstruct_inner(shards, present, None)
    }

    /// Rebuilds only the missing shards listed in `wanted` (present ones listed there are
    /// left alone). Buffers of missing shards that are not wanted are not touched and may
    /// have any length (e.g. empty).
    pub fn reconstruct_some(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
        wanted: &[usize],
    ) -> Result<(), ErasureError> {
        self.reconstruct_inner(shards, present, Some(wanted))
    }

    /// Read-modify-write: data shard `data_index` changes from `old_data` to `new_data`;
    /// brings all m `parity` shards up to date (`parity_j ^= C[j][i] * (old ^ new)`)
    /// without reading the other data shards.
    pub fn update_parity(
        &self,
        data_index: usize,
        old_data: &[u8],
        new_data: &[u8],
        parity: &mut [&mut [u8]],
    ) -> Result<(), ErasureError> {
        if data_index >= self.data_shards {
            return Err(ErasureError::IndexOutOfRange {
                index: data_index,
                shards: self.data_shards,
            });
        }
        check_count("parity shards", self.parity_shards, parity.len())?;
        let len = old_data.len();
        check_lengths(len, [(data_index, new_data.len())].into_iter())?;
        check_lengths(
            len,
            parity
                .iter()
                .map(|s| s.len())
                .enumerate()
                .map(|(i, l)| (self.data_shards + i, l)),
        )?;
        // c * old ^ c * new = c * (old ^ new): two multiplies, no delta buffer.
        let mut coefs = [[0u8; MAX_INPUTS]; MAX_OUTPUTS];
        for (row, matrix_row) in coefs
            .iter_mut()
            .zip(&PARITY_MATRIX)
            .take(self.parity_shards)
        {
            row[0] = matrix_row[data_index];
            row[1] = matrix_row[data_index];
        }
        kernel::dot(
            self.kernel,
            &coefs[..self.parity_shards],
            &[old_data, new_data],
            parity,
            true,
        );
        Ok(())
    }

    fn reconstruct_inner(
        &self,
        shards: &mut [&mut [u8]],
        present: &[bool],
        wanted: Option<&[usize]>,
    ) -> Result<(), ErasureError> {
        let (k, n) = (self.data_shards, self.total_shards());
        check_count("shards", n, shards.len())?;
        check_count("present flags", n, present.len())?;
        let present_mask = mask_of(present.iter().copied());
        let missing_mask = !present_mask & low_bits(n);
        let missing = missing_mask.count_ones() as usize;
        if missing > self.parity_shards {
            return Err(ErasureError::TooManyMissing {
                missing,
                max: self.parity_shards,
            });
        }
        let wanted_mask = match wanted {
            None => missing_mask,
            Some(list) => {
                let mut m = 0u64;
                for &index in list {
                    if index >= n {
                        return Err(ErasureError::IndexOutOfRange { index, shards: n });
                    }
                    m |= 1 << index;
                }
                m & missing_mask
            }
        };
        let Some(first_present) = present.iter().position(|&p| p) else {
            return Err(ErasureError::TooManyMissing { missing, max: 0 });
        };
        let len = shards[first_present].len();
        check_lengths(
            len,
            shards
                .iter()
                .enumerate()
                .filter(|&(i, _)| (present_mask | wanted_mask) & (1 << i) != 0)
                .map(|(i, s)| (i, s.len())),
        )?;
        if wanted_mask == 0 {
            return Ok(());
        }

        let plan = DecodePlan::new(k, n, present_mask, wanted_mask);
        let mut inputs: [&[u8]; MAX_INPUTS] = [&[]; MAX_INPUTS];
        let mut outputs: [&mut [u8]; MAX_OUTPUTS] = Default::default();
        let (mut ni, mut no) = (0, 0);
        for (i, shard) in shards.iter_mut().enumerate() {
            if plan.input_mask & (1 << i) != 0 {
                inputs[ni] = shard;
                ni += 1;
            } else if wanted_mask & (1 << i) != 0 {
                outputs[no] = shard;
                no += 1;
            }
        }
        kernel::dot(
            self.kernel,
            &plan.coefs[..no],
            &inputs[..ni],
            &mut outputs[..no],
            false,
        );
        Ok(())
    }
}

/// Which survivors to read and with which coefficients, for one erasure pattern.
struct DecodePlan {
    /// Shards read, in index order (the kernel's input order).
    input_mask: u64,
    /// One row per wanted shard in index order, one column per input.
    coefs: [CoefRow; MAX_OUTPUTS],
}

impl DecodePlan {
    /// Requires at most m shards missing, so that the chosen parity rows exist.
    fn new(k: usize, n: usize, present_mask: u64, wanted_mask: u64) -> DecodePlan {
        // Unknowns: the erased data shards. Equations: the first e present parity rows
        // (P first, so a single lost data shard is rebuilt by XOR).
        let erased: Indices = (0..k).filter(|&i| present_mask & (1 << i) == 0).collect();
        let rows: Indices = (k..n)
            .filter(|&i| present_mask & (1 << i) != 0)
            .take(erased.len)
            .map(|i| i - k)
            .collect();
        let e = erased.len;

        // B = A^-1 with A[b][a] = C[rows[b]][erased[a]]; the MDS property makes A invertible.
        let mut b = [[0u8; MAX_PARITY_SHARDS]; MAX_PARITY_SHARDS];
        for (r, row) in b.iter_mut().enumerate().take(e) {
            for (a, cell) in row.iter_mut().enumerate().take(e) {
                *cell = PARITY_MATRIX[rows.at(r)][erased.at(a)];
            }
        }
        let invertible = matrix::invert_small(&mut b, e);
        debug_assert!(invertible, "the parity matrix is MDS");

        // Rebuilt data shard erased[a], as coefficients over all shards (index order):
        // D = sum_b B[a][b] * (P_rows[b] + sum_{present data i} C[rows[b]][i] * D_i).
        let mut data_coefs = [[0u8; MAX_SHARDS]; MAX_PARITY_SHARDS];
        for (a, dc) in data_coefs.iter_mut().enumerate().take(e) {
            for r in 0..e {
                let f = b[a][r];
                dc[k + rows.at(r)] ^= f;
                for i in (0..k).filter(|&i| present_mask & (1 << i) != 0) {
                    dc[i] ^= gf::mul(f, PARITY_MATRIX[rows.at(r)][i]);
                }
            }
        }

        // One row per wanted shard, over all shard indices.
        let mut full = [[0u8; MAX_SHARDS]; MAX_OUTPUTS];
        let mut out = 0;
        for w in (0..n).filter(|&i| wanted_mask & (1 << i) != 0) {
            if w < k {
                let a = erased.position(w);
                full[out] = data_coefs[a];
            } else {
                // P_w = sum over present data C[w][i] D_i + sum over erased C[w][j] D_j.
                let row = &PARITY_MATRIX[w - k];
                for i in (0..k).filter(|&i| present_mask & (1 << i) != 0) {
                    full[out][i] ^= row[i];
                }
                for a in 0..e {
                    let c = row[erased.at(a)];
                    for (f, &d) in full[out].iter_mut().zip(&data_coefs[a]) {
                        *f ^= gf::mul(c, d);
                    }
                }
            }
            out += 1;
        }

        // Read only shards with a nonzero coefficient somewhere.
        let mut input_mask = 0u64;
        for row in &full[..out] {
            for (i, &c) in row.iter().enumerate().take(n) {
                if c != 0 {
                    input_mask |= 1 << i;
                }
            }
        }
        let mut coefs = [[0u8; MAX_INPUTS]; MAX_OUTPUTS];
        for (dst, src) in coefs.iter_mut().zip(&full[..out]) {
            let mut col = 0;
            for (i, &c) in src.iter().enumerate().take(n) {
                if input_mask & (1 << i) != 0 {
                    dst[col] = c;
                    col += 1;
                }
            }
        }
        debug_assert!(input_mask.count_ones() as usize <= k);
        DecodePlan { input_mask, coefs }
    }
}

/// A few shard indices on the stack (at most MAX_PARITY_SHARDS).
struct Indices {
    items: [usize; MAX_PARITY_SHARDS],
    len: usize,
}

impl Indices {
    fn at(&self, i: usize) -> usize {
        self.items[i]
    }
    fn position(&self, value: usize) -> usize {
        self.items[..self.len]
            .iter()
            .position(|&v| v == value)
            .unwrap_or(0)
    }
}

impl FromIterator<usize> for Indices {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut items = [0; MAX_PARITY_SHARDS];
        let mut len = 0;
        for v in iter.into_iter().take(MAX_PARITY_SHARDS) {
            items[len] = v;
            len += 1;
        }
        Indices { items, len }
    }
}

fn mask_of(bits: impl Iterator<Item = bool>) -> u64 {
    bits.enumerate()
        .fold(0, |m, (i, b)| if b { m | 1 << i } else { m })
}

fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1 << n) - 1 }
}

fn check_count(what: &'static str, expected: usize, actual: usize) -> Result<(), ErasureError> {
    if expected == actual {
        Ok(())
    } else {
        Err(ErasureError::ShardCount {
            what,
            expected,
            actual,
        })
    }
}

fn check_lengths(
    expected_bytes: usize,
    lengths: impl Iterator<Item = (usize, usize)>,
) -> Result<(), ErasureError> {
    for (index, actual_bytes) in lengths {
        if actual_bytes != expected_bytes {
            return Err(ErasureError::ShardLength {
                index,
                expected_bytes,
                actual_bytes,
            });
        }
    }
    Ok(())
}
