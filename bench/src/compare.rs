//! `compare`: runs `compare/behaviour.script` (basic ops with their error kinds, watches,
//! the classic queue recipe) through zkpython (`py/compare_behaviour.py`) and through our crates
//! (this interpreter), then diffs the two outputs line by line and checks both against the
//! results the script states. Any difference is an error (non-zero exit).

use crate::flags::Flags;
use crate::launchers::{run_client_raw, zkpython_lib};
use crate::rust_client::{connect, delete_tree, Result};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};
use zookeeper_mt::{CreateMode, Error, Stat, Watch, ZooKeeper};
use zookeeper_mt_recipes::queues::Queue;
use zookeeper_mt_recipes::OptionalExtension;
use zookeeper_mt_recipes::RecipeError;

/// One script step: its line number, text and the stated result (if any).
#[derive(Debug, Clone)]
pub struct Step {
    pub line: usize,
    pub words: Vec<String>,
    pub expected: Option<String>,
}

/// Parses the script (`#` comments, `=> expected` suffixes).
pub fn parse_script(text: &str) -> Vec<Step> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let code = raw.split('#').next().unwrap_or("");
            let (op, expected) = match code.split_once("=>") {
                Some((op, e)) => (op, Some(e.trim().to_string())),
                None => (code, None),
            };
            let words: Vec<String> = op.split_whitespace().map(String::from).collect();
            (!words.is_empty()).then_some(Step {
                line: i + 1,
                words,
                expected,
            })
        })
        .collect()
}

/// The error kind as the C client names it. The binding's own path check
/// (`InvalidPath`) stands where the C client returns ZBADARGUMENTS.
pub fn kind(e: &Error) -> String {
    match e {
        Error::InvalidPath { .. } => "BadArguments".into(),
        other => {
            let debug = format!("{other:?}");
            debug
                .split(['(', ' ', '{'])
                .next()
                .unwrap_or("")
                .to_string()
        }
    }
}

fn recipe_kind(e: &RecipeError) -> String {
    match e {
        RecipeError::ZooKeeper(e) => kind(e),
        other => format!("{other:?}")
            .split(['(', ' ', '{'])
            .next()
            .unwrap_or("")
            .to_string(),
    }
}

enum StepError {
    Zk(Error),
    Recipe(RecipeError),
    Script(String),
}

impl From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Zk(e)
    }
}

impl From<RecipeError> for StepError {
    fn from(e: RecipeError) -> Self {
        StepError::Recipe(e)
    }
}

/// Runs the script through our crates.
pub struct Interpreter {
    hosts: String,
    base: String,
    zk: ZooKeeper,
    watches: Vec<Watch>,
    queues: HashMap<String, Queue>,
}

impl Interpreter {
    pub fn new(hosts: &str, base: &str) -> Result<Interpreter> {
        let zk = connect(hosts)?;
        zk.create(base, b"", CreateMode::Persistent)?;
        Ok(Interpreter {
            hosts: hosts.into(),
            base: base.into(),
            zk,
            watches: Vec::new(),
            queues: HashMap::new(),
        })
    }

    fn path(&self, p: &str) -> String {
        match p.strip_prefix("BAD:") {
            Some(raw) => raw.to_string(),
            None => format!("{}{p}", self.base),
        }
    }

