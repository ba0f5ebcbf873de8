//! Finds (or builds) `libzookeeper_mt` and compiles the small layout probe that lets the
//! tests check the committed bindings against the header actually in use.
//!
//! Probing order:
//! 1. feature `vendored`: compile the pinned 3.8.2 C client and link it statically (wins
//!    over everything else, so enabling the feature always means the vendored client).
//!    The source is `$ZOOKEEPER_C_CLIENT_SRC`, else `c-client/` in this crate (what the
//!    published package carries), else `../vendor/zookeeper-client-c` (where
//!    `vendor/fetch-c-client.sh` puts it in the repository); see `build/vendored.rs`;
//! 2. `ZOOKEEPER_LIB_DIR` / `ZOOKEEPER_INCLUDE_DIR` (`ZOOKEEPER_STATIC=1` links the `.a`);
//! 3. pkg-config (`zookeeper_mt` or `zookeeper`);
//! 4. the standard paths (`/usr/include/zookeeper/zookeeper.h`, `-lzookeeper_mt`).

use std::env;
use std::path::{Path, PathBuf};

#[cfg(feature = "vendored")]
#[path = "build/vendored.rs"]
mod vendored;

#[cfg(feature = "buildtime-bindgen")]
#[path = "build/bindgen.rs"]
mod generate;

const ENV_KNOBS: &[&str] = &[
    "ZOOKEEPER_LIB_DIR",
    "ZOOKEEPER_INCLUDE_DIR",
    "ZOOKEEPER_STATIC",
    "ZOOKEEPER_C_CLIENT_SRC",
    "PKG_CONFIG_PATH",
];

const STANDARD_INCLUDE_DIRS: &[&str] = &["/usr/include/zookeeper", "/usr/local/include/zookeeper"];

fn main() {
    for knob in ENV_KNOBS {
        println!("cargo:rerun-if-env-changed={knob}");
    }
    println!("cargo:rerun-if-changed=src/layout_probe.c");
    println!("cargo:rerun-if-changed=build");

    // docs.rs has no C client to find or link: the committed bindings document the crate.
    println!("cargo:rerun-if-env-changed=DOCS_RS");
    if env::var_os("DOCS_RS").is_some() {
        return;
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let include_dir = match locate(&out_dir) {
        Ok(dir) => dir,
        Err(reason) => {
            // One clear message beats a wall of linker errors. A library a `tls`/`sasl`
            // feature needs is not the C client: the advice below would mislead.
            let message =
                if reason.starts_with("feature `tls`") || reason.starts_with("feature `sasl`") {
                    format!("\n\nzookeeper-mt-sys: {reason}.\n")
                } else {
                    not_found_message(&reason)
                };
            eprintln!("{message}");
            panic!("{message}");
        }
    };
    println!("cargo:include={}", include_dir.display());

    compile_layout_probe(&include_dir);

    #[cfg(feature = "buildtime-bindgen")]
    generate::bindings(&include_dir, &out_dir);
}

/// Returns the directory holding `zookeeper.h`, having told cargo how to link.
fn locate(out_dir: &Path) -> Result<PathBuf, String> {
    #[cfg(feature = "vendored")]
    {
        vendored::build(out_dir)
    }
    #[cfg(not(feature = "vendored"))]
    {
        let _ = out_dir;
        if let Some(found) = from_env_vars()? {
            return Ok(found);
        }
        if let Some(found) = from_pkg_config() {
            return Ok(found);
        }
        from_standard_paths()
    }
}

#[cfg_attr(feature = "vendored", allow(dead_code))]
fn from_env_vars() -> Result<Option<PathBuf>, String> {
    let lib_dir = env::var_os("ZOOKEEPER_LIB_DIR").map(PathBuf::from);
    let include_dir = env::var_os("ZOOKEEPER_INCLUDE_DIR").map(PathBuf::from);
    if lib_dir.is_none() && include_dir.is_none() {
        return Ok(None);
    }
    let include_dir = match include_dir {
        Some(dir) => dir,
        None => STANDARD_INCLUDE_DIRS
            .iter()
            .map(PathBuf::from)
            .find(|dir| dir.join("zookeeper.h").is_file())
            .ok_or("ZOOKEEPER_LIB_DIR is set but ZOOKEEPER_INCLUDE_DIR is not, and no zookeeper.h is in the standard paths")?,
    };
    if !include_dir.join("zookeeper.h").is_file() {
        return Err(format!(
            "ZOOKEEPER_INCLUDE_DIR={} holds no zookeeper.h",
            include_dir.display()
        ));
    }
    if let Some(lib_dir) = &lib_dir {
        println!("cargo:rustc-link-search=native={}", lib_dir.display());
    }
    emit_link(env::var("ZOOKEEPER_STATIC").is_ok_and(|v| v == "1"));
    Ok(Some(include_dir))
}

#[cfg_attr(feature = "vendored", allow(dead_code))]
fn from_pkg_config() -> Option<PathBuf> {
    for name in ["zookeeper_mt", "zookeeper"] {
        if let Ok(lib) = pkg_config::Config::new().probe(name) {
            for dir in &lib.include_paths {
                for candidate in [dir.clone(), dir.join("zookeeper")] {
                    if candidate.join("zookeeper.h").is_file() {
                        return Some(candidate);
                    }
                }
            }
        }
    }
    None
}

#[cfg_attr(feature = "vendored", allow(dead_code))]
fn from_standard_paths() -> Result<PathBuf, String> {
    let include_dir = STANDARD_INCLUDE_DIRS
        .iter()
        .map(PathBuf::from)
        .find(|dir| dir.join("zookeeper.h").is_file())
        .ok_or("no zookeeper.h under /usr/include/zookeeper or /usr/local/include/zookeeper")?;
    let lib_found = standard_lib_dirs().iter().any(|dir| {
        dir.join("libzookeeper_mt.so").exists() || dir.join("libzookeeper_mt.a").exists()
    });
    if !lib_found {
        return Err(
            "zookeeper.h found but no libzookeeper_mt.so/.a in the standard library paths".into(),
        );
    }
    if Path::new("/usr/local/lib/libzookeeper_mt.so").exists() {
        println!("cargo:rustc-link-search=native=/usr/local/lib");
    }
    emit_link(env::var("ZOOKEEPER_STATIC").is_ok_and(|v| v == "1"));
    Ok(include_dir)
}

fn standard_lib_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/lib"), PathBuf::from("/usr/local/lib")];
    if let (Ok(arch), Ok(os)) = (
        env::var("CARGO_CFG_TARGET_ARCH"),
        env::var("CARGO_CFG_TARGET_OS"),
    ) {
        if os == "linux" {
            dirs.push(PathBuf::from(format!("/usr/lib/{arch}-linux-gnu")));
        }
    }
    dirs
}

