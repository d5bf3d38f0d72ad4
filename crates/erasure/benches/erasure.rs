//! Erasure-coding throughput per core: every kernel of this crate side by side with ISA-L
//! (the system's libisal, loaded at run time; skipped with a message if absent) on the
//! same buffers and the same coding matrix, so their outputs are compared byte for byte.
//! ISA-L runs twice: as its dispatcher picks (`isa-l`) and forced to its AVX2 code
//! (`isa-l-avx2`), so the AVX2 kernel, all an AVX2-only CPU such as AMD EPYC before Zen 4
//! runs, is compared like for like on every machine.
//!
//! Ops: `encode` (all m parity shards), `decode` (rebuild 1 or m lost data shards from k
//! survivors, plan/matrix set-up included for us, excluded for ISA-L), `update`
//! (read-modify-write of one data shard into all parity shards; ISA-L needs an XOR pass
//! for the delta first, which is timed with it).
//! GB/s = 10^9 bytes of data (k x shard length; shard length for `update`) per second on
//! one thread, best batch of several.
//!
//! Output: JSON on stdout and in `<target>/bench/erasure.json` (or `ERASURE_BENCH_OUT`),
//! a table on stderr. `ERASURE_BENCH_QUICK=1` shortens every measurement;
//! `ERASURE_BENCH_KERNELS=a,b` limits our kernels to those named.
//!
//! Smoke run: `cargo test -p erasure` runs this binary too (`test = true`; cargo passes no
//! `--bench` then). It goes once through every code path, every kernel this CPU has and
//! both ISA-L variants, on small shards, checks every output and times nothing, so a
//! crash or a wrong byte here fails the test suite. A missing ISA-L is said plainly and
//! fails under `FERROBAY_REQUIRE_ALL=1` (`testkit::prereq`).

use std::ffi::{CStr, c_int, c_void};
use std::hint::black_box;
use std::ops::{Deref, DerefMut};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use erasure::{Kernel, PARITY_MATRIX, ReedSolomon};
use serde_json::{Value, json};

const GEOMETRIES: [(usize, usize); 3] = [(4, 2), (8, 2), (10, 4)];
const SHARD_SIZES: [usize; 2] = [1 << 20, 64 << 10];
/// The smoke run's shards: past every unrolled SIMD block, yet quick in a debug build.
const SMOKE_SHARD_SIZES: [usize; 2] = [64 << 10, 4 << 10];
/// Every buffer starts at a multiple of this. ISA-L's `xor_gen` needs 32 bytes (its AVX
/// code loads with `vmovdqa` and faults on anything less); a page suits everything.
const ALIGN: usize = 4096;
/// What ISA-L's documentation demands of the buffers it is given.
const ISAL_ALIGN_BYTES: usize = 32;
const _: () = assert!(ALIGN.is_multiple_of(ISAL_ALIGN_BYTES));
const BATCHES: usize = 9;

/// A measurement (`cargo bench`) or the smoke run (`cargo test`).
struct Mode {
    smoke: bool,
    quick: bool,
    target: Duration,
    batches: usize,
    shard_sizes: &'static [usize],
}

impl Mode {
    fn from_env() -> Mode {
        // cargo bench passes --bench; cargo test runs a harness = false target without it.
        if !std::env::args().any(|a| a == "--bench") {
            return Mode {
                smoke: true,
                quick: true,
                target: Duration::ZERO,
                batches: 1,
                shard_sizes: &SMOKE_SHARD_SIZES,
            };
        }
        let quick = std::env::var_os("ERASURE_BENCH_QUICK").is_some_and(|v| v != "0");
        Mode {
            smoke: false,
            quick,
            target: Duration::from_millis(if quick { 3 } else { 15 }),
            batches: BATCHES,
            shard_sizes: &SHARD_SIZES,
        }
    }
}