    fn rel<'a>(&self, p: &'a str) -> &'a str {
        p.strip_prefix(self.base.as_str()).unwrap_or(p)
    }

    fn fmt_get(data: &[u8], stat: &Stat) -> String {
        let data = if data.is_empty() {
            "-".into()
        } else {
            String::from_utf8_lossy(data).into_owned()
        };
        format!(
            "ok data={data} version={} children={} ephemeral={}",
            stat.version,
            stat.num_children,
            stat.ephemeral_owner != 0
        )
    }

    fn fmt_exists(stat: Option<Stat>) -> String {
        match stat {
            None => "ok none".into(),
            Some(s) => format!("ok version={} children={}", s.version, s.num_children),
        }
    }

    fn fmt_children(mut c: Vec<String>) -> String {
        c.sort();
        format!("ok [{}]", c.join(","))
    }

    fn queue(&mut self, path: &str) -> Result<&Queue, StepError> {
        let full = self.path(path);
        if !self.queues.contains_key(&full) {
            let q = Queue::new(&self.zk, &full)?;
            self.queues.insert(full.clone(), q);
        }
        Ok(&self.queues[&full])
    }

    fn item(data: Option<Vec<u8>>) -> String {
        match data {
            Some(d) => format!("ok {}", String::from_utf8_lossy(&d)),
            None => "ok None".into(),
        }
    }

    /// Runs one step; errors become `err <Kind>`.
    pub fn step(&mut self, words: &[String]) -> String {
        match self.try_step(words) {
            Ok(s) => s,
            Err(StepError::Zk(e)) => format!("err {}", kind(&e)),
            Err(StepError::Recipe(e)) => format!("err {}", recipe_kind(&e)),
            Err(StepError::Script(e)) => format!("script error: {e}"),
        }
    }

    fn try_step(&mut self, w: &[String]) -> Result<String, StepError> {
        let arg = |i: usize| {
            w.get(i)
                .map(String::as_str)
                .ok_or_else(|| StepError::Script(format!("{} needs argument {i}", w[0])))
        };
        let data = |s: &str| {
            if s == "-" {
                Vec::new()
            } else {
                s.as_bytes().to_vec()
            }
        };
        let version = |s: &str| -> Result<Option<i32>, StepError> {
            let v: i32 = s
                .parse()
                .map_err(|_| StepError::Script(format!("bad version {s}")))?;
            Ok((v >= 0).then_some(v))
        };
        let zk = self.zk.clone();
        Ok(match w[0].as_str() {
            "create" => {
                let mode = match w.get(3).map(String::as_str).unwrap_or("persistent") {
                    "persistent" => CreateMode::Persistent,
                    "ephemeral" => CreateMode::Ephemeral,
                    "sequential" => CreateMode::PersistentSequential,
                    "ephemeral_sequential" => CreateMode::EphemeralSequential,
                    m => return Err(StepError::Script(format!("unknown mode {m}"))),
                };
                let created = zk.create(&self.path(arg(1)?), &data(arg(2)?), mode)?;
                format!("ok {}", self.rel(&created))
            }
            "get" => {
                let (d, s) = zk.get(&self.path(arg(1)?))?;
                Self::fmt_get(&d, &s)
            }
            "watch_get" => {
                let (d, s, watch) = zk.get_watch(&self.path(arg(1)?))?;
                self.watches.push(watch);
                Self::fmt_get(&d, &s)
            }
            "set" => {
                let s = zk.set(&self.path(arg(1)?), &data(arg(2)?), version(arg(3)?)?)?;
                format!("ok version={}", s.version)
            }
            "exists" => Self::fmt_exists(zk.exists(&self.path(arg(1)?))?),
            "watch_exists" => {
                let (s, watch) = zk.exists_watch(&self.path(arg(1)?))?;
                self.watches.push(watch);
                Self::fmt_exists(s)
            }
            "delete" => {
                zk.delete(&self.path(arg(1)?), version(arg(2)?)?)?;
                "ok".into()
            }
            "children" => Self::fmt_children(zk.get_children(&self.path(arg(1)?))?),
            "watch_children" => {
                let (c, watch) = zk.get_children_watch(&self.path(arg(1)?))?;
                self.watches.push(watch);
                Self::fmt_children(c)
            }
            "events" => {
                let want: usize = arg(1)?
                    .parse()
                    .map_err(|_| StepError::Script("bad count".into()))?;
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut got = Vec::new();
                let mut pending = std::mem::take(&mut self.watches);
                // wait for `want` events, then give late extras 200 ms (as the Python side)
                while got.len() < want && Instant::now() < deadline && !pending.is_empty() {
                    pending.retain(|watch| match watch.try_get() {
                        Ok(Some(ev)) => {
                            got.push(format!("{:?} {}", ev.event_type, self.rel(&ev.path)));
                            false
                        }
                        Ok(None) => true,
                        Err(_) => false,
                    });
                    thread::sleep(Duration::from_millis(5));
                }
                thread::sleep(Duration::from_millis(200));
                pending.retain(|watch| match watch.try_get() {
                    Ok(Some(ev)) => {
                        got.push(format!("{:?} {}", ev.event_type, self.rel(&ev.path)));
                        false
                    }
                    _ => true,
                });
                self.watches = pending;
                got.sort();
                format!("ok [{}]", got.join(","))
            }
            "qnew" => {
                self.queue(arg(1)?)?;
                "ok".into()
            }
            "qput" => {
                let d = data(arg(2)?);
                self.queue(arg(1)?)?.put(&d)?;
                "ok".into()
            }
            "qget" => Self::item(self.queue(arg(1)?)?.try_take()?),
            "qtake" => Self::item(
                self.queue(arg(1)?)?
                    .take(Duration::from_secs(10))
                    .optional()?,
            ),
            "qtake_after_put" => {
                let other = connect(&self.hosts).map_err(|e| StepError::Script(e.to_string()))?;
                let full = self.path(arg(1)?);
                let d = data(arg(2)?);
                let other_q = Queue::new(&other, &full)?;
                let q = self.queue(arg(1)?)?;
                let taken = thread::scope(|s| {
                    let putter = s.spawn(|| {
                        thread::sleep(Duration::from_millis(200));
                        other_q.put(&d)
                    });
                    let taken = q.take(Duration::from_secs(10)).optional();
                    let put = putter
                        .join()
                        .map_err(|_| StepError::Script("putter panicked".into()));
                    put.and_then(|r| r.map_err(StepError::from))?;
                    taken.map_err(StepError::from)
                })?;
                drop(other_q);
                let _ = other.close();
                Self::item(taken)
            }
            "qdrain" => {
                let k: usize = arg(2)?
                    .parse()
                    .map_err(|_| StepError::Script("bad consumer count".into()))?;
                let full = self.path(arg(1)?);
                let handles = (0..k)
                    .map(|_| connect(&self.hosts))
                    .collect::<Result<Vec<_>>>()
                    .map_err(|e| StepError::Script(e.to_string()))?;
                let items = std::sync::Mutex::new(Vec::new());
                thread::scope(|s| -> Result<(), StepError> {
                    let joins: Vec<_> = handles
                        .iter()
                        .map(|zk| {
                            let (items, full) = (&items, &full);
                            s.spawn(move || -> Result<(), StepError> {
                                let q = Queue::new(zk, full)?;
                                while let Some(item) = q.try_take()? {
                                    items
                                        .lock()
                                        .expect("not poisoned")
                                        .push(String::from_utf8_lossy(&item).into_owned());
                                }
                                Ok(())
                            })
                        })
                        .collect();
                    for j in joins {
                        j.join()
                            .map_err(|_| StepError::Script("consumer panicked".into()))??;
                    }
                    Ok(())
                })?;
                for h in handles {
                    let _ = h.close();
                }
                let mut items = items.into_inner().expect("not poisoned");
                items.sort();
                let count = items.len();
                let mut distinct = items.clone();
                distinct.dedup();
                format!(
                    "ok count={count} distinct={} items=[{}]",
                    distinct.len(),
                    items.join(",")
                )
            }
            op => return Err(StepError::Script(format!("unknown op {op}"))),
        })
    }

    /// Deletes the base node and closes the session.
    pub fn finish(self) -> Result<()> {
        let Interpreter {
            zk,
            base,
            queues,
            watches,
            ..
        } = self;
        drop(queues);
        drop(watches);
        delete_tree(&zk, &base)?;
        zk.close()?;
        Ok(())
    }
}