fn emit_link(static_link: bool) {
    if static_link {
        println!("cargo:rustc-link-lib=static=zookeeper_mt");
        // The static archive does not carry its own dependencies.
        println!("cargo:rustc-link-lib=pthread");
        println!("cargo:rustc-link-lib=m");
    } else {
        println!("cargo:rustc-link-lib=zookeeper_mt");
    }
}

/// A tiny C file reporting sizes, offsets and constants as the C compiler sees them, so a
/// test can compare them with the committed Rust bindings.
fn compile_layout_probe(include_dir: &Path) {
    let mut build = cc::Build::new();
    build
        .file("src/layout_probe.c")
        .include(include_dir)
        .define("THREADED", None)
        .warnings(false);
    // With `tls`/`sasl` the vendored header includes the OpenSSL / Cyrus SASL headers and
    // declares more: the probe must see exactly what the library was compiled with.
    #[cfg(feature = "vendored")]
    vendored::configure_dependent(&mut build);
    #[cfg(any(feature = "tls", feature = "sasl"))]
    {
        println!("cargo:rerun-if-changed=src/security_probe.c");
        build.file("src/security_probe.c");
    }
    build.compile("zookeeper_mt_sys_layout_probe");
}

fn not_found_message(reason: &str) -> String {
    format!(
        "\n\nzookeeper-mt-sys: could not find the ZooKeeper C client (libzookeeper_mt): {reason}.\n\
         Fix it one of these ways:\n\
         \x20 * install the system library: `apt-get install libzookeeper-mt-dev` (Debian/Ubuntu),\n\
         \x20   or run `./setup.sh` from the repository, which installs everything the project needs;\n\
         \x20 * point at an installed client: ZOOKEEPER_INCLUDE_DIR=<dir with zookeeper.h> and\n\
         \x20   ZOOKEEPER_LIB_DIR=<dir with libzookeeper_mt> (ZOOKEEPER_STATIC=1 links the .a);\n\
         \x20 * build the pinned 3.8.2 client from source: enable the `vendored` feature\n\
         \x20   (`--features zookeeper-mt-sys/vendored`; the published package carries the source,\n\
         \x20   in the repository run `vendor/fetch-c-client.sh` first).\n"
    )
}
