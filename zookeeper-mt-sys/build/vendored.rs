//! Feature `vendored`: compiles the pinned ZooKeeper C client into a static archive.
//!
//! The recipe follows the C client's own build of `libzookeeper_mt` (CMakeLists.txt with
//! WANT_SYNCAPI, or `libzkmt_la` + `libhashtable_la` in Makefile.am): the sources below,
//! `THREADED`, `USE_STATIC_LIB`, and a `config.h` written here instead of by
//! configure/cmake. OpenSSL and Cyrus SASL are left out unless features `tls` / `sasl` ask
//! for them: `extras()` then adds their defines, sources and libraries (found with
//! pkg-config), and compiles `build/secure_init.c` in place of `src/zookeeper.c`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// Not `zookeeper_mt`: with a name of its own, the linker cannot pick the system's
/// `libzookeeper_mt.a`/`.so` from a search path instead of this archive.
const LIB_NAME: &str = "zookeeper_mt_vendored";

/// CMakeLists.txt `zookeeper_sources` (mt adaptor) plus `hashtable_sources`, which
/// upstream links into the same library.
const SOURCES: &[&str] = &[
    "src/zookeeper.c",
    "src/recordio.c",
    "generated/zookeeper.jute.c",
    "src/zk_log.c",
    "src/zk_hashtable.c",
    "src/addrvec.c",
    "src/mt_adaptor.c",
    "src/hashtable/hashtable.c",
    "src/hashtable/hashtable_itr.c",
];

/// Defines every translation unit gets (CMake: add_definitions / WANT_SYNCAPI).
/// `_GNU_SOURCE` is what configure puts in its default CFLAGS so that glibc exposes the
/// getaddrinfo error codes (EAI_ADDRFAMILY, EAI_NODATA) zookeeper.c checks for.
const DEFINES: &[&str] = &["THREADED", "USE_STATIC_LIB", "_GNU_SOURCE"];

/// `config.h` as cmake_config.h.in comes out on Linux (everything these sources test for
/// is present on any Unix with glibc, musl or the BSD libc). SOCK_CLOEXEC_ENABLED stays
/// off, as in upstream's default build and the distribution packages.
const CONFIG_H: &str = "\
#ifndef CONFIG_H_
#define CONFIG_H_
#define HAVE_ARPA_INET_H 1
#define HAVE_DLFCN_H 1
#define HAVE_FCNTL_H 1
#define HAVE_GENERATED_ZOOKEEPER_JUTE_C 1
#define HAVE_GENERATED_ZOOKEEPER_JUTE_H 1
#define HAVE_GETCWD 1
#define HAVE_GETHOSTBYNAME 1
#define HAVE_GETHOSTNAME 1
#define HAVE_GETLOGIN 1
#define HAVE_GETPWUID_R 1
#define HAVE_GETTIMEOFDAY 1
#define HAVE_GETUID 1
#define HAVE_INTTYPES_H 1
#define HAVE_MEMMOVE 1
#define HAVE_MEMORY_H 1
#define HAVE_MEMSET 1
#define HAVE_NETDB_H 1
#define HAVE_NETINET_IN_H 1
#define HAVE_POLL 1
#define HAVE_SOCKET 1
#define HAVE_STDINT_H 1
#define HAVE_STDLIB_H 1
#define HAVE_STRCHR 1
#define HAVE_STRDUP 1
#define HAVE_STRERROR 1
#define HAVE_STRINGS_H 1
#define HAVE_STRING_H 1
#define HAVE_STRTOL 1
#define HAVE_SYS_SOCKET_H 1
#define HAVE_SYS_STAT_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_TYPES_H 1
#define HAVE_SYS_UTSNAME_H 1
#define HAVE_UNISTD_H 1
#define ZOO_IPV6_ENABLED 1
#define POLL_NFDS_TYPE nfds_t
";

/// What an optional feature adds to the plain client.
#[derive(Default, Clone)]
struct Extras {
    /// Defines for the C sources; those tested in zookeeper.h (HAVE_OPENSSL_H,
    /// HAVE_CYRUS_SASL_H) change the public API, so dependents need them too.
    defines: Vec<&'static str>,
    /// Further sources, e.g. `src/zk_sasl.c` for SASL.
    sources: Vec<&'static str>,
    /// Further system libraries, e.g. `ssl` and `crypto`, or `sasl2`.
    libs: Vec<String>,
    /// Where those libraries live, if not in the linker's default paths.
    lib_dirs: Vec<PathBuf>,
    /// Include dirs of those libraries' headers; zookeeper.h includes
    /// `openssl/ossl_typ.h` / `sasl/sasl.h` under the defines, so dependents need them too.
    include_dirs: Vec<PathBuf>,
    /// Compile this file (relative to the crate dir) instead of `src/zookeeper.c`.
    replaces_zookeeper_c: Option<&'static str>,
}

