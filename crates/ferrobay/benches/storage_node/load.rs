//! What the whole machine's CPUs did during a run, from /proc/stat: to tell how much went
//! to other people's work (this machine is shared; such runs are noisy) and how much to
//! interrupt and softirq work (the loopback TCP stack runs largely in softirqs, which tick
//! based accounting charges to no process, so neither the target's nor the initiator's
//! CPU figures include it).

use std::ops::Sub;

/// CPU seconds since boot, summed over all CPUs.
#[derive(Debug, Clone, Copy)]
pub struct MachineCpu {
    /// user + nice + system + steal.
    pub process_s: f64,
    /// irq + softirq.
    pub irq_s: f64,
}

impl Sub for MachineCpu {
    type Output = MachineCpu;
    fn sub(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            process_s: self.process_s - earlier.process_s,
            irq_s: self.irq_s - earlier.irq_s,
        }
    }
}

/// Reads /proc/stat, or None when it cannot.
pub fn machine_cpu() -> Option<MachineCpu> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let sum = |idx: &[usize]| idx.iter().filter_map(|&i| f.get(i)).sum::<u64>() as f64;
    let hz = clock_ticks_per_second();
    Some(MachineCpu {
        process_s: sum(&[0, 1, 2, 7]) / hz,
        irq_s: sum(&[5, 6]) / hz,
    })
}

#[allow(unsafe_code)]
fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a configuration value; it has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}