/// Runs the script through our crates: `(line, result)` per step.
pub fn run_rust(hosts: &str, base: &str, steps: &[Step]) -> Result<Vec<(usize, String)>> {
    let mut it = Interpreter::new(hosts, base)?;
    let out = steps.iter().map(|s| (s.line, it.step(&s.words))).collect();
    it.finish()?;
    Ok(out)
}

/// Runs the script through zkpython: `(line, result)` per step.
pub fn run_zkpython(
    hosts: &str,
    base: &str,
    script: &std::path::Path,
    build: bool,
) -> Result<Vec<(usize, String)>> {
    let bench_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lib = zkpython_lib(&bench_dir, build)?;
    let python = std::env::var_os("ZK_BENCH_PYTHON")
        .map_or_else(|| PathBuf::from("/usr/bin/python3"), PathBuf::from);
    let mut cmd = Command::new(python);
    cmd.arg(bench_dir.join("py/compare_behaviour.py"))
        .args(["--hosts", hosts, "--base", base, "--script"])
        .arg(script)
        .env("PYTHONPATH", lib);
    let stdout = run_client_raw(&mut cmd, Duration::from_secs(120))?;
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix('L'))
        .map(|l| {
            let (n, rest) = l.split_once(' ').unwrap_or((l, ""));
            Ok((
                n.parse().map_err(|_| format!("bad line {l:?}"))?,
                rest.to_string(),
            ))
        })
        .collect()
}

