#!/usr/bin/env bash
# Proves that the four publishable crates build for a user who has only the registry:
#
#   1. scripts/package.sh: the .crate files of zookeeper-mt-sys (with the pinned C client
#      source staged inside), zookeeper-mt and zookeeper-mt-recipes, each verified by cargo
#      building it from its own contents;
#   2. `cargo publish --dry-run` of the three (no token needed, nothing uploaded);
#   3. a fresh cargo project in a temporary directory, depending on zookeeper-mt and
#      zookeeper-mt-recipes by version only, with crates-io replaced by a local directory
#      registry holding the three unpacked .crate files and the third-party crates they
#      need (fetched with `cargo vendor` for exactly those .crate files), built offline,
#      so nothing can come from the repository. Its program connects to a ZooKeeper
#      server started here on a free loopback port, creates, reads and deletes a node, and
#      takes and releases a zookeeper_mt_recipes::Lock. Built and run twice:
#        - default features: must link the system libzookeeper_mt (Debian
#          libzookeeper-mt-dev);
#        - `vendored,tls`: the C client compiled from the source in the -sys .crate, with
#          OpenSSL (Debian libssl-dev); must not link libzookeeper_mt.so.
#   4. a second fresh project, from the same registry, with zookeeper-testing as its only
#      dev-dependency: its `cargo test` starts a TestingServer, a FaultProxy (block,
#      unblock) and a 3-member TestingCluster (kills the leader, waits for a new one) and
#      must pass; its dependency tree must hold no C build and not zookeeper-mt.
#
# Steps 1 and 2 pass --allow-dirty: this is a check of what the working tree would
# publish, not a release (scripts/package.sh refuses uncommitted changes without it).
# The server and the temporary directory are removed on exit, also on failure. Uses the
# usual CARGO_HOME (its registry cache saves downloads); the fresh project gets a new
# target dir, so its dependencies are compiled from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the crates' build would take instead of the .crate contents or the system library.
unset ZOOKEEPER_C_CLIENT_SRC ZOOKEEPER_LIB_DIR ZOOKEEPER_INCLUDE_DIR ZOOKEEPER_STATIC

say() { printf 'registry-check: %s\n' "$*" >&2; }