fn main() -> ExitCode {
    let mode = Mode::from_env();
    let isal = Isal::load();
    if let Err(why) = &isal {
        let why = format!("ISA-L not measured: {why} (install Debian's libisal-dev / libisal2)");
        if mode.smoke {
            testkit::prereq::missing(why);
        } else {
            eprintln!("{why}");
        }
    }
    let isal = isal.ok();
    if mode.smoke {
        for kernel in Kernel::ALL.into_iter().filter(|k| !k.is_available()) {
            testkit::prereq::missing_cpu_feature(format!("what the {kernel} kernel needs"));
        }
        if let Some(isal) = &isal
            && !isal.variants.iter().any(|v| v.name == ISAL_AVX2)
        {
            testkit::prereq::missing_cpu_feature(format!(
                "AVX2 (or {} lacks the AVX2 entry points): {ISAL_AVX2} not run",
                isal.name
            ));
        }
    }
    // `ERASURE_BENCH_KERNELS=gfni-avx512,avx2` measures only those (default: all available;
    // the smoke run always runs all).
    let only = std::env::var("ERASURE_BENCH_KERNELS")
        .ok()
        .filter(|_| !mode.smoke)
        .unwrap_or_default();
    let kernels: Vec<Kernel> = Kernel::available()
        .filter(|k| only.is_empty() || only.split(',').any(|n| n.trim() == k.name()))
        .collect();
    let mut rows = Vec::new();
    let mut failed = false;

    for &shard_bytes in mode.shard_sizes {
        for &(k, m) in &GEOMETRIES {
            let mut set = ShardSet::new(k, m, shard_bytes);
            let cases: Vec<(Op, usize)> = vec![
                (Op::Encode, 0),
                (Op::Decode, 1),
                (Op::Decode, m),
                (Op::Update, 0),
            ];
            for (op, lost) in cases {
                let mut impls: Vec<(String, f64)> = Vec::new();
                for &kernel in &kernels {
                    match measure_ours(&mut set, kernel, op, lost, &mode) {
                        Ok(gbps) => impls.push((kernel.name().to_string(), gbps)),
                        Err(e) => {
                            eprintln!("{k}+{m} {shard_bytes} {op:?} {kernel}: {e}");
                            failed = true;
                        }
                    }
                }
                for variant in isal.iter().flat_map(|i| &i.variants) {
                    let isal = isal.as_ref().expect("variants come from a loaded ISA-L");
                    match measure_isal(isal, variant, &mut set, op, lost, &mode) {
                        Ok(gbps) => impls.push((variant.name.to_string(), gbps)),
                        Err(e) => {
                            eprintln!("{k}+{m} {shard_bytes} {op:?} {}: {e}", variant.name);
                            failed = true;
                        }
                    }
                }
                let row = Row {
                    k,
                    m,
                    shard_bytes,
                    op,
                    lost,
                    impls,
                };
                if mode.smoke {
                    eprintln!("{}", row.smoke_line());
                } else {
                    eprintln!("{}", row.line());
                }
                rows.push(row);
            }
        }
    }

    if mode.smoke {
        // Nothing was timed: no report, and the last measurement's file stays.
        eprintln!(
            "erasure bench smoke run: {} kernels ({}) and {} ISA-L variants, every output checked: {}",
            kernels.len(),
            kernels
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
            isal.as_ref().map_or(0, |i| i.variants.len()),
            if failed { "FAILED" } else { "ok" }
        );
        return if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let quick = mode.quick;
    let report = json!({
        "bench": "erasure",
        "unit": "GB/s (1e9 bytes of data per second, one thread)",
        "cpu": cpu_model(),
        "kernels": kernels.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "best_kernel": Kernel::best().name(),
        "isal": isal.as_ref().map(|i| i.name.clone()),
        "isal_variants": isal.as_ref().map(|i| i.variants.iter().map(|v| v.name).collect::<Vec<_>>()),
        "isal_decode_setup_excluded": true,
        "quick": quick,
        "results": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default();
    println!("{text}");
    let path = output_path();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&path, text + "\n") {
        eprintln!("cannot write {}: {e}", path.display());
        failed = true;
    } else {
        eprintln!("wrote {}", path.display());
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Encode,
    Decode,
    Update,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Encode => "encode",
            Op::Decode => "decode",
            Op::Update => "update",
        }
    }
}

struct Row {
    k: usize,
    m: usize,
    shard_bytes: usize,
    op: Op,
    lost: usize,
    impls: Vec<(String, f64)>,
}

impl Row {
    fn best_ours(&self) -> Option<&(String, f64)> {
        self.impls
            .iter()
            .filter(|(n, _)| !n.starts_with("isa-l"))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The kernel `ReedSolomon::new` picks on this CPU.
    fn default_kernel(&self) -> Option<f64> {
        let name = Kernel::best().name();
        self.impls.iter().find(|(n, _)| n == name).map(|x| x.1)
    }

    fn gbps(&self, name: &str) -> Option<f64> {
        self.impls.iter().find(|(n, _)| n == name).map(|x| x.1)
    }

    fn isal(&self) -> Option<f64> {
        self.gbps(ISAL_DISPATCH)
    }

    /// Default kernel over ISA-L.
    fn ratio(&self) -> Option<f64> {
        Some(self.default_kernel()? / self.isal()?)
    }

    /// Our AVX2 kernel over ISA-L's AVX2 code.
    fn ratio_avx2(&self) -> Option<f64> {
        Some(self.gbps(Kernel::Avx2.name())? / self.gbps(ISAL_AVX2)?)
    }

    fn label(&self) -> String {
        let size = if self.shard_bytes >= 1 << 20 {
            format!("{}MiB", self.shard_bytes >> 20)
        } else {
            format!("{}KiB", self.shard_bytes >> 10)
        };
        let op = match self.op {
            Op::Decode => format!("decode-{}", self.lost),
            op => op.name().to_string(),
        };
        format!("{}+{} {size:>5} {op:<9}", self.k, self.m)
    }

    fn line(&self) -> String {
        let cells: Vec<String> = self
            .impls
            .iter()
            .map(|(n, g)| format!("{n} {g:6.2}"))
            .collect();
        let ratio = self.ratio().map_or(String::new(), |r| {
            format!("  {}/{ISAL_DISPATCH} {r:.2}", Kernel::best())
        });
        let ratio_avx2 = self.ratio_avx2().map_or(String::new(), |r| {
            format!("  {}/{ISAL_AVX2} {r:.2}", Kernel::Avx2)
        });
        format!(
            "{:<24} {}{ratio}{ratio_avx2}",
            self.label(),
            cells.join("  ")
        )
    }

    /// What ran, without the meaningless speeds of a debug build.
    fn smoke_line(&self) -> String {
        let names: Vec<&str> = self.impls.iter().map(|(n, _)| n.as_str()).collect();
        format!("{:<24} checked: {}", self.label(), names.join(" "))
    }

    fn json(&self) -> Value {
        let best = self.best_ours();
        json!({
            "k": self.k,
            "m": self.m,
            "shard_bytes": self.shard_bytes,
            "op": self.op.name(),
            "lost": self.lost,
            "gbps": self.impls.iter().map(|(n, g)| (n.clone(), json!(round(*g)))).collect::<serde_json::Map<_, _>>(),
            "default_kernel": Kernel::best().name(),
            "default_gbps": self.default_kernel().map(round),
            "fastest_ours": best.map(|b| b.0.clone()),
            "fastest_ours_gbps": best.map(|b| round(b.1)),
            "isal_gbps": self.isal().map(round),
            "ratio_default_over_isal": self.ratio().map(round),
            "ratio_avx2_over_isal_avx2": self.ratio_avx2().map(round),
        })
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A zeroed heap buffer that starts at a multiple of [`ALIGN`]: what every buffer handed
/// to ISA-L must be (a `Vec<u8>` is only 16-byte aligned by malloc).
struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> AlignedBuf {
        let raw = vec![0u8; len + ALIGN];
        let start = raw.as_ptr().align_offset(ALIGN);
        assert!(start < ALIGN, "cannot align a heap buffer");
        AlignedBuf { raw, start, len }
    }

    fn copy_of(data: &[u8]) -> AlignedBuf {
        let mut buf = AlignedBuf::zeroed(data.len());
        buf.copy_from_slice(data);
        buf
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// k + m shards in one 4 KiB-aligned allocation, plus reference copies and scratch.
struct ShardSet {
    k: usize,
    m: usize,
    len: usize,
    stride: usize,
    buf: Vec<u8>,
    base: usize,
    /// The correct content of every shard (data, then parity).
    expected: Vec<Vec<u8>>,
    /// Replacement content of data shard 0 for `update`, and the ISA-L delta buffer.
    new_data: AlignedBuf,
    delta: AlignedBuf,
}

impl ShardSet {
    fn new(k: usize, m: usize, len: usize) -> ShardSet {
        let stride = len.div_ceil(ALIGN) * ALIGN;
        let buf = vec![0u8; stride * (k + m) + ALIGN];
        let base = buf.as_ptr().align_offset(ALIGN);
        let mut set = ShardSet {
            k,
            m,
            len,
            stride,
            buf,
            base,
            expected: Vec::new(),
            new_data: AlignedBuf::zeroed(len),
            delta: AlignedBuf::zeroed(len),
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (k * 31 + m) as u64;
        for i in 0..k {
            for b in set.shard_mut(i).iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        for b in set.new_data.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let rs = ReedSolomon::with_kernel(k, m, Kernel::Scalar).expect("geometry");
        let data: Vec<Vec<u8>> = (0..k).map(|i| set.shard(i).to_vec()).collect();
        let mut parity = vec![vec![0u8; len]; m];
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        rs.encode(&refs, &mut outs).expect("encode");
        set.expected = data.into_iter().chain(parity).collect();
        set.restore();
        set
    }

    fn shard(&self, i: usize) -> &[u8] {
        let start = self.base + i * self.stride;
        &self.buf[start..start + self.len]
    }

    fn shard_mut(&mut self, i: usize) -> &mut [u8] {
        let start = self.base + i * self.stride;
        &mut self.buf[start..start + self.len]
    }

    /// Puts the correct content back into every shard.
    fn restore(&mut self) {
        for i in 0..self.k + self.m {
            let e = std::mem::take(&mut self.expected[i]);
            self.shard_mut(i).copy_from_slice(&e);
            self.expected[i] = e;
        }
    }

    fn all_mut(&mut self) -> Vec<&mut [u8]> {
        let (len, stride) = (self.len, self.stride);
        let region = &mut self.buf[self.base..self.base + stride * (self.k + self.m)];
        region.chunks_mut(stride).map(|c| &mut c[..len]).collect()
    }

    fn corrupt(&mut self, lost: usize) {
        for i in 0..lost {
            self.shard_mut(i).fill(0xEE);
        }
    }

    fn check(&self, what: &str) -> Result<(), String> {
        for (i, e) in self.expected.iter().enumerate() {
            if self.shard(i) != &e[..] {
                return Err(format!("{what}: shard {i} differs from the reference"));
            }
        }
        Ok(())
    }
}

/// Runs `op` in BATCHES batches of about `target` each; returns the best seconds per call
/// (the machine is shared: the fastest batch is the one least disturbed).
fn time_best(mode: &Mode, mut op: impl FnMut()) -> f64 {
    let target = mode.target;
    op();
    let mut iters = 1u32;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            op();
        }
        if t.elapsed() >= target / 4 || iters >= 1 << 20 {
            break;
        }
        iters *= 2;
    }
    let once = {
        let t = Instant::now();
        for _ in 0..iters {
            op();
        }
        t.elapsed().as_secs_f64() / f64::from(iters)
    };
    let iters = ((target.as_secs_f64() / once).ceil() as u32).max(1);
    (0..mode.batches)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iters {
                op();
            }
            t.elapsed().as_secs_f64() / f64::from(iters)
        })
        .fold(f64::INFINITY, f64::min)
}

fn data_bytes(set: &ShardSet, op: Op) -> f64 {
    match op {
        Op::Update => set.len as f64,
        _ => (set.k * set.len) as f64,
    }
}

fn measure_ours(
    set: &mut ShardSet,
    kernel: Kernel,
    op: Op,
    lost: usize,
    mode: &Mode,
) -> Result<f64, String> {
    let (k, m) = (set.k, set.m);
    let rs = ReedSolomon::with_kernel(k, m, kernel).map_err(|e| e.to_string())?;
    set.restore();
    let secs = match op {
        Op::Encode => {
            for i in k..k + m {
                set.shard_mut(i).fill(0);
            }
            let mut shards = set.all_mut();
            let secs = time_best(mode, || {
                rs.encode_in_place(black_box(&mut shards)).expect("encode");
            });
            drop(shards);
            set.check("encode")?;
            secs
        }
        Op::Decode => {
            let mut present = vec![true; k + m];
            present[..lost].iter_mut().for_each(|p| *p = false);
            set.corrupt(lost);
            let mut shards = set.all_mut();
            let secs = time_best(mode, || {
                rs.reconstruct(black_box(&mut shards), &present)
                    .expect("reconstruct");
            });
            drop(shards);
            set.check("decode")?;
            secs
        }
        Op::Update => {
            // Alternate old -> new -> old so that each call is a real change.
            let old = AlignedBuf::copy_of(&set.expected[0]);
            let new = AlignedBuf::copy_of(&set.new_data);
            let mut shards = set.all_mut();
            let (_, parity) = shards.split_at_mut(k);
            let mut flip = false;
            let secs = time_best(mode, || {
                let (from, to) = if flip { (&new, &old) } else { (&old, &new) };
                rs.update_parity(0, from, to, black_box(parity))
                    .expect("update");
                flip = !flip;
            });
            if flip {
                rs.update_parity(0, &new, &old, parity).expect("update");
            }
            drop(shards);
            set.check("update")?;
            secs
        }
    };
    Ok(data_bytes(set, op) / secs / 1e9)
}

fn measure_isal(
    isal: &Isal,
    variant: &IsalVariant,
    set: &mut ShardSet,
    op: Op,
    lost: usize,
    mode: &Mode,
) -> Result<f64, String> {
    let (k, m, len) = (set.k, set.m, set.len);
    // Our coding matrix in ISA-L's layout: (k + m) x k, identity on top.
    let mut matrix = vec![0u8; (k + m) * k];
    for i in 0..k {
        matrix[i * k + i] = 1;
    }
    for j in 0..m {
        matrix[(k + j) * k..(k + j + 1) * k].copy_from_slice(&PARITY_MATRIX[j][..k]);
    }
    set.restore();
    let secs = match op {
        Op::Encode => {
            let tables = isal.init_tables(k, m, &matrix[k * k..]);
            for i in k..k + m {
                set.shard_mut(i).fill(0);
            }
            let mut shards = set.all_mut();
            let (data, parity) = shards.split_at_mut(k);
            let srcs: Vec<*const u8> = data.iter().map(|s| s.as_ptr()).collect();
            let dsts: Vec<*mut u8> = parity.iter_mut().map(|s| s.as_mut_ptr()).collect();
            let secs = time_best(mode, || {
                isal.encode(variant, len, k, m, &tables, &srcs, &dsts)
            });
            drop(shards);
            set.check(&format!("{} encode", variant.name))?;
            secs
        }
        Op::Decode => {
            // Survivors: the first k present shards; decode rows: inverse of their rows.
            let survivors: Vec<usize> = (lost..lost + k).collect();
            let mut sub = Vec::with_capacity(k * k);
            for &s in &survivors {
                sub.extend_from_slice(&matrix[s * k..(s + 1) * k]);
            }
            let inverse = isal.invert(&mut sub, k).ok_or("singular decode matrix")?;
            let rows: Vec<u8> = (0..lost)
                .flat_map(|e| inverse[e * k..(e + 1) * k].to_vec())
                .collect();
            let tables = isal.init_tables(k, lost, &rows);
            set.corrupt(lost);
            let mut shards = set.all_mut();
            let (lost_shards, rest) = shards.split_at_mut(lost);
            let srcs: Vec<*const u8> = rest[..k].iter().map(|s| s.as_ptr()).collect();
            let dsts: Vec<*mut u8> = lost_shards.iter_mut().map(|s| s.as_mut_ptr()).collect();
            let secs = time_best(mode, || {
                isal.encode(variant, len, k, lost, &tables, &srcs, &dsts)
            });
            drop(shards);
            set.check(&format!("{} decode", variant.name))?;
            secs
        }
        Op::Update => {
            let tables = isal.init_tables(k, m, &matrix[k * k..]);
            let old = AlignedBuf::copy_of(&set.expected[0]);
            let new = AlignedBuf::copy_of(&set.new_data);
            let mut delta = std::mem::replace(&mut set.delta, AlignedBuf::zeroed(0));
            let mut shards = set.all_mut();
            let dsts: Vec<*mut u8> = shards[k..].iter_mut().map(|s| s.as_mut_ptr()).collect();
            let mut flip = false;
            let mut step = |flip: bool| {
                let (from, to) = if flip { (&new, &old) } else { (&old, &new) };
                isal.xor(variant, from, to, &mut delta);
                isal.update(variant, len, k, m, 0, &tables, &delta, &dsts);
            };
            let secs = time_best(mode, || {
                step(flip);
                flip = !flip;
            });
            if flip {
                step(true);
            }
            drop(shards);
            set.delta = delta;
            set.check(&format!("{} update", variant.name))?;
            secs
        }
    };
    Ok(data_bytes(set, op) / secs / 1e9)
}

type InitTables = unsafe extern "C" fn(c_int, c_int, *const u8, *mut u8);
type EncodeData =
    unsafe extern "C" fn(c_int, c_int, c_int, *const u8, *const *const u8, *const *mut u8);
type EncodeUpdate =
    unsafe extern "C" fn(c_int, c_int, c_int, c_int, *const u8, *const u8, *const *mut u8);
type InvertMatrix = unsafe extern "C" fn(*mut u8, *mut u8, c_int) -> c_int;
type XorGen = unsafe extern "C" fn(c_int, c_int, *const *mut c_void) -> c_int;

/// ISA-L as its dispatcher picks the code for this CPU.
const ISAL_DISPATCH: &str = "isa-l";
/// ISA-L's AVX2 code (`xor_gen_avx` for the XOR), what it runs on an AVX2-only CPU.
const ISAL_AVX2: &str = "isa-l-avx2";

/// The few ISA-L entry points the benchmark needs, resolved with dlopen so that the
/// benchmark builds and runs (without ISA-L) where the library is not installed.
struct Isal {
    name: String,
    init_tables: InitTables,
    invert_matrix: InvertMatrix,
    /// The dispatcher's entry points, then the AVX2 ones where this CPU has AVX2.
    variants: Vec<IsalVariant>,
}

/// One implementation of the coding entry points.
struct IsalVariant {
    name: &'static str,
    encode_data: EncodeData,
    encode_update: EncodeUpdate,
    xor_gen: XorGen,
}

impl Isal {
    #[allow(unsafe_code)]
    fn load() -> Result<Isal, String> {
        for name in [c"libisal.so.2", c"libisal.so"] {
            // SAFETY: dlopen with a valid C string; the handle is never closed, so the
            // resolved symbols stay valid for the life of the process.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                continue;
            }
            let sym = |s: &CStr| -> Result<*mut c_void, String> {
                // SAFETY: valid handle and C string.
                let p = unsafe { libc::dlsym(handle, s.as_ptr()) };
                if p.is_null() {
                    Err(format!(
                        "{} lacks {}",
                        name.to_string_lossy(),
                        s.to_string_lossy()
                    ))
                } else {
                    Ok(p)
                }
            };
            let variant = |name: &'static str,
                           [encode, update, xor]: [&CStr; 3]|
             -> Result<IsalVariant, String> {
                // SAFETY: the symbols are ISA-L's public functions with exactly these C
                // signatures (isa-l/erasure_code.h and raid.h, ISA-L 2.x ABI; the
                // `_avx2`/`_avx` ones have the same signatures as the dispatchers).
                Ok(unsafe {
                    IsalVariant {
                        name,
                        encode_data: std::mem::transmute::<*mut c_void, EncodeData>(sym(encode)?),
                        encode_update: std::mem::transmute::<*mut c_void, EncodeUpdate>(sym(
                            update,
                        )?),
                        xor_gen: std::mem::transmute::<*mut c_void, XorGen>(sym(xor)?),
                    }
                })
            };
            let mut variants = vec![variant(
                ISAL_DISPATCH,
                [c"ec_encode_data", c"ec_encode_data_update", c"xor_gen"],
            )?];
            // The AVX2 code only where the CPU runs it; a library built without it is
            // reported by the caller (the variant is missing).
            if std::arch::is_x86_feature_detected!("avx2")
                && let Ok(v) = variant(
                    ISAL_AVX2,
                    [
                        c"ec_encode_data_avx2",
                        c"ec_encode_data_update_avx2",
                        c"xor_gen_avx",
                    ],
                )
            {
                variants.push(v);
            }
            // SAFETY: as above (isa-l/erasure_code.h).
            return unsafe {
                Ok(Isal {
                    name: name.to_string_lossy().into_owned(),
                    init_tables: std::mem::transmute::<*mut c_void, InitTables>(sym(
                        c"ec_init_tables",
                    )?),
                    invert_matrix: std::mem::transmute::<*mut c_void, InvertMatrix>(sym(
                        c"gf_invert_matrix",
                    )?),
                    variants,
                })
            };
        }
        Err("libisal.so.2 / libisal.so not found".to_string())
    }

    /// Expanded multiplication tables for a rows x k coefficient matrix.
    #[allow(unsafe_code)]
    fn init_tables(&self, k: usize, rows: usize, coefs: &[u8]) -> AlignedBuf {
        assert!(coefs.len() >= k * rows);
        let mut tables = AlignedBuf::zeroed(32 * k * rows);
        // SAFETY: ISA-L reads k * rows coefficients and writes 32 * k * rows bytes.
        unsafe {
            (self.init_tables)(
                k as c_int,
                rows as c_int,
                coefs.as_ptr(),
                tables.as_mut_ptr(),
            )
        };
        tables
    }

    #[allow(unsafe_code, clippy::too_many_arguments)]
    fn encode(
        &self,
        variant: &IsalVariant,
        len: usize,
        k: usize,
        rows: usize,
        tables: &[u8],
        srcs: &[*const u8],
        dsts: &[*mut u8],
    ) {
        assert!(srcs.len() == k && dsts.len() == rows && tables.len() >= 32 * k * rows);
        assert_isal_aligned("tables", [tables.as_ptr()]);
        assert_isal_aligned("sources", srcs.iter().copied());
        assert_isal_aligned("outputs", dsts.iter().map(|p| p.cast_const()));
        // SAFETY: k source and `rows` destination buffers of `len` bytes each (the caller
        // derives them from live, disjoint slices), tables from init_tables(k, rows).
        unsafe {
            (variant.encode_data)(
                len as c_int,
                k as c_int,
                rows as c_int,
                tables.as_ptr(),
                srcs.as_ptr(),
                dsts.as_ptr(),
            )
        }
    }

    #[allow(unsafe_code, clippy::too_many_arguments)]
    fn update(
        &self,
        variant: &IsalVariant,
        len: usize,
        k: usize,
        rows: usize,
        index: usize,
        tables: &[u8],
        delta: &[u8],
        dsts: &[*mut u8],
    ) {
        assert!(
            dsts.len() == rows && delta.len() == len && index < k && tables.len() >= 32 * k * rows
        );
        assert_isal_aligned("tables", [tables.as_ptr()]);
        assert_isal_aligned("delta", [delta.as_ptr()]);
        assert_isal_aligned("outputs", dsts.iter().map(|p| p.cast_const()));
        // SAFETY: as `encode`, with one source of `len` bytes.
        unsafe {
            (variant.encode_update)(
                len as c_int,
                k as c_int,
                rows as c_int,
                index as c_int,
                tables.as_ptr(),
                delta.as_ptr(),
                dsts.as_ptr(),
            )
        }
    }

    /// out = a ^ b with ISA-L's xor_gen.
    #[allow(unsafe_code)]
    fn xor(&self, variant: &IsalVariant, a: &[u8], b: &[u8], out: &mut [u8]) {
        assert!(a.len() == out.len() && b.len() == out.len());
        assert_isal_aligned("xor buffers", [a.as_ptr(), b.as_ptr(), out.as_ptr()]);
        let vects = [
            a.as_ptr() as *mut c_void,
            b.as_ptr() as *mut c_void,
            out.as_mut_ptr().cast(),
        ];
        // SAFETY: three buffers of out.len() bytes, 32-byte aligned as raid.h requires
        // (xor_gen_avx faults otherwise); xor_gen only reads the first two.
        unsafe { (variant.xor_gen)(3, out.len() as c_int, vects.as_ptr()) };
    }

    #[allow(unsafe_code)]
    fn invert(&self, matrix: &mut [u8], n: usize) -> Option<Vec<u8>> {
        assert!(matrix.len() == n * n);
        let mut out = vec![0u8; n * n];
        // SAFETY: two n x n matrices.
        let rc = unsafe { (self.invert_matrix)(matrix.as_mut_ptr(), out.as_mut_ptr(), n as c_int) };
        (rc == 0).then_some(out)
    }
}

/// ISA-L's alignment rule, checked here so that a buffer that breaks it fails with a
/// message on every CPU, not only with a fault on the ones whose code path needs it.
fn assert_isal_aligned(what: &str, ptrs: impl IntoIterator<Item = *const u8>) {
    for p in ptrs {
        assert!(
            (p as usize).is_multiple_of(ISAL_ALIGN_BYTES),
            "ISA-L {what} at {p:p} are not {ISAL_ALIGN_BYTES}-byte aligned"
        );
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_default()
}

/// `ERASURE_BENCH_OUT`, else `<target>/bench/erasure.json`.
fn output_path() -> PathBuf {
    if let Some(p) = std::env::var_os("ERASURE_BENCH_OUT").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent()
        .map_or_else(|| tmp.clone(), PathBuf::from)
        .join("bench")
        .join("erasure.json")
}
