//! Building the participant commands: the Java participant compiled once per source
//! hash, the kazoo script written next to it, the interpreters found.

use super::*;

// ---------------------------------------------------------------------------------------
// Building the participant commands.
// ---------------------------------------------------------------------------------------

/// A hash of everything that makes up the participants (sources), as a cache key.
pub(super) fn sources_hash() -> u64 {
    let mut h = DefaultHasher::new();
    CURATOR_SOURCE.hash(&mut h);
    KAZOO_SOURCE.hash(&mut h);
    h.finish()
}

/// The cache dir holding the compiled Java participant and the kazoo script, made once
/// per process.
pub(super) fn prepared_dir() -> PeerResult<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    // A failure is kept as text (errors are not Clone) and reported to every caller.
    let result = DIR.get_or_init(|| prepare_dir().map_err(|e| e.to_string()));
    match result {
        Ok(dir) => Ok(dir.clone()),
        Err(message) => Err(PeerError::io(
            "preparing the peer participants",
            io::Error::other(message.clone()),
        )),
    }
}

pub(super) fn prepare_dir() -> PeerResult<PathBuf> {
    let base = std::env::temp_dir();
    let dir = base.join(format!("zk-peers-{:016x}", sources_hash()));
    if dir.join(".complete").is_file() {
        return Ok(dir);
    }
    // Build in a private dir and rename it into place: concurrent test processes may race
    // here, and the loser just uses the winner's dir.
    let staging = base.join(format!(
        "zk-peers-{:016x}.{}-{}",
        sources_hash(),
        std::process::id(),
        next_serial()
    ));
    let _ = fs::remove_dir_all(&staging);
    fs::create_dir_all(&staging)
        .map_err(|e| PeerError::io(format!("creating {}", staging.display()), e))?;
    let built = build_into(&staging);
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    match fs::rename(&staging, &dir) {
        Ok(()) => Ok(dir),
        Err(_) if dir.join(".complete").is_file() => {
            let _ = fs::remove_dir_all(&staging);
            Ok(dir)
        }
        Err(_) => {
            // A stale, incomplete dir from a killed run: replace it.
            let _ = fs::remove_dir_all(&dir);
            fs::rename(&staging, &dir).map_err(|e| {
                let _ = fs::remove_dir_all(&staging);
                PeerError::io(format!("moving the participants to {}", dir.display()), e)
            })?;
            Ok(dir)
        }
    }
}

pub(super) fn build_into(dir: &Path) -> PeerResult<()> {
    let write = |name: &str, text: &str| {
        fs::write(dir.join(name), text)
            .map_err(|e| PeerError::io(format!("writing {name} into {}", dir.display()), e))
    };
    write(KAZOO_SCRIPT, KAZOO_SOURCE)?;
    let javac = find_javac();
    let compile = |class: &str, source: &str, classpath: &str| -> PeerResult<()> {
        let file = format!("{class}.java");
        write(&file, source)?;
        let javac = javac.as_ref().map_err(|_| not_installed_javac())?;
        let output = Command::new(javac)
            .arg("-nowarn")
            .arg("-d")
            .arg(dir)
            .arg("-cp")
            .arg(classpath)
            .arg(dir.join(&file))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => not_installed_javac(),
                _ => PeerError::io(format!("running {}", javac.display()), e),
            })?;
        if !output.status.success() {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            return Err(PeerError::Compile { output: text });
        }
        Ok(())
    };
    // Each is compiled only if its libraries are there (kazoo peers need neither), and
    // only if javac is.
    if javac.is_ok() {
        if let Ok(classpath) = curator_classpath() {
            compile(CURATOR_CLASS, CURATOR_SOURCE, &classpath)?;
        }
    }
    write(".complete", "")
}

pub(super) fn not_installed_javac() -> PeerError {
    PeerError::NotInstalled {
        what: "javac".to_string(),
        hint: "run ./setup.sh (Debian package default-jdk-headless), or set ZK_HARNESS_JAVAC"
            .to_string(),
    }
}

