//! Per-connection pool of I/O buffers in power-of-two size classes, so the I/O path does
//! not allocate (and zero) a fresh buffer per command.

use blockdev::IoBuf;

const MIN_CLASS_SHIFT: u32 = 12;
const CLASSES: usize = 13; // 4 KiB .. 16 MiB
/// Bytes a size class keeps at most (at least two buffers): enough for QD 32 of 128 KiB.
const CLASS_BUDGET_BYTES: usize = 4 << 20;

pub(crate) struct BufPool {
    classes: [Vec<IoBuf>; CLASSES],
}

fn class_of(len: usize) -> Option<usize> {
    let size = len.max(1).checked_next_power_of_two()?;
    let shift = size.trailing_zeros().max(MIN_CLASS_SHIFT);
    let idx = (shift - MIN_CLASS_SHIFT) as usize;
    (idx < CLASSES).then_some(idx)
}

fn class_bytes(idx: usize) -> usize {
    1usize << (idx as u32 + MIN_CLASS_SHIFT)
}

impl BufPool {
    pub fn new() -> Self {
        BufPool {
            classes: Default::default(),
        }
    }

    /// A buffer of exactly `len` bytes. Its content is unspecified (callers overwrite all of it).
    pub fn get(&mut self, len: usize) -> IoBuf {
        match class_of(len) {
            Some(c) => {
                let mut b = self.classes[c]
                    .pop()
                    .unwrap_or_else(|| IoBuf::new_zeroed(class_bytes(c)));
                b.set_len(len);
                b
            }
            None => IoBuf::new_zeroed(len),
        }
    }

    /// A zero-filled buffer of `len` bytes.
    pub fn get_zeroed(&mut self, len: usize) -> IoBuf {
        let mut b = self.get(len);
        b.fill(0);
        b
    }

    pub fn put(&mut self, b: IoBuf) {
        let cap = b.capacity();
        if !cap.is_power_of_two() {
            return;
        }
        if let Some(c) = class_of(cap) {
            if class_bytes(c) != cap {
                return;
            }
            let limit = (CLASS_BUDGET_BYTES / cap).max(2);
            if self.classes[c].len() < limit {
                self.classes[c].push(b);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_and_classes() {
        let mut p = BufPool::new();
        let b = p.get(512);
        assert_eq!(b.len(), 512);
        assert_eq!(b.capacity(), 4096);
        let ptr = b.as_ptr();
        p.put(b);
        let b2 = p.get(4096);
        assert_eq!(b2.as_ptr(), ptr);
        assert_eq!(b2.len(), 4096);
        let big = p.get(1 << 20);
        assert_eq!(big.capacity(), 1 << 20);
        let odd = p.get(3 * 4096);
        assert_eq!(odd.capacity(), 4 * 4096);
        assert_eq!(class_of(0), Some(0));
        assert_eq!(class_of(1 << 30), None);
        let z = p.get_zeroed(100);
        assert!(z.iter().all(|&x| x == 0));
    }
}