tmp=$(mktemp -d)
zk_pid=
cleanup() {
    if [[ -n $zk_pid ]]; then
        kill "$zk_pid" 2>/dev/null || true
        wait "$zk_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

metadata() { # metadata <python expression over `m`, the workspace metadata>
    cargo metadata --format-version 1 --no-deps |
        python3 -c "import json, sys; m = json.load(sys.stdin); print($1)"
}
version_of() {
    metadata "next(p['version'] for p in m['packages'] if p['name'] == '$1')"
}

# 1 and 2.
say "packaging"
scripts/package.sh --allow-dirty
say "cargo publish --dry-run"
scripts/package.sh publish --dry-run --allow-dirty

target_dir=$(metadata "m['target_directory']")
crates=()
for crate in zookeeper-mt-sys zookeeper-mt zookeeper-mt-recipes zookeeper-testing; do
    crates+=("$target_dir/package/$crate-$(version_of "$crate").crate")
done

# 3a. The registry: the unpacked .crate files, as a directory source wants them.
registry="$tmp/registry"
mkdir -p "$registry"
for file in "${crates[@]}"; do
    tar -xzf "$file" -C "$registry"
    dir="$registry/$(basename "$file" .crate)"
    printf '{"files":{},"package":"%s"}\n' "$(sha256sum "$file" | cut -d' ' -f1)" \
        >"$dir/.cargo-checksum.json"
done

# 3b. The third-party crates those need, resolved from crates.io as a user's build would:
# a throwaway project depending on the unpacked crates (patched in by path, so
# `cargo vendor` skips them) with every feature that can add a dependency.
helper="$tmp/vendor-helper"
mkdir -p "$helper/src"
touch "$helper/src/lib.rs"
cat >"$helper/Cargo.toml" <<EOF
[package]
name = "vendor-helper"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
zookeeper-mt-recipes = { version = "$(version_of zookeeper-mt-recipes)", features = ["vendored", "tls", "sasl"] }
zookeeper-testing = { version = "$(version_of zookeeper-testing)", features = ["peers"] }

[patch.crates-io]
zookeeper-mt-sys = { path = "$registry/$(basename "${crates[0]}" .crate)" }
zookeeper-mt = { path = "$registry/$(basename "${crates[1]}" .crate)" }
zookeeper-mt-recipes = { path = "$registry/$(basename "${crates[2]}" .crate)" }
zookeeper-testing = { path = "$registry/$(basename "${crates[3]}" .crate)" }

[workspace]
EOF
say "cargo vendor (third-party dependencies of the .crate files)"
(cd "$helper" && cargo vendor --quiet --versioned-dirs "$registry" >/dev/null)

# 3c. The user's project: crates-io is the directory registry, and nothing is online.
app="$tmp/app"
mkdir -p "$app/src" "$app/.cargo"
cat >"$app/.cargo/config.toml" <<EOF
[source.crates-io]
replace-with = "local-crate-files"

[source.local-crate-files]
directory = "$registry"

[net]
offline = true
EOF
cat >"$app/Cargo.toml" <<EOF
[package]
name = "registry-check"
version = "0.0.0"
edition = "2021"
publish = false

[features]
vendored = ["zookeeper-mt-recipes/vendored"]
tls = ["zookeeper-mt-recipes/tls", "zookeeper-mt/tls"]

[dependencies]
zookeeper-mt = "$(version_of zookeeper-mt)"
zookeeper-mt-recipes = "$(version_of zookeeper-mt-recipes)"

[workspace]
EOF
cat >"$app/src/main.rs" <<'EOF'
//! Connects to the server named on the command line and exercises the client and a recipe.
use std::time::Duration;
use zookeeper_mt::{CreateMode, Timeout, ZooKeeper};
use zookeeper_mt_recipes::Lock;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hosts = std::env::args().nth(1).ok_or("usage: registry-check HOST:PORT")?;
    // The server may still be starting: the C client retries until the session is up.
    let zk = ZooKeeper::builder(&hosts)
        .connect_timeout(Duration::from_secs(60))
        .connect()?;
    let path = format!("/registry-check-{}", std::process::id());
    let data = b"built from the .crate files";

    let created = zk.create(&path, data, CreateMode::Persistent)?;
    let (read, stat) = zk.get(&created)?;
    assert_eq!(read, data, "read back what was written");
    println!("node {created}: created, read back {} bytes (version {})", read.len(), stat.version);

    let lock_dir = format!("{path}-lock");
    let lock = Lock::new(&zk, &lock_dir)?;
    let guard = lock.acquire(Timeout::After(Duration::from_secs(30)))?;
    let node = guard.node().to_string();
    assert!(zk.exists(&node)?.is_some(), "the lock node exists while held");
    println!("lock {lock_dir}: held (node {node})");
    guard.release()?;
    assert!(zk.exists(&node)?.is_none(), "release deletes the lock node");
    assert!(lock.holder()?.is_none(), "nobody holds the lock after release");
    println!("lock {lock_dir}: released");

    zk.delete(&lock_dir, None)?;
    zk.delete(&created, None)?;
    assert!(zk.exists(&created)?.is_none(), "the node is gone");
    println!("node {created}: deleted");

    #[cfg(feature = "tls")]
    println!("tls: {} available", std::any::type_name::<zookeeper_mt::TlsConfig>());
    zk.close()?;
    println!("registry-check: OK");
    Ok(())
}
EOF

# A ZooKeeper server (Debian's `zookeeper` package) on a free loopback port.
java_dir=/usr/share/java
[[ -f $java_dir/zookeeper.jar ]] || {
    say "error: no $java_dir/zookeeper.jar (Debian package zookeeper; ./setup.sh installs it)"
    exit 1
}
classpath=$java_dir/zookeeper.jar
for jar in zookeeper-jute.jar slf4j-log4j12.jar log4j-1.2.jar; do
    [[ -f $java_dir/$jar ]] && classpath+=":$java_dir/$jar"
done
port=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
mkdir -p "$tmp/zk/data"
cat >"$tmp/zk/zoo.cfg" <<EOF
tickTime=2000
dataDir=$tmp/zk/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=
EOF
cat >"$tmp/zk/log4j.properties" <<'EOF'
log4j.rootLogger=WARN, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] - %m%n
EOF
java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData \
    -Djava.net.preferIPv4Stack=true -Dzookeeper.forceSync=no \
    -Dlog4j.configuration="file:$tmp/zk/log4j.properties" \
    -cp "$classpath" org.apache.zookeeper.server.ZooKeeperServerMain "$tmp/zk/zoo.cfg" \
    >"$tmp/zk/server.log" 2>&1 &
zk_pid=$!
say "ZooKeeper server pid $zk_pid on 127.0.0.1:$port"

