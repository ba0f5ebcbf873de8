//! The line protocol every client program (Rust, C, zkpython, kazoo) prints:
//!
//! ```text
//! RESULT metric=<name> round=<r> ops=<n> secs=<elapsed> notif=<watch events> [key=value ...]
//! RSS peak_kb=<VmHWM of the client process>
//! ```

use std::collections::BTreeMap;

/// One measured phase of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    /// What was measured (`sync_create`, `async_get_w100`, `queue_take_c4`, ...).
    pub metric: String,
    /// Round index.
    pub round: u32,
    /// Operations completed.
    pub ops: u64,
    /// Elapsed seconds.
    pub secs: f64,
    /// Watch notifications received during the phase.
    pub notif: u64,
    /// Further fields (`lat_p50_us`, ...).
    pub extra: BTreeMap<String, String>,
}

impl Measurement {
    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.ops as f64 / self.secs
        } else {
            0.0
        }
    }

    /// The protocol line for this measurement.
    pub fn line(&self) -> String {
        let mut line = format!(
            "RESULT metric={} round={} ops={} secs={:.6} notif={}",
            self.metric, self.round, self.ops, self.secs, self.notif
        );
        for (k, v) in &self.extra {
            line.push_str(&format!(" {k}={v}"));
        }
        line
    }
}

/// Everything one client process reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Its measurements, in order.
    pub measurements: Vec<Measurement>,
    /// Its peak resident set size in KiB, if reported.
    pub peak_rss_kb: Option<u64>,
}

fn fields(rest: &str) -> BTreeMap<String, String> {
    rest.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Parses a client's stdout; other lines are ignored.
pub fn parse(stdout: &str) -> Result<Report, String> {
    let mut report = Report::default();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("RESULT ") {
            let mut f = fields(rest);
            let mut take = |k: &str| {
                f.remove(k)
                    .ok_or_else(|| format!("{k} missing in {line:?}"))
            };
            let metric = take("metric")?;
            let num = |v: String| {
                v.parse::<f64>()
                    .map_err(|_| format!("bad number {v:?} in {line:?}"))
            };
            let round = num(take("round")?)? as u32;
            let ops = num(take("ops")?)? as u64;
            let secs = num(take("secs")?)?;
            let notif = num(take("notif")?)? as u64;
            report.measurements.push(Measurement {
                metric,
                round,
                ops,
                secs,
                notif,
                extra: f,
            });
        } else if let Some(rest) = line.strip_prefix("RSS ") {
            report.peak_rss_kb = fields(rest).get("peak_kb").and_then(|v| v.parse().ok());
        }
    }
    Ok(report)
}

/// This process's peak resident set size (`VmHWM`) in KiB.
pub fn peak_rss_kb() -> u64 {
    status_field("VmHWM:")
}

/// This process's current resident set size (`VmRSS`) in KiB.
pub fn rss_kb() -> u64 {
    status_field("VmRSS:")
}

/// This process's thread count.
pub fn threads() -> u64 {
    status_field("Threads:")
}

fn status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let m = Measurement {
            metric: "watch".into(),
            round: 2,
            ops: 100,
            secs: 0.5,
            notif: 100,
            extra: [("lat_p50_us".to_string(), "250".to_string())].into(),
        };
        let out = format!("noise\n{}\nRSS peak_kb=1234\n", m.line());
        let report = parse(&out).unwrap();
        assert_eq!(report.measurements, vec![m]);
        assert_eq!(report.peak_rss_kb, Some(1234));
        assert_eq!(report.measurements[0].ops_per_sec(), 200.0);
    }

    #[test]
    fn python_and_c_lines() {
        let report =
            parse("RESULT metric=sync_get round=0 ops=300 secs=0.102493 notif=0 \n").unwrap();
        assert_eq!(report.measurements[0].metric, "sync_get");
        assert!(parse("RESULT metric=x round=0\n").is_err());
        assert!(peak_rss_kb() > 0);
    }
}
