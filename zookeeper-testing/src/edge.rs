//! Servers started from crafted data directories: znode counters at the ends of their
//! range, which a test could not reach by issuing requests (2^31 creates or writes).
//!
//! ZooKeeper keeps per-znode counters as signed 32-bit ints:
//! - the stored child version (`cversion`) of a parent is the number a sequential child's
//!   name gets (formatted `%010d`), and is bumped by every child create and delete;
//! - the data version (`version`) is bumped by every `setData`; an expected version of -1
//!   means "any version" (ZOOKEEPER-4743), so a versioned write whose read version is -1
//!   is no compare-and-set at all;
//! - the ACL version (`aversion`) is bumped by every `setACL`, with the same -1 rule.
//!
//! [`Crafted`] describes nodes with chosen counters; [`Server::start_crafted`] writes a
//! snapshot holding them with the server's own classes (`DataTree`, `FileTxnSnapLog` from
//! `zookeeper.jar`) and starts a normal server on that data dir. The writer is a small Java
//! program (`java/CraftSnapshot.java`, embedded in this crate) compiled with `javac` on
//! first use and cached in the temp dir, keyed by a hash of its source, the `javac` used
//! and the server jar.
//!
//! The `Stat.cversion` a client reads is not the stored counter: the server reports
//! `2 * cversion - numChildren` (its `DataNode.copyStat`). The stored counter is what
//! [`Crafted::dir`] sets and what the next sequential child's suffix shows.
//!
//! [`Server::start_crafted`]: crate::Server::start_crafted

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::error::{HarnessError, Result};
use crate::{spawner, util};

/// The crafting program; its source hash keys the compiled-class cache.
const CRAFT_SOURCE: &str = include_str!("../java/CraftSnapshot.java");
const CRAFT_CLASS: &str = "CraftSnapshot";
/// How long `javac` or the crafting JVM may run before it is killed.
const TOOL_TIMEOUT: Duration = Duration::from_secs(180);
/// The server's default `jute.maxbuffer`: a snapshot record larger than that (plus a
/// small allowance) does not load.
const MAX_DATA_LEN: usize = 0xfffff;

/// One crafted znode: persistent, `world:anyone` ACL, with the given data and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CraftedNode {
    /// Absolute path, e.g. `/edge/lock`.
    pub path: String,
    /// The node's data.
    pub data: Vec<u8>,
    /// Data version (`Stat.version`), bumped by each `setData`.
    pub version: i32,
    /// Stored child version: the suffix the next sequential child of this node gets.
    pub cversion: i32,
    /// ACL version (`Stat.aversion`), bumped by each `setACL`.
    pub aversion: i32,
}

impl CraftedNode {
    fn new(path: &str) -> Self {
        CraftedNode {
            path: path.to_string(),
            data: Vec::new(),
            version: 0,
            cversion: 0,
            aversion: 0,
        }
    }
}

/// A data directory to craft: persistent znodes with chosen data and counters.
///
/// Each setter adds the node if it is new, or changes only its own fields if the path was
/// given before (so `dir` and `node` on the same path combine). Missing ancestors are
/// created with empty data and zero counters. Counters are set after all nodes are
/// created, so crafted children do not bump a crafted parent's `cversion`.
///
/// ```no_run
/// use zookeeper_testing::{Crafted, Server};
///
/// let server = Server::start_crafted(
///     &Crafted::new()
///         .dir("/edge/lock", i32::MAX - 20) // the next sequential child: ...2147483627
///         .node("/edge/ids", b"41", -5),   // data version -5: three sets reach -1
/// )?;
/// # Ok::<(), zookeeper_testing::HarnessError>(())
/// ```
///
/// Paths are checked when the snapshot is written: absolute, no empty, `.` or `..`
/// component, no trailing `/`, no character the server refuses, not `/` and not under
/// `/zookeeper`; data at most 1 MiB - 1 bytes (the server's default `jute.maxbuffer`).
/// A bad node gives [`HarnessError::InvalidArgument`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Crafted {
    nodes: Vec<CraftedNode>,
}

impl Crafted {
    /// No nodes yet (a server started from it is a plain empty server).
    pub fn new() -> Self {
        Self::default()
    }

    fn entry(&mut self, path: &str) -> &mut CraftedNode {
        let i = match self.nodes.iter().position(|n| n.path == path) {
            Some(i) => i,
            None => {
                self.nodes.push(CraftedNode::new(path));
                self.nodes.len() - 1
            }
        };
        &mut self.nodes[i]
    }

