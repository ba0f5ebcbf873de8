//! What `threads` counts (threads of the process, live contexts, the recipes' background
//! tasks) and how it prints them: Markdown rows printed as they are measured, each
//! target's verdict kept for the summary and `--check`.

use zookeeper_mt::ZooKeeper;

/// The counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// `Threads:` of `/proc/self/status`.
    pub(crate) threads: u64,
    /// Live contexts of the measured session plus those of the lock holder's.
    pub(crate) contexts: usize,
    /// `zookeeper_mt_recipes::live_background_tasks()`.
    pub(crate) tasks: usize,
}

impl Snapshot {
    pub(crate) fn now(handles: &[&ZooKeeper]) -> Snapshot {
        Snapshot {
            threads: crate::proto::threads(),
            contexts: handles.iter().map(|zk| zk.live_contexts()).sum(),
            tasks: zookeeper_mt_recipes::live_background_tasks(),
        }
    }

    /// Whether every count is at most `baseline`'s.
    pub(crate) fn within(&self, baseline: &Snapshot) -> bool {
        self.threads <= baseline.threads
            && self.contexts <= baseline.contexts
            && self.tasks <= baseline.tasks
    }
}

fn signed(now: i128, before: i128) -> String {
    format!("{:+}", now - before)
}

/// The rows of the start table and every target's verdict.
pub(crate) struct Table {
    last: Snapshot,
    baseline: Snapshot,
    /// (target line, passed) in the order printed.
    pub(crate) verdicts: Vec<(String, bool)>,
}

impl Table {
    /// Prints the header and the baseline row.
    pub(crate) fn start(baseline: Snapshot) -> Table {
        println!("| what was started | threads added | live contexts added | background tasks | target |");
        println!("|---|---:|---:|---:|---|");
        println!(
            "| baseline: both sessions connected, nothing started | {} (threads of the process) | {} (live contexts) | {} (tasks alive) | - |",
            baseline.threads, baseline.contexts, baseline.tasks
        );
        Table {
            last: baseline,
            baseline,
            verdicts: Vec::new(),
        }
    }

    pub(crate) fn baseline(&self) -> Snapshot {
        self.baseline
    }

    /// Prints the counts added since the previous row; with `max_threads`, whether they
    /// stayed at most that (a target).
    pub(crate) fn row(&mut self, what: &str, now: Snapshot, max_threads: Option<u64>) {
        let added = now.threads as i128 - self.last.threads as i128;
        let target = match max_threads {
            Some(max) => {
                let pass = added <= max as i128;
                self.verdicts
                    .push((format!("{what}: <= {max} threads added"), pass));
                format!("<= {max} threads added: {}", verdict(pass))
            }
            None => "-".to_string(),
        };
        println!(
            "| {what} | {} | {} | {} | {target} |",
            signed(now.threads as i128, self.last.threads as i128),
            signed(now.contexts as i128, self.last.contexts as i128),
            signed(now.tasks as i128, self.last.tasks as i128),
        );
        self.last = now;
    }

    /// A row for something that could not be started, with the reason.
    pub(crate) fn not_started(&self, what: &str, why: &str) {
        println!("| {what} | n/a | n/a | n/a | not measured: {why} |");
    }

    /// The total row (against the baseline), with the total threads target.
    pub(crate) fn total(&mut self, now: Snapshot, max_threads: u64) {
        let added = now.threads as i128 - self.baseline.threads as i128;
        let pass = added <= max_threads as i128;
        self.verdicts.push((
            format!("everything started: <= {max_threads} threads added in total"),
            pass,
        ));
        println!(
            "| **total, all of the above** | {} | {} | {} | <= {max_threads} threads added in total: {} |",
            signed(now.threads as i128, self.baseline.threads as i128),
            signed(now.contexts as i128, self.baseline.contexts as i128),
            signed(now.tasks as i128, self.baseline.tasks as i128),
            verdict(pass),
        );
    }

    /// A line of the after-drop table: a check, its value, what it should be, the
    /// verdict (kept for the summary).
    pub(crate) fn check(&mut self, what: &str, value: String, expected: String, pass: bool) {
        println!("| {what} | {value} | {expected} | {} |", verdict(pass));
        self.verdicts.push((what.to_string(), pass));
    }

    /// Prints the summary; whether every target passed.
    pub(crate) fn summary(&self) -> bool {
        let failed: Vec<&str> = self
            .verdicts
            .iter()
            .filter(|(_, pass)| !pass)
            .map(|(what, _)| what.as_str())
            .collect();
        println!(
            "\ntargets: {} of {} PASS",
            self.verdicts.len() - failed.len(),
            self.verdicts.len()
        );
        for what in &failed {
            println!("FAIL: {what}");
        }
        failed.is_empty()
    }
}

pub(crate) fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_compares_every_count() {
        let base = Snapshot {
            threads: 5,
            contexts: 2,
            tasks: 0,
        };
        assert!(base.within(&base));
        assert!(Snapshot { threads: 4, ..base }.within(&base));
        assert!(!Snapshot { tasks: 1, ..base }.within(&base));
        assert!(!Snapshot {
            contexts: 3,
            ..base
        }
        .within(&base));
        assert_eq!(signed(3, 5), "-2");
        assert_eq!(signed(5, 5), "+0");
    }
}
