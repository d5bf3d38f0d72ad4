//! CPU time of this process (user + system), for CPU-per-I/O figures.

use std::time::Duration;

/// User and system CPU time consumed by the process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTime {
    pub user: Duration,
    pub system: Duration,
}

impl CpuTime {
    /// Reads getrusage(RUSAGE_SELF).
    pub fn now() -> CpuTime {
        let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        #[allow(unsafe_code)]
        // SAFETY: getrusage writes a complete rusage into the pointer we pass, which points
        // to properly sized and aligned storage; RUSAGE_SELF is always valid.
        let ru = unsafe {
            if libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) != 0 {
                return CpuTime::default();
            }
            ru.assume_init()
        };
        let tv = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        CpuTime {
            user: tv(ru.ru_utime),
            system: tv(ru.ru_stime),
        }
    }

    /// CPU time of a process by pid, from /proc/PID/stat (for measuring a target process).
    pub fn of_pid(pid: u32) -> Option<CpuTime> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may contain spaces) start after the last ')'.
        let rest = s.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // utime and stime are fields 14 and 15 (1-based) of the whole line: index 11, 12 here.
        let ticks = clock_ticks_per_second();
        let ut: u64 = f.get(11)?.parse().ok()?;
        let st: u64 = f.get(12)?.parse().ok()?;
        Some(CpuTime {
            user: Duration::from_secs_f64(ut as f64 / ticks),
            system: Duration::from_secs_f64(st as f64 / ticks),
        })
    }

    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

fn clock_ticks_per_second() -> f64 {
    #[allow(unsafe_code)]
    // SAFETY: sysconf has no memory effects; _SC_CLK_TCK is a valid name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_moves_when_we_burn_cpu() {
        // Spin until the process's CPU time shows 20 ms (on a busy machine the wall
        // clock runs ahead of it): a clock that does not move fails after 5 s.
        let a = CpuTime::now();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        let mut b = CpuTime::now();
        while b.since(&a).total() < Duration::from_millis(20)
            && t.elapsed() < Duration::from_secs(5)
        {
            for _ in 0..10_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            b = CpuTime::now();
        }
        std::hint::black_box(x);
        assert!(
            b.since(&a).total() >= Duration::from_millis(20),
            "{:?} of CPU time in {:?}",
            b.since(&a),
            t.elapsed()
        );
        let me = CpuTime::of_pid(std::process::id()).expect("own /proc stat");
        assert!(me.total() > Duration::ZERO);
    }
}