    /// A node whose stored child version is `cversion`: its next sequential child is
    /// named with suffix `cversion` (`%010d`).
    pub fn dir(mut self, path: &str, cversion: i32) -> Self {
        self.entry(path).cversion = cversion;
        self
    }

    /// A node holding `data` at data version `version`.
    pub fn node(mut self, path: &str, data: &[u8], version: i32) -> Self {
        let node = self.entry(path);
        node.data = data.to_vec();
        node.version = version;
        self
    }

    /// Sets a node's ACL version (`Stat.aversion`).
    pub fn acl_version(mut self, path: &str, aversion: i32) -> Self {
        self.entry(path).aversion = aversion;
        self
    }

    /// Adds (or replaces) a node with every field given.
    pub fn with(mut self, node: CraftedNode) -> Self {
        let path = node.path.clone();
        *self.entry(&path) = node;
        self
    }

    /// The crafted nodes in the order they were first named.
    pub fn nodes(&self) -> &[CraftedNode] {
        &self.nodes
    }

    /// Writes a snapshot holding the crafted nodes into `data_dir` (its `version-2`
    /// subdirectory), for a server whose `dataDir` (and `dataLogDir`) it is. The dir must
    /// not hold a newer snapshot or transaction log already.
    ///
    /// Runs `javac` once per source version (cached) and a short-lived JVM. Fails with
    /// [`HarnessError::InvalidArgument`] on a bad node, and with [`HarnessError::Io`] if
    /// `javac` is missing or the writer fails (the error carries the writer's output).
    pub fn write_to(&self, data_dir: &Path) -> Result<()> {
        let scratch = util::create_temp_dir()?;
        let log = scratch.join("craft.log");
        let result = self.write_logged(data_dir, &scratch, &log);
        let result = result.map_err(|e| with_output(e, &log));
        if !util::keep_dirs() {
            let _ = fs::remove_dir_all(&scratch);
        }
        result
    }

    /// Writes the snapshot, with the spec file and log4j config in `work_dir` and the
    /// writer's output appended to `log`.
    pub(crate) fn write_logged(&self, data_dir: &Path, work_dir: &Path, log: &Path) -> Result<()> {
        self.validate()?;
        let classes = compiled_classes()?;
        let spec = work_dir.join("craft.spec");
        write_file(&spec, &self.spec())?;
        let log4j = work_dir.join("craft-log4j.properties");
        write_file(
            &log4j,
            "log4j.rootLogger=WARN, CONSOLE\n\
             log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n\
             log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n\
             log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} craft %-5p %m%n\n",
        )?;
        fs::create_dir_all(data_dir)
            .map_err(|e| HarnessError::io(format!("creating {}", data_dir.display()), e))?;

        let mut cmd = Command::new(util::find_java()?);
        cmd.args([
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-XX:-UsePerfData",
        ])
        .arg(format!("-Dlog4j.configuration=file:{}", log4j.display()))
        .arg("-cp")
        .arg(format!(
            "{}:{}",
            classes.display(),
            util::server_classpath()?
        ))
        .arg(CRAFT_CLASS)
        .arg(data_dir)
        .arg(&spec)
        .current_dir(work_dir);
        let status = run_logged(cmd, log, "the snapshot writer")?;
        if !status.success() {
            return Err(HarnessError::io(
                format!(
                    "writing the crafted snapshot into {} failed ({status})",
                    data_dir.display()
                ),
                io::Error::other("CraftSnapshot failed"),
            ));
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        for node in &self.nodes {
            check_path(&node.path).map_err(|why| {
                HarnessError::InvalidArgument(format!("crafted path {:?}: {why}", node.path))
            })?;
            if node.data.len() > MAX_DATA_LEN {
                return Err(HarnessError::InvalidArgument(format!(
                    "crafted node {}: {} bytes of data, more than the server loads ({MAX_DATA_LEN})",
                    node.path,
                    node.data.len()
                )));
            }
        }
        Ok(())
    }

    /// The spec file read by `CraftSnapshot.java`: one tab-separated line per node, path
    /// and data hex-encoded; nodes sorted by depth so parents come first.
    fn spec(&self) -> String {
        let mut nodes: Vec<&CraftedNode> = self.nodes.iter().collect();
        nodes.sort_by_key(|n| n.path.matches('/').count());
        let mut out = String::new();
        for n in nodes {
            let _ = writeln!(
                out,
                "node\t{}\t{}\t{}\t{}\t{}",
                hex(n.path.as_bytes()),
                hex(&n.data),
                n.version,
                n.cversion,
                n.aversion
            );
        }
        out
    }
}

/// Why the server would refuse `path`, if it would (the rules of its `PathUtils`).
fn check_path(path: &str) -> std::result::Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("not absolute");
    }
    if path == "/" {
        return Err("the root cannot be crafted");
    }
    if path.ends_with('/') {
        return Err("ends with '/'");
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return Err("under /zookeeper, the server's own subtree");
    }
    for part in path[1..].split('/') {
        match part {
            "" => return Err("empty component"),
            "." | ".." => return Err("relative component"),
            _ => {}
        }
    }
    let refused = |c: char| matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{f000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}');
    if path.chars().any(refused) {
        return Err("holds a character the server refuses");
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|e| HarnessError::io(format!("writing {}", path.display()), e))
}

