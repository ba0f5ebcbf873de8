//! Compiles the raw C client benchmark (`c/zkbench.c`) against the system
//! `libzookeeper_mt`, so the bench binary can run it next to the Rust client.
//!
//! The executable's path reaches the bench as `ZKBENCH_C_BIN` (empty when it could not be
//! built: the C column is then reported as unavailable, with the compiler's message).
//! Knobs: `CC` (default `cc`), `ZOOKEEPER_INCLUDE_DIR` (default `/usr/include/zookeeper`),
//! `ZOOKEEPER_LIB_DIR` (default: the linker's search path).

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=c/zkbench.c");
    for var in ["CC", "ZOOKEEPER_INCLUDE_DIR", "ZOOKEEPER_LIB_DIR"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo")).join("zkbench");
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let include =
        env::var("ZOOKEEPER_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include/zookeeper".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-Wall", "-DTHREADED"])
        .arg(format!("-I{include}"))
        .arg("c/zkbench.c")
        .arg("-o")
        .arg(&out);
    if let Ok(lib) = env::var("ZOOKEEPER_LIB_DIR") {
        cmd.arg(format!("-L{lib}")).arg(format!("-Wl,-rpath,{lib}"));
    }
    cmd.args(["-lzookeeper_mt", "-lpthread"]);
    let result = cmd.output();
    match result {
        Ok(output) if output.status.success() => {
            println!("cargo:rustc-env=ZKBENCH_C_BIN={}", out.display());
            println!("cargo:rustc-env=ZKBENCH_C_ERROR=");
        }
        other => {
            let why = match other {
                Ok(output) => String::from_utf8_lossy(&output.stderr).replace('\n', " "),
                Err(error) => format!("cannot run {cc}: {error}"),
            };
            println!("cargo:warning=the C client benchmark c/zkbench.c was not built: {why}");
            println!("cargo:rustc-env=ZKBENCH_C_BIN=");
            println!(
                "cargo:rustc-env=ZKBENCH_C_ERROR={}",
                why.chars().take(300).collect::<String>()
            );
        }
    }
}
