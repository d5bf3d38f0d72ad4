//! CPU seconds of the cluster's processes and of the whole machine.

/// CPU seconds of the cluster's processes (and the whole machine's busy time).
#[derive(Debug, Clone)]
pub(crate) struct CpuSnap {
    pub(crate) procs: Vec<f64>,
    pub(crate) nodes: Vec<f64>,
    pub(crate) machine_busy_s: f64,
}

impl CpuSnap {
    pub(crate) fn since(&self, before: &CpuSnap) -> CpuSnap {
        let d = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).max(0.0)).collect();
        CpuSnap {
            procs: d(&self.procs, &before.procs),
            nodes: d(&self.nodes, &before.nodes),
            machine_busy_s: (self.machine_busy_s - before.machine_busy_s).max(0.0),
        }
    }
    pub(crate) fn nodes_total(&self) -> f64 {
        self.nodes.iter().sum()
    }
    pub(crate) fn proc(&self, i: usize) -> f64 {
        self.procs.get(i).copied().unwrap_or(0.0)
    }
}

/// Busy CPU seconds of the whole machine (user, nice, system, irq, softirq, steal).
pub(crate) fn machine_busy_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let busy: u64 = [0usize, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&i| f.get(i))
        .sum();
    busy as f64 / clock_ticks_per_second()
}

#[allow(unsafe_code)]
pub(crate) fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a configuration value; it has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}