/// Appends the tail of the tool output in `log` to an error's context.
pub(crate) fn with_output(e: HarnessError, log: &Path) -> HarnessError {
    match e {
        HarnessError::Io { context, source } => HarnessError::Io {
            context: format!(
                "{context}\noutput ({}):\n{}",
                log.display(),
                util::log_tail(log, 30)
            ),
            source,
        },
        other => other,
    }
}

/// Runs `cmd` to completion with stdout and stderr appended to `log`; kills it after
/// [`TOOL_TIMEOUT`]. Spawned like the servers, so it dies with the test process.
fn run_logged(mut cmd: Command, log: &Path, what: &str) -> Result<ExitStatus> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| HarnessError::io(format!("opening {}", log.display()), e))?;
    let err = out
        .try_clone()
        .map_err(|e| HarnessError::io("duplicating the log file handle", e))?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    let mut child =
        spawner::spawn(cmd).map_err(|e| HarnessError::io(format!("running {what}"), e))?;
    let deadline = Instant::now() + TOOL_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::io(
                    format!("{what} did not finish within {TOOL_TIMEOUT:?}; killed"),
                    io::Error::from(io::ErrorKind::TimedOut),
                ));
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::io(format!("waiting for {what}"), e));
            }
        }
    }
}

/// The `javac` to use: `$ZK_HARNESS_JAVAC`, else next to the (symlink-resolved) `java`,
/// else `$JAVA_HOME/bin/javac`, else `javac` on `PATH`.
fn find_javac() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("ZK_HARNESS_JAVAC").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(java) = util::find_java() {
        if let Some(dir) = fs::canonicalize(&java)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
        {
            candidates.push(dir.join("javac"));
        }
    }
    if let Some(home) = std::env::var_os("JAVA_HOME").filter(|v| !v.is_empty()) {
        candidates.push(Path::new(&home).join("bin/javac"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("javac")));
    }
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        HarnessError::io(
            "javac not found (next to java, in $JAVA_HOME/bin or on PATH): crafted data \
             directories are written by a Java program compiled at test time; run the \
             project's set-up script `./setup.sh` (it installs the Debian package \
             default-jdk-headless) or set ZK_HARNESS_JAVAC",
            io::Error::from(io::ErrorKind::NotFound),
        )
    })
}

/// FNV-1a, 64 bit: a stable hash for the cache key (std's hasher is not stable across
/// releases).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The directory holding the compiled `CraftSnapshot.class`, compiling it on first use.
///
/// The cache dir `<tmp>/zk-harness-javac-<key>` only ever appears complete: classes are
/// compiled into a private temp dir and renamed into place, so concurrent test processes
/// at worst compile twice.
fn compiled_classes() -> Result<PathBuf> {
    static COMPILING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = COMPILING.lock().unwrap_or_else(PoisonError::into_inner);

    let javac = find_javac()?;
    let classpath = util::server_classpath()?;
    let jar_stamp = fs::metadata("/usr/share/java/zookeeper.jar")
        .ok()
        .map(|m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            format!("{}:{mtime}", m.len())
        })
        .unwrap_or_default();
    let key = fnv1a(&[
        CRAFT_SOURCE.as_bytes(),
        javac.as_os_str().as_encoded_bytes(),
        classpath.as_bytes(),
        jar_stamp.as_bytes(),
    ]);
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let cache = std::env::temp_dir().join(format!("zk-harness-javac-{uid}-{key:016x}"));
    if cache.join(format!("{CRAFT_CLASS}.class")).is_file() {
        return owned_by(&cache, uid).map(|()| cache);
    }

    let work = util::create_temp_dir()?;
    let result = compile_into(&javac, &classpath, &work).and_then(|classes| {
        match fs::rename(&classes, &cache) {
            Ok(()) => Ok(cache.clone()),
            // Another process won the race: its dir is complete.
            Err(_) if cache.join(format!("{CRAFT_CLASS}.class")).is_file() => {
                owned_by(&cache, uid).map(|()| cache.clone())
            }
            Err(e) => Err(HarnessError::io(
                format!("moving compiled classes to {}", cache.display()),
                e,
            )),
        }
    });
    let result = result.map_err(|e| with_output(e, &work.join("javac.log")));
    let _ = fs::remove_dir_all(&work);
    result
}

