//! Regenerates the bindings from the header in use (feature `buildtime-bindgen`).
//!
//! The result lands in `$OUT_DIR/bindings.rs`; `src/lib.rs` includes it instead of the
//! committed `src/bindings.rs`, and `scripts/regen-bindings.sh` copies it over the
//! committed file.

use std::path::Path;

pub fn bindings(include_dir: &Path, out_dir: &Path) {
    let header = include_dir.join("zookeeper.h");
    let generated = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", include_dir.display()))
        .clang_arg("-DTHREADED")
        .allowlist_function("zoo_.*")
        .allowlist_function("zookeeper_.*")
        .allowlist_function("zerror")
        .allowlist_function("is_unrecoverable")
        .allowlist_function("deallocate_(String|ACL)_vector")
        .allowlist_var("ZOO_.*")
        .allowlist_var("Z[A-Z_]+")
        .allowlist_type("Stat")
        .allowlist_type("ACL")
        .allowlist_type("Id")
        .allowlist_type("String_vector")
        .allowlist_type("ACL_vector")
        .allowlist_type("zoo_op.*")
        .allowlist_type("watcher_fn")
        .allowlist_type(".*_completion_t")
        .allowlist_type("log_callback_fn")
        .allowlist_type("clientid_t")
        .allowlist_type("ZooLogLevel")
        .allowlist_type("ZooWatcherType")
        .allowlist_type("ZOO_ERRORS")
        .blocklist_type("FILE")
        .blocklist_type("_IO_.*")
        .blocklist_type("sockaddr")
        .raw_line("use libc::{sockaddr, FILE};")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .expect("bindgen failed on zookeeper.h");
    generated
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("writing bindings.rs");
}
