//! Reproducible compressible data for the compression figures: four corpora generated
//! from a fixed seed (xorshift64*), so every run and every machine sees the same bytes.
//!
//! - `text`: English-like prose: words from a 64-word vocabulary picked with a skewed
//!   (squared-uniform) distribution, sentences of 6-18 words, paragraphs.
//! - `json`: one JSON object per line: id, user, timestamp, status, tags, score, path.
//! - `logs`: syslog-like lines of a storage daemon with key=value fields.
//! - `db`: 8 KiB database pages: a 24-byte header, a slot array, fixed-width rows (ids,
//!   counters, a 24-byte name, a status byte) growing from the end, zeroed free space.

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Skewed towards 0: a few values are common, as words in prose.
    fn skewed(&mut self, n: u64) -> u64 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((u * u) * n as f64) as u64
    }
}

const WORDS: [&str; 64] = [
    "the",
    "of",
    "and",
    "to",
    "a",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "storage",
    "volume",
    "stripe",
    "parity",
    "member",
    "rebuild",
    "latency",
    "throughput",
    "cluster",
    "node",
    "drive",
    "block",
    "write",
    "read",
    "flash",
];

fn text(r: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = String::with_capacity(len + 128);
    while out.len() < len {
        let words = 6 + r.below(13);
        for i in 0..words {
            let w = WORDS[r.skewed(WORDS.len() as u64) as usize];
            if i == 0 {
                let mut c = w.chars();
                if let Some(f) = c.next() {
                    out.extend(f.to_uppercase());
                    out.push_str(c.as_str());
                }
            } else {
                out.push(' ');
                out.push_str(w);
            }
        }
        out.push_str(if r.below(8) == 0 { ".\n\n" } else { ". " });
    }
    out.truncate(len);
    out.into_bytes()
}

fn json(r: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = String::with_capacity(len + 256);
    let mut id = 100_000u64;
    let statuses = ["ok", "degraded", "rebuilding", "failed"];
    let tags = ["nvme", "tcp", "raid5", "raid6", "s3", "kv", "hot", "cold"];
    while out.len() < len {
        id += 1 + r.below(3);
        out.push_str(&format!(
            "{{\"id\":{id},\"user\":\"user{:04}\",\"ts\":\"2026-11-{:02}T{:02}:{:02}:{:02}.{:03}Z\",\"status\":\"{}\",\"tags\":[\"{}\",\"{}\"],\"score\":{}.{:02},\"path\":\"/vol/{}/blk/{}\"}}\n",
            r.below(5000),
            1 + r.below(28),
            r.below(24),
            r.below(60),
            r.below(60),
            r.below(1000),
            statuses[r.skewed(4) as usize],
            tags[r.below(8) as usize],
            tags[r.below(8) as usize],
            r.below(100),
            r.below(100),
            r.below(64),
            r.below(1 << 20),
        ));
    }
    out.truncate(len);
    out.into_bytes()
}

fn logs(r: &mut Rng, len: usize) -> Vec<u8> {
    let mut out = String::with_capacity(len + 256);
    let levels = ["info", "info", "info", "debug", "warn", "error"];
    let ops = ["read", "write", "flush", "discard"];
    let mut ms = 0u64;
    while out.len() < len {
        ms += r.below(50);
        out.push_str(&format!(
            "2026-11-28T{:02}:{:02}:{:02}.{:03}Z node{} ferrobay[{}]: level={} volume=vol{} op={} lba={} len={} latency_us={} member={}\n",
            (ms / 3_600_000) % 24,
            (ms / 60_000) % 60,
            (ms / 1000) % 60,
            ms % 1000,
            r.below(8),
            4000 + r.below(4),
            levels[r.below(6) as usize],
            r.below(16),
            ops[r.skewed(4) as usize],
            r.below(1 << 28) * 8,
            4096 << r.below(5),
            20 + r.skewed(5000),
            r.below(6),
        ));
    }
    out.truncate(len);
    out.into_bytes()
}

fn db(r: &mut Rng, len: usize) -> Vec<u8> {
    const PAGE: usize = 8192;
    const ROW: usize = 64;
    let mut out = vec![0u8; len.div_ceil(PAGE) * PAGE];
    let mut key = 1u64;
    for (p, page) in out.chunks_mut(PAGE).enumerate() {
        let rows = 40 + r.below(80) as usize;
        page[0..8].copy_from_slice(&(p as u64).to_le_bytes());
        page[8..10].copy_from_slice(&(rows as u16).to_le_bytes());
        page[10..12].copy_from_slice(&0x0d0cu16.to_le_bytes());
        for i in 0..rows {
            let at = PAGE - (i + 1) * ROW;
            page[24 + 2 * i..26 + 2 * i].copy_from_slice(&(at as u16).to_le_bytes());
            let row = &mut page[at..at + ROW];
            key += 1 + r.below(4);
            row[0..8].copy_from_slice(&key.to_le_bytes());
            row[8..16].copy_from_slice(&(r.skewed(1000)).to_le_bytes());
            row[16..24].copy_from_slice(&(1_764_300_000 + r.below(86_400)).to_le_bytes());
            let name = format!("customer-{:06}", r.below(200_000));
            row[24..24 + name.len()].copy_from_slice(name.as_bytes());
            row[48] = r.skewed(4) as u8;
        }
    }
    out.truncate(len);
    out
}

/// The four corpora, `len` bytes each.
pub fn all(len: usize) -> Vec<(&'static str, Vec<u8>)> {
    let mut r = Rng::new(0x00F3_2B0A_2026_1128);
    vec![
        ("text", text(&mut r, len)),
        ("json", json(&mut r, len)),
        ("logs", logs(&mut r, len)),
        ("db", db(&mut r, len)),
    ]
}