/// Refuses a cache dir someone else created: its classes would run in our tests.
fn owned_by(dir: &Path, uid: u32) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta =
        fs::metadata(dir).map_err(|e| HarnessError::io(format!("reading {}", dir.display()), e))?;
    if meta.uid() == uid {
        Ok(())
    } else {
        Err(HarnessError::io(
            format!(
                "{} belongs to uid {}, not to us (uid {uid}); remove it",
                dir.display(),
                meta.uid()
            ),
            io::Error::from(io::ErrorKind::PermissionDenied),
        ))
    }
}

fn compile_into(javac: &Path, classpath: &str, work: &Path) -> Result<PathBuf> {
    let source = work.join(format!("{CRAFT_CLASS}.java"));
    write_file(&source, CRAFT_SOURCE)?;
    let classes = work.join("classes");
    let mut cmd = Command::new(javac);
    // Only our one class: jars on the class path that ship sources (e.g. the findbugs
    // annotations) would otherwise get compiled into the cache too.
    cmd.arg("-nowarn")
        .arg("-implicit:none")
        .arg("-sourcepath")
        .arg("")
        .arg("-d")
        .arg(&classes)
        .arg("-cp")
        .arg(classpath)
        .arg(&source)
        .current_dir(work);
    let status = run_logged(cmd, &work.join("javac.log"), "javac").map_err(|e| match e {
        HarnessError::Io { context, source } if source.kind() == io::ErrorKind::NotFound => {
            HarnessError::io(
                format!("{context} ({}): run ./setup.sh (installs default-jdk-headless) or set ZK_HARNESS_JAVAC", javac.display()),
                source,
            )
        }
        other => other,
    })?;
    if !status.success() {
        return Err(HarnessError::io(
            format!(
                "compiling {CRAFT_CLASS}.java with {} failed ({status})",
                javac.display()
            ),
            io::Error::other("javac failed"),
        ));
    }
    Ok(classes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked() {
        assert!(check_path("/a/b").is_ok());
        for bad in [
            "",
            "a",
            "/",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/zookeeper",
            "/zookeeper/x",
            "/a\u{1}",
        ] {
            assert!(check_path(bad).is_err(), "{bad:?}");
        }
        assert!(check_path("/zookeeperish").is_ok());
    }

    #[test]
    fn setters_combine_on_one_path_and_spec_lists_parents_first() {
        let c = Crafted::new()
            .dir("/a/b", 7)
            .node("/a", b"x", -2)
            .node("/a/b", b"\t\n", 3)
            .acl_version("/a", 9);
        assert_eq!(c.nodes().len(), 2);
        assert_eq!(
            c.nodes()[0],
            CraftedNode {
                path: "/a/b".into(),
                data: b"\t\n".to_vec(),
                version: 3,
                cversion: 7,
                aversion: 0
            }
        );
        assert_eq!(
            c.spec(),
            "node\t2f61\t78\t-2\t0\t9\nnode\t2f612f62\t090a\t3\t7\t0\n"
        );
    }

    #[test]
    fn a_missing_javac_names_the_set_up_script() {
        let work = util::create_temp_dir().unwrap();
        let err = compile_into(Path::new("/nonexistent/bin/javac"), "", &work).unwrap_err();
        let _ = fs::remove_dir_all(&work);
        let msg = err.to_string();
        assert!(msg.contains("./setup.sh"), "{msg}");
        assert!(msg.contains("default-jdk-headless"), "{msg}");
    }

    #[test]
    fn bad_nodes_are_refused_before_any_process_runs() {
        let e = Crafted::new()
            .dir("/zookeeper/q", 1)
            .validate()
            .unwrap_err();
        assert!(matches!(e, HarnessError::InvalidArgument(_)), "{e}");
        let e = Crafted::new()
            .node("/big", &vec![0; MAX_DATA_LEN + 1], 0)
            .validate()
            .unwrap_err();
        assert!(matches!(e, HarnessError::InvalidArgument(_)), "{e}");
    }
}