run() { # run <label> <expect: system|vendored> <cargo feature args...>
    local label=$1 expect=$2 bin="$tmp/target/debug/registry-check" start libs
    shift 2
    say "== $label: build =="
    start=$SECONDS
    (cd "$app" && cargo build --quiet --target-dir "$tmp/target" "$@")
    say "built in $((SECONDS - start)) s"
    libs=$(ldd "$bin")
    if grep -q 'libzookeeper_mt\.so' <<<"$libs"; then
        [[ $expect == system ]] || {
            say "error: $label links the shared libzookeeper_mt:"
            printf '%s\n' "$libs" >&2
            exit 1
        }
    else
        [[ $expect == vendored ]] || {
            say "error: $label does not link the system libzookeeper_mt:"
            printf '%s\n' "$libs" >&2
            exit 1
        }
    fi
    say "== $label: run =="
    if ! "$bin" "127.0.0.1:$port" >"$tmp/run.log" 2>&1; then
        cat "$tmp/run.log" >&2
        say "error: $label failed; the server's log:"
        cat "$tmp/zk/server.log" >&2
        exit 1
    fi
    cat "$tmp/run.log"
    grep -q '^registry-check: OK$' "$tmp/run.log"
}

run "system libzookeeper_mt (default features)" system
run "vendored C client with TLS (features vendored,tls)" vendored --features vendored,tls

# 4. A user's own test suite on zookeeper-testing alone (servers, proxy, expire_session).
tapp="$tmp/testing-app"
mkdir -p "$tapp/src" "$tapp/tests" "$tapp/.cargo"
cp "$app/.cargo/config.toml" "$tapp/.cargo/config.toml"
cat >"$tapp/Cargo.toml" <<EOF
[package]
name = "testing-check"
version = "0.0.0"
edition = "2021"
publish = false

[dev-dependencies]
zookeeper-testing = "$(version_of zookeeper-testing)"

[workspace]
EOF
touch "$tapp/src/lib.rs"
cat >"$tapp/tests/servers.rs" <<'EOF'
//! A server, an ensemble, a proxy and a session's expiry from the published
//! zookeeper-testing alone.
use std::time::Duration;
use zookeeper_testing::{
    expire_session, four_letter, FaultProxy, HarnessError, ServerOptions, TestingCluster,
    TestingServer, WireSession,
};

const BOUND: Duration = Duration::from_secs(10);

#[test]
fn server_ensemble_and_proxy() -> zookeeper_testing::Result<()> {
    let server = TestingServer::start()?;
    assert_eq!(four_letter(&server.connect_string(), "ruok", BOUND)?, "imok");

    let proxy = FaultProxy::raw(server.connect_string())?;
    assert_eq!(four_letter(&proxy.connect_string(), "ruok", BOUND)?, "imok");
    proxy.block();
    let refused = four_letter(&proxy.connect_string(), "ruok", BOUND);
    assert!(!matches!(refused.as_deref(), Ok("imok")), "blocked proxy answered: {refused:?}");
    proxy.unblock();
    assert_eq!(four_letter(&proxy.connect_string(), "ruok", BOUND)?, "imok");

    let cluster = TestingCluster::start(3, &ServerOptions::for_tests())?;
    let leader = cluster.wait_for_leader(Duration::from_secs(60))?;
    cluster.kill(leader);
    let next = cluster.wait_for_leader(Duration::from_secs(60))?;
    assert_ne!(leader, next, "a killed member cannot lead");
    cluster.restart(leader)?;
    cluster.wait_for_all_serving(Duration::from_secs(60))?;

    let connect = cluster.connect_string();
    let session = WireSession::connect(&connect, BOUND, BOUND)?;
    expire_session(&connect, session.session_id(), session.password(), BOUND)?;
    let resumed = WireSession::resume(&connect, session.session_id(), session.password(), BOUND);
    assert!(matches!(resumed, Err(HarnessError::SessionExpired { .. })), "{resumed:?}");
    Ok(())
}
EOF
say "== zookeeper-testing: a user's test from the .crate file =="
(cd "$tapp" && cargo test --quiet --target-dir "$tmp/target-testing" 2>&1) | tee "$tmp/testing.log"
grep -q 'test result: ok. 1 passed' "$tmp/testing.log" || {
    say "error: the zookeeper-testing user test did not pass"
    exit 1
}
if (cd "$tapp" && cargo tree --edges normal,dev --prefix none) |
    grep -E '^(zookeeper-mt|zookeeper-mt-sys|cc|cmake|pkg-config) '; then
    say "error: zookeeper-testing pulls in C code or the bindings"
    exit 1
fi

say "OK: the .crate files build and work from a registry alone, on the system and the vendored C client; zookeeper-testing runs a user's tests"