/// Filled by `build()`, read by `configure_dependent()`.
static EXTRAS: std::sync::OnceLock<Extras> = std::sync::OnceLock::new();

fn extras() -> Result<Extras, String> {
    #[allow(unused_mut)]
    let mut extras = Extras::default();
    #[cfg(feature = "tls")]
    {
        let found = system_library(
            "tls",
            "openssl",
            "openssl/ssl.h",
            &["ssl", "crypto"],
            "libssl-dev",
        )?;
        extras.defines.push("HAVE_OPENSSL_H");
        extras.absorb(found);
    }
    #[cfg(feature = "sasl")]
    {
        let found = system_library(
            "sasl",
            "libsasl2",
            "sasl/sasl.h",
            &["sasl2"],
            "libsasl2-dev",
        )?;
        extras.defines.push("HAVE_CYRUS_SASL_H");
        extras.sources.push("src/zk_sasl.c");
        extras.absorb(found);
    }
    if cfg!(any(feature = "tls", feature = "sasl")) {
        extras.replaces_zookeeper_c = Some("build/secure_init.c");
    }
    Ok(extras)
}

/// Headers, libraries and their dirs of one system library.
#[cfg_attr(not(any(feature = "tls", feature = "sasl")), allow(dead_code))]
struct SystemLibrary {
    include_dirs: Vec<PathBuf>,
    lib_dirs: Vec<PathBuf>,
    libs: Vec<String>,
}

#[cfg_attr(not(any(feature = "tls", feature = "sasl")), allow(dead_code))]
impl Extras {
    fn absorb(&mut self, found: SystemLibrary) {
        for dir in found.include_dirs {
            if !self.include_dirs.contains(&dir) {
                self.include_dirs.push(dir);
            }
        }
        for dir in found.lib_dirs {
            if !self.lib_dirs.contains(&dir) {
                self.lib_dirs.push(dir);
            }
        }
        self.libs.extend(found.libs);
    }
}