/// Compares the two outputs with each other and with the stated results; returns the
/// Markdown report and whether everything matched.
pub fn diff(
    steps: &[Step],
    rust: &[(usize, String)],
    zkpython: &[(usize, String)],
) -> (String, bool) {
    let r: HashMap<usize, &str> = rust.iter().map(|(l, s)| (*l, s.as_str())).collect();
    let z: HashMap<usize, &str> = zkpython.iter().map(|(l, s)| (*l, s.as_str())).collect();
    let mut report =
        String::from("| line | step | zkpython | Rust | stated |\n|---:|---|---|---|---|\n");
    let mut bad = 0;
    for s in steps {
        let (rv, zv) = (r.get(&s.line).copied(), z.get(&s.line).copied());
        let stated_ok = |v: Option<&str>| s.expected.as_deref().is_none_or(|e| v == Some(e));
        if rv != zv || !stated_ok(rv) || !stated_ok(zv) {
            bad += 1;
            report.push_str(&format!(
                "| {} | `{}` | {} | {} | {} |\n",
                s.line,
                s.words.join(" "),
                zv.unwrap_or("(missing)"),
                rv.unwrap_or("(missing)"),
                s.expected.as_deref().unwrap_or("")
            ));
        }
    }
    if bad == 0 {
        (
            format!(
                "behaviour comparison: all {} steps identical through zkpython and Rust\n",
                steps.len()
            ),
            true,
        )
    } else {
        (
            format!(
                "behaviour comparison: {bad} of {} steps differ\n\n{report}",
                steps.len()
            ),
            false,
        )
    }
}

pub fn main(flags: &Flags) -> Result<()> {
    let known = ["hosts", "script", "inject-difference", "no-zkpython-build"];
    if let Some(bad) = flags.unknown(&known).first() {
        return Err(format!("unknown flag --{bad}").into());
    }
    let script = flags.get("script").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("compare/behaviour.script"),
        PathBuf::from,
    );
    let text =
        std::fs::read_to_string(&script).map_err(|e| format!("{}: {e}", script.display()))?;
    let steps = parse_script(&text);
    let (_server, hosts) = flags.hosts_or_start()?;
    let pid = std::process::id();
    let zkpy = run_zkpython(
        &hosts,
        &format!("/zkcompare-zkpython-{pid}"),
        &script,
        !flags.switch("no-zkpython-build"),
    )?;
    let mut rust = run_rust(&hosts, &format!("/zkcompare-rust-{pid}"), &steps)?;
    if flags.switch("inject-difference") {
        // proves the check fails on a difference: report the first error kind wrongly
        if let Some(entry) = rust.iter_mut().find(|(_, s)| s.starts_with("err ")) {
            entry.1 = "err Injected".into();
        }
    }
    let (report, same) = diff(&steps, &rust, &zkpy);
    print!("{report}");
    if same {
        Ok(())
    } else {
        Err("zkpython and our crates behave differently (table above)".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_parsing_and_diff() {
        let steps = parse_script("# c\ncreate /a x => ok /a\n\nget /a\n");
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[0].line, 2);
        assert_eq!(steps[0].expected.as_deref(), Some("ok /a"));
        assert_eq!(steps[1].expected, None);
        let same = vec![(2, "ok /a".to_string()), (4, "ok data=x".to_string())];
        assert!(diff(&steps, &same, &same).1);
        let other = vec![(2, "ok /a".to_string()), (4, "err NoNode".to_string())];
        assert!(!diff(&steps, &same, &other).1);
        let wrong = vec![
            (2, "err NodeExists".to_string()),
            (4, "ok data=x".to_string()),
        ];
        assert!(
            !diff(&steps, &wrong, &wrong).1,
            "both differing from the stated result fails too"
        );
    }

    #[test]
    fn kinds() {
        assert_eq!(kind(&Error::NoNode), "NoNode");
        assert_eq!(kind(&Error::Unknown(-999)), "Unknown");
        assert_eq!(
            kind(&Error::InvalidPath {
                path: "a".into(),
                reason: "x"
            }),
            "BadArguments"
        );
    }
}
