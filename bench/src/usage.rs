//! This process's CPU time (user + system, all threads: the caller and both C client
//! threads) and context switches, from `getrusage(RUSAGE_SELF)`: the CPU-per-op figures.

use std::collections::BTreeMap;

/// A `getrusage` reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User + system CPU time in µs.
    pub cpu_us: f64,
    /// System (kernel) CPU time in µs.
    pub sys_us: f64,
    /// Voluntary + involuntary context switches.
    pub csw: i64,
}

impl Usage {
    /// Now.
    pub fn now() -> Usage {
        // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable `rusage`; RUSAGE_SELF is a valid target.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Usage::default();
        }
        let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
        Usage {
            cpu_us: us(ru.ru_utime) + us(ru.ru_stime),
            sys_us: us(ru.ru_stime),
            csw: (ru.ru_nvcsw + ru.ru_nivcsw) as i64,
        }
    }

    /// The protocol's `cpu_us`, `user_us`, `sys_us` and `csw` fields for the time since
    /// `self`.
    pub fn fields_since(self) -> BTreeMap<String, String> {
        let now = Usage::now();
        let (cpu, sys) = (now.cpu_us - self.cpu_us, now.sys_us - self.sys_us);
        BTreeMap::from([
            ("cpu_us".to_string(), format!("{cpu:.0}")),
            ("user_us".to_string(), format!("{:.0}", cpu - sys)),
            ("sys_us".to_string(), format!("{sys:.0}")),
            ("csw".to_string(), (now.csw - self.csw).to_string()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let start = Usage::now();
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_millis() < 30 {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let cpu: f64 = start.fields_since()["cpu_us"].parse().unwrap();
        assert!(cpu > 0.0, "no CPU time counted for 30 ms of work");
    }
}
