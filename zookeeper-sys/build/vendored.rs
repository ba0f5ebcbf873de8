//! Feature `vendored`: compiles the pinned ZooKeeper C client into a static archive.
//!
//! The recipe follows the C client's own build of `libzookeeper_mt` (CMakeLists.txt with
//! WANT_SYNCAPI, or `libzkmt_la` + `libhashtable_la` in Makefile.am): the sources below,
//! `THREADED`, `USE_STATIC_LIB`, and a `config.h` written here instead of by
//! configure/cmake. OpenSSL and Cyrus SASL are left out; `Extras` is where a later `tls`
//! or `sasl` feature adds its define, sources and libraries.

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
#[derive(Default)]
struct Extras {
    /// Defines for the C sources; those tested in zookeeper.h (HAVE_OPENSSL_H,
    /// HAVE_CYRUS_SASL_H) change the public API, so dependents need them too.
    defines: Vec<&'static str>,
    /// Further sources, e.g. `src/zk_sasl.c` for SASL.
    sources: Vec<&'static str>,
    /// Further system libraries, e.g. `ssl` and `crypto`, or `sasl2`.
    libs: Vec<&'static str>,
}

fn extras() -> Extras {
    Extras::default()
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
    let extras = extras();

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
    for file in SOURCES.iter().chain(&extras.sources) {
        build.file(src.join(file));
    }
    // Prints cargo:rustc-link-lib=static=zookeeper_mt_vendored and its search path.
    build
        .try_compile(LIB_NAME)
        .map_err(|e| format!("compiling the vendored C client: {e}"))?;

    // A static archive carries no dependencies of its own: name them after it.
    for lib in extras.libs.iter().chain(&["pthread", "m"]) {
        println!("cargo:rustc-link-lib={lib}");
    }
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        // clock_gettime lives in librt before glibc 2.17 (upstream's CMake links it too).
        println!("cargo:rustc-link-lib=rt");
    }
    Ok(include_dir)
}

fn source_dir() -> Result<PathBuf, String> {
    let (src, origin) = match env::var_os("ZOOKEEPER_C_CLIENT_SRC") {
        // Relative would be resolved from the crate dir, not where the user typed it.
        Some(dir) if Path::new(&dir).is_relative() => {
            return Err(format!(
                "ZOOKEEPER_C_CLIENT_SRC must be an absolute path (got {})",
                Path::new(&dir).display()
            ))
        }
        Some(dir) => (PathBuf::from(dir), "ZOOKEEPER_C_CLIENT_SRC"),
        None => {
            let manifest =
                env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?;
            (
                Path::new(&manifest).join("../vendor/zookeeper-client-c"),
                "the default location",
            )
        }
    };
    // Generated files included: a plain upstream checkout lacks zookeeper.jute.c.
    let required = [
        "include/zookeeper.h",
        "generated/zookeeper.jute.c",
        "src/mt_adaptor.c",
    ];
    match required.iter().find(|file| !src.join(file).is_file()) {
        None => Ok(src),
        Some(missing) => Err(format!(
            "feature `vendored` needs the C client source, but {} (from {origin}) has no {missing}; \
             run `vendor/fetch-c-client.sh` in the repository (it honours ZOOKEEPER_C_CLIENT_SRC too)",
            src.display()
        )),
    }
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