/// Finds a system library for `feature`: pkg-config `module` first, else `header` in the
/// compiler's default include path and `default_libs` on the default library path (a
/// system without the .pc file). Fails with a message naming the package to install.
#[cfg_attr(not(any(feature = "tls", feature = "sasl")), allow(dead_code))]
fn system_library(
    feature: &str,
    module: &str,
    header: &str,
    default_libs: &[&str],
    debian_package: &str,
) -> Result<SystemLibrary, String> {
    let missing = |detail: String| {
        format!(
            "feature `{feature}` needs the development files of {module} ({header}), but {detail}.\n\
             \x20 * Debian/Ubuntu: `apt-get install {debian_package}`, or run `scripts/setup-security.sh`\n\
             \x20   from the repository, which installs everything the `tls` and `sasl` features need;\n\
             \x20 * elsewhere: install {module} with its headers and make `pkg-config {module}` find it\n\
             \x20   (PKG_CONFIG_PATH)"
        )
    };
    // Link lines are printed after the vendored archive (see build()): with
    // `--as-needed` a shared library named before the archive that uses it is dropped.
    let probed = pkg_config::Config::new()
        .cargo_metadata(false)
        .env_metadata(true)
        .probe(module);
    let found = match probed {
        Ok(lib) => SystemLibrary {
            include_dirs: lib.include_paths,
            // The linker searches the system dirs anyway; naming them could only let a
            // system library shadow one found elsewhere.
            lib_dirs: lib
                .link_paths
                .into_iter()
                .filter(|dir| !is_system_lib_dir(dir))
                .collect(),
            libs: lib.libs,
        },
        Err(pkg_error) => {
            if !default_include_dirs()
                .iter()
                .any(|dir| dir.join(header).is_file())
            {
                let why = pkg_error.to_string();
                let why = why.lines().map(str::trim).find(|line| !line.is_empty());
                return Err(missing(format!(
                    "pkg-config does not find it ({}) and no {header} is in /usr/include or \
                     /usr/local/include",
                    why.unwrap_or("not found")
                )));
            }
            SystemLibrary {
                include_dirs: Vec::new(),
                lib_dirs: Vec::new(),
                libs: default_libs.iter().map(|lib| lib.to_string()).collect(),
            }
        }
    };
    // pkg-config can know a module whose headers are gone (runtime package only, or a
    // stale .pc file): say so now rather than with a compiler error deep in zookeeper.h.
    let mut search = found.include_dirs.clone();
    search.extend(default_include_dirs());
    if !search.iter().any(|dir| dir.join(header).is_file()) {
        return Err(missing(format!(
            "{header} is in none of {}",
            search
                .iter()
                .map(|dir| dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(found)
}

#[cfg_attr(not(any(feature = "tls", feature = "sasl")), allow(dead_code))]
fn is_system_lib_dir(dir: &Path) -> bool {
    let dir = dir.to_string_lossy();
    let dir = dir.trim_end_matches('/');
    ["/lib", "/lib64", "/usr/lib", "/usr/lib64"].contains(&dir)
        || ((dir.starts_with("/usr/lib/") || dir.starts_with("/lib/"))
            && dir.ends_with("-linux-gnu")
            && dir.matches('/').count() == if dir.starts_with("/usr") { 3 } else { 2 })
}

#[cfg_attr(not(any(feature = "tls", feature = "sasl")), allow(dead_code))]
fn default_include_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![
        PathBuf::from("/usr/include"),
        PathBuf::from("/usr/local/include"),
    ];
    if let Ok(arch) = env::var("CARGO_CFG_TARGET_ARCH") {
        dirs.push(PathBuf::from(format!("/usr/include/{arch}-linux-gnu")));
    }
    dirs
}

/// Gives a C compilation that includes zookeeper.h (the layout probes) the defines and
/// include dirs the vendored library was built with, so it sees the same API and layout.
pub fn configure_dependent(build: &mut cc::Build) {
    if let Some(extras) = EXTRAS.get() {
        for define in &extras.defines {
            build.define(define, None);
        }
        for dir in &extras.include_dirs {
            build.include(dir);
        }
    }
}

/// Builds and links the C client; returns an include dir holding `zookeeper.h` and the
/// headers it pulls in (`zookeeper.jute.h` comes from `generated/`, so the dir is
/// assembled in OUT_DIR).
pub fn build(out_dir: &Path) -> Result<PathBuf, String> {
    let src = source_dir()?;
    println!("cargo:rerun-if-changed={}", src.display());
    if env::var("CARGO_CFG_TARGET_FAMILY").as_deref() != Ok("unix") {
        return Err("the vendored C client is only set up for Unix targets".into());
    }
    let extras = extras()?;
    let _ = EXTRAS.set(extras.clone());

    let include_dir = out_dir.join("include");
    copy_public_headers(&src, &include_dir)?;
    // Kept out of the public include dir: dependents must not see this config.h.
    let config_dir = out_dir.join("config");
    fs::create_dir_all(&config_dir)
        .map_err(|e| format!("creating {}: {e}", config_dir.display()))?;
    let config_h = format!(
        "{CONFIG_H}#define PACKAGE_STRING \"zookeeper C client {}\"\n#endif\n",
        upstream_version(&src)
    );
    fs::write(config_dir.join("config.h"), config_h)
        .map_err(|e| format!("writing config.h: {e}"))?;

    let mut build = cc::Build::new();
    build
        .include(&config_dir)
        .include(&include_dir)
        // zk_hashtable.c includes "hashtable/hashtable.h".
        .include(src.join("src"))
        .warnings(false)
        .out_dir(out_dir.join("vendored"));
    for define in DEFINES.iter().chain(&extras.defines) {
        build.define(define, None);
    }
    for dir in &extras.include_dirs {
        build.include(dir);
    }
    for file in SOURCES.iter().chain(&extras.sources) {
        match extras.replaces_zookeeper_c {
            // The replacement #includes "zookeeper.c", found through `src/` above.
            Some(replacement) if *file == "src/zookeeper.c" => {
                let manifest =
                    env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?;
                build.file(Path::new(&manifest).join(replacement));
            }
            _ => {
                build.file(src.join(file));
            }
        }
    }
    // Prints cargo:rustc-link-lib=static=zookeeper_mt_vendored and its search path.
    build
        .try_compile(LIB_NAME)
        .map_err(|e| format!("compiling the vendored C client: {e}"))?;

    // A static archive carries no dependencies of its own: name them after it.
    for dir in &extras.lib_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    for lib in extras
        .libs
        .iter()
        .map(String::as_str)
        .chain(["pthread", "m"])
    {
        println!("cargo:rustc-link-lib={lib}");
    }
    if !extras.defines.is_empty() {
        // For dependents' build scripts (DEP_ZOOKEEPER_MT_DEFINES) that compile C against
        // zookeeper.h: it declares the TLS/SASL API only under these defines.
        println!("cargo:defines={}", extras.defines.join(","));
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        // clock_gettime lives in librt before glibc 2.17 (upstream's CMake links it too).
        println!("cargo:rustc-link-lib=rt");
    }
    Ok(include_dir)
}

/// Files a usable tree has; the generated ones included, which a plain upstream checkout
/// lacks (zookeeper.jute.c is produced by the Java build).
const REQUIRED: &[&str] = &[
    "include/zookeeper.h",
    "generated/zookeeper.jute.c",
    "src/mt_adaptor.c",
];

/// Where the C client source is, in this order:
/// 1. `$ZOOKEEPER_C_CLIENT_SRC` (absolute), if set: used or reported, never skipped;
/// 2. `c-client/` in this crate: the copy the published package carries (staged by
///    `scripts/package.sh`; gitignored, so only there in the repository while packaging);
/// 3. `../vendor/zookeeper-client-c`: where `vendor/fetch-c-client.sh` unpacks it in the
///    repository.
///
/// 2 and 3 hold the same pinned tree (both scripts check its sha256).
fn source_dir() -> Result<PathBuf, String> {
    if let Some(dir) = env::var_os("ZOOKEEPER_C_CLIENT_SRC") {
        // Relative would be resolved from the crate dir, not where the user typed it.
        if Path::new(&dir).is_relative() {
            return Err(format!(
                "ZOOKEEPER_C_CLIENT_SRC must be an absolute path (got {})",
                Path::new(&dir).display()
            ));
        }
        let src = PathBuf::from(dir);
        return match missing_file(&src) {
            None => Ok(src),
            Some(missing) => Err(format!(
                "feature `vendored` needs the C client source, but {} (from \
                 ZOOKEEPER_C_CLIENT_SRC) has no {missing}; run `vendor/fetch-c-client.sh` in \
                 the repository (it honours ZOOKEEPER_C_CLIENT_SRC too)",
                src.display()
            )),
        };
    }
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?);
    let candidates = [
        manifest.join("c-client"),
        manifest.join("../vendor/zookeeper-client-c"),
    ];
    let mut problems = Vec::new();
    for src in candidates {
        match missing_file(&src) {
            None => return Ok(src),
            Some(_) if !src.exists() => problems.push(format!("{} does not exist", src.display())),
            Some(missing) => problems.push(format!("{} has no {missing}", src.display())),
        }
    }
    Err(format!(
        "feature `vendored` needs the C client source, but {}; the published package \
         carries it in c-client/, and in the repository `vendor/fetch-c-client.sh` fetches it \
         (or set ZOOKEEPER_C_CLIENT_SRC to an absolute path holding it)",
        problems.join(" and ")
    ))
}

fn missing_file(src: &Path) -> Option<&'static str> {
    REQUIRED
        .iter()
        .copied()
        .find(|file| !src.join(file).is_file())
}

/// `include/` and `generated/zookeeper.jute.h`, as `make install` lays them out.
fn copy_public_headers(src: &Path, include_dir: &Path) -> Result<(), String> {
    let err = |path: &Path, e: std::io::Error| format!("{}: {e}", path.display());
    fs::create_dir_all(include_dir).map_err(|e| err(include_dir, e))?;
    let mut headers = vec![src.join("generated/zookeeper.jute.h")];
    let upstream_include = src.join("include");
    for entry in fs::read_dir(&upstream_include).map_err(|e| err(&upstream_include, e))? {
        let path = entry.map_err(|e| err(&upstream_include, e))?.path();
        if path.extension().is_some_and(|ext| ext == "h") {
            headers.push(path);
        }
    }
    for header in headers {
        let target = include_dir.join(header.file_name().expect("a header file name"));
        fs::copy(&header, &target).map_err(|e| err(&header, e))?;
    }
    Ok(())
}

/// The release the tree comes from, for the client's "zookeeper.version" log line.
/// zookeeper_version.h is no help: upstream left it at "3.8.0" on the 3.8 branch.
fn upstream_version(src: &Path) -> String {
    fs::read_to_string(src.join("CMakeLists.txt"))
        .ok()
        .and_then(|cmake| {
            let rest = &cmake[cmake.find("project(zookeeper VERSION ")? + 26..];
            Some(rest[..rest.find(')')?].trim().to_string())
        })
        .unwrap_or_else(|| "(vendored)".into())
}