/// `$ZK_HARNESS_JAVAC`, else `javac` next to the `java` the harness runs (symlinks
/// followed), else `javac` on `PATH`.
pub(super) fn find_javac() -> PeerResult<PathBuf> {
    if let Some(p) = std::env::var_os("ZK_HARNESS_JAVAC").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Ok(java) = util::find_java() {
        if let Ok(real) = fs::canonicalize(&java) {
            if let Some(bin) = real.parent() {
                let javac = bin.join("javac");
                if javac.is_file() {
                    return Ok(javac);
                }
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let javac = dir.join("javac");
            if javac.is_file() {
                return Ok(javac);
            }
        }
    }
    Err(not_installed_javac())
}

/// Curator's class path: `$ZK_HARNESS_CURATOR_CLASSPATH`, else Debian's
/// `curator-recipes.jar` (its manifest names curator-framework, curator-client, guava,
/// slf4j-api and the ZooKeeper client jars).
pub(super) fn curator_classpath() -> PeerResult<String> {
    if let Some(cp) = std::env::var("ZK_HARNESS_CURATOR_CLASSPATH")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return Ok(cp);
    }
    let jar = Path::new(JAVA_DIR).join("curator-recipes.jar");
    if !jar.is_file() {
        return Err(PeerError::NotInstalled {
            what: jar.display().to_string(),
            hint: "run ./setup.sh (Debian package libcurator-recipes-java), or set \
                   ZK_HARNESS_CURATOR_CLASSPATH"
                .to_string(),
        });
    }
    Ok(jar.display().to_string())
}

/// The prepared dir, checked to hold `class` (compiled).
pub(super) fn compiled(class: &str) -> PeerResult<PathBuf> {
    let dir = prepared_dir()?;
    if !dir.join(format!("{class}.class")).is_file() {
        // The cache was built while javac or a library was missing; it is keyed by the
        // sources only.
        find_javac()?;
        return Err(PeerError::NotInstalled {
            what: format!("{class}.class in {}", dir.display()),
            hint: format!(
                "a library was missing when the participants were compiled; remove {} and retry",
                dir.display()
            ),
        });
    }
    Ok(dir)
}

pub(super) fn java() -> PeerResult<PathBuf> {
    util::find_java().map_err(|e| PeerError::NotInstalled {
        what: "java".to_string(),
        hint: e.to_string(),
    })
}

pub(super) fn curator_command() -> PeerResult<Command> {
    let classpath = curator_classpath()?;
    let dir = compiled(CURATOR_CLASS)?;
    let java = java()?;
    let mut full = format!("{}:{classpath}", dir.display());
    // Warnings (connection trouble) to stderr, which the peer keeps for error messages;
    // without a binding SLF4J would log nothing at all.
    let simple = Path::new(JAVA_DIR).join("slf4j-simple.jar");
    if simple.is_file() {
        full.push(':');
        full.push_str(&simple.display().to_string());
    }
    let mut cmd = Command::new(java);
    cmd.args([
        "-Xmx128m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Xshare:auto",
        "-XX:-UsePerfData",
        "-Djava.net.preferIPv4Stack=true",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-cp",
        &full,
        CURATOR_CLASS,
    ]);
    Ok(cmd)
}

/// The Python that runs kazoo participants: `$ZK_HARNESS_PYTHON`, else
/// `/usr/bin/python3` (Debian's `python3-kazoo` is installed for it; a `python3` earlier
/// on `PATH`, e.g. from pyenv, may not have kazoo).
pub(super) fn python() -> PathBuf {
    std::env::var_os("ZK_HARNESS_PYTHON")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/usr/bin/python3"), PathBuf::from)
}

pub(super) fn kazoo_command() -> PeerResult<Command> {
    static KAZOO: OnceLock<Result<(), String>> = OnceLock::new();
    let python = python();
    let check = KAZOO.get_or_init(|| {
        match Command::new(&python)
            .args(["-c", "import kazoo"])
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Err(e.to_string()),
        }
    });
    if let Err(message) = check {
        return Err(PeerError::NotInstalled {
            what: format!("kazoo for {} ({message})", python.display()),
            hint: "run ./setup.sh (Debian package python3-kazoo), or set ZK_HARNESS_PYTHON"
                .to_string(),
        });
    }
    let dir = prepared_dir()?;
    let mut cmd = Command::new(python);
    // -u: unbuffered, so every answer line reaches the pipe at once.
    cmd.arg("-u").arg(dir.join(KAZOO_SCRIPT));
    Ok(cmd)
}
