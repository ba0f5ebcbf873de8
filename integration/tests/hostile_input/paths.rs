//! Path validation against the server itself: each path through the raw C client and over a
//! raw socket; `zookeeper_mt::validate_path` must accept exactly what the server accepts.

use super::*;

struct PathCase {
    label: String,
    bytes: Vec<u8>,
    sequential: bool,
}

fn path_cases(base: &str) -> Vec<PathCase> {
    let b = base;
    let mut cases = Vec::new();
    let mut add = |label: &str, bytes: Vec<u8>, sequential: bool| {
        cases.push(PathCase {
            label: label.to_string(),
            bytes,
            sequential,
        })
    };
    let s = |text: &str| text.replace('B', b).into_bytes();
    // Structure.
    for label in [
        "",
        "a",
        "a/b",
        "/",
        "B",
        "/zookeeper",
        "B/",
        "//",
        "B//x",
        "/.",
        "/..",
        "B/.",
        "B/..",
        "B/./x",
        "B/../x",
        "B/...",
        "B/.x",
        "B/x.",
        "B/..x",
        "B/ x",
    ] {
        add(label, s(label), false);
    }
    add("B/a\\0b (NUL)", s("B/a\0b"), false);
    // Unicode: each forbidden range at its edges, and its neighbours.
    for c in [
        '\u{1}',
        '\t',
        '\u{1f}',
        '\u{7f}',
        '\u{80}',
        '\u{85}',
        '\u{9f}',
        '\u{a0}',
        '\u{d7ff}',
        '\u{e000}',
        '\u{f8ff}',
        '\u{f900}',
        '\u{feff}',
        '\u{ffef}',
        '\u{fff0}',
        '\u{fffd}',
        '\u{ffff}',
        '\u{10000}',
        '\u{1f600}',
        '\u{10ffff}',
    ] {
        add(
            &format!("B/x{}", c.escape_unicode()),
            s(&format!("B/x{c}")),
            false,
        );
    }
    add("B/日本語ü", s("B/日本語ü"), false);
    // Not UTF-8 at all (the API takes &str, so only the server side applies).
    add(
        "B/x\\xff (not UTF-8)",
        [s("B/x"), vec![0xff]].concat(),
        false,
    );
    add(
        "B/x\\xed\\xa0\\x80 (UTF-8 surrogate)",
        [s("B/x"), vec![0xed, 0xa0, 0x80]].concat(),
        false,
    );
    add(
        "B/x\\xc0\\xaf (overlong)",
        [s("B/x"), vec![0xc0, 0xaf]].concat(),
        false,
    );
    // Length.
    add(
        "B/a×100000 (100 KB)",
        [s("B/"), vec![b'a'; 100_000]].concat(),
        false,
    );
    add(
        "B/a×1048577 (> 1 MiB)",
        [s("B/"), vec![b'a'; (1 << 20) + 1]].concat(),
        false,
    );
    // Sequential creates: the server validates path + sequence number.
    for label in ["/", "B/", "B/s-", "B/.", "B/..", "B//", "B/./", "B/x\u{1}"] {
        add(
            &format!("{} (sequential)", label.escape_debug()),
            s(label),
            true,
        );
    }
    cases
}

#[test]
fn path_validation_agrees_with_the_server() {
    let _watchdog = Watchdog::new(
        "path_validation_agrees_with_the_server",
        Duration::from_secs(120),
    );
    let hosts = hosts();
    let address = hosts
        .split(',')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let zk = connect();
    let base = unique("paths");
    zk.create(
        &base,
        b"",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    let c_client = raw::Handle::connect(&hosts);
    let mut wire = wire::Session::connect(&address).expect("raw wire session");
    // SAFETY: reading extern const ints.
    let (persistent, sequential) = unsafe { (sys::ZOO_PERSISTENT, sys::ZOO_PERSISTENT_SEQUENTIAL) };

    let mut created_at_root = Vec::new();
    let mut disagreements = Vec::new();
    println!(
        "{:<44} | {:<38} | {:<40} | ours",
        "input (B = test base)",
        "C client (zoo_aset / zoo_acreate)",
        "server (raw wire setData / create)"
    );
    for case in path_cases(&base) {
        let (server, c_verdict) = if case.sequential {
            (
                wire.create(&case.bytes, 2),
                c_client.create(&case.bytes, sequential, None),
            )
        } else {
            (wire.set_data(&case.bytes), c_client.set(&case.bytes, b""))
        };
        if server == wire::Verdict::Closed {
            wire = wire::Session::connect(&address).expect("raw wire session");
        }
        // Sequential creates at the root are not under the base: remember them.
        if let Some(path) = server.created() {
            created_at_root.push(path);
        }
        if let raw::Verdict::Server(0, Some(path)) = &c_verdict {
            created_at_root.push(path.clone());
        }
        // A plain create through C too, where the path is valid for us (it must then
        // be valid for the server: any error but BADARGUMENTS).
        let ours = match std::str::from_utf8(&case.bytes) {
            Ok(path) => Some(validate_path(path, case.sequential)),
            Err(_) => None,
        };
        if !case.sequential && matches!(ours, Some(Ok(()))) {
            let create = c_client.create(&case.bytes, persistent, None);
            if matches!(
                create,
                raw::Verdict::ClientRejected(sys::ZBADARGUMENTS)
                    | raw::Verdict::Server(sys::ZBADARGUMENTS, _)
            ) {
                disagreements.push(format!(
                    "{}: zoo_create {}, ours accept",
                    case.label,
                    create.describe()
                ));
            }
        }
        let ours_text = match &ours {
            None => "n/a (not &str)".to_string(),
            Some(Ok(())) => "accept".to_string(),
            Some(Err(Error::InvalidPath { reason, .. })) => format!("InvalidPath: {reason}"),
            Some(Err(other)) => panic!("{}: validate_path gave {other:?}", case.label),
        };
        println!(
            "{:<44} | {:<38} | {:<40} | {}",
            case.label,
            c_verdict.describe(),
            server.describe(),
            ours_text
        );
        // The C client must not accept what the server rejects, nor the reverse.
        if let raw::Verdict::ClientRejected(rc) = c_verdict {
            assert_eq!(rc, sys::ZBADARGUMENTS, "{}", case.label);
        }
        let server_accepts = if case.sequential {
            server.creates()
        } else {
            server.accepts_path()
        };
        if let Some(ours) = ours {
            if ours.is_ok() != server_accepts {
                disagreements.push(format!(
                    "{}: server {}, ours {}",
                    case.label,
                    server.describe(),
                    ours_text
                ));
            }
        }
    }
    wire.close();
    drop(c_client);
    for path in created_at_root {
        if !path.starts_with(&base) {
            let _ = zk.delete(&path, None);
        }
    }
    delete_tree(&zk, &base);
    zk.close().unwrap();
    assert!(
        disagreements.is_empty(),
        "validate_path disagrees with the server:\n{}",
        disagreements.join("\n")
    );
}

#[test]
fn long_paths_are_typed_errors() {
    let _watchdog = Watchdog::new("long_paths_are_typed_errors", Duration::from_secs(60));
    let zk = connect();
    let base = unique("long");
    zk.create(
        &base,
        b"",
        zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
    )
    .unwrap();
    // 100 KB name: valid for the server and for us; round trip.
    let long = format!("{base}/{}", "n".repeat(100_000));
    assert_eq!(
        zk.create(
            &long,
            b"x",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open())
        )
        .unwrap(),
        long
    );
    assert_eq!(zk.get(&long).unwrap().0, b"x");
    assert_eq!(zk.get_children(&base).unwrap(), vec!["n".repeat(100_000)]);
    zk.delete(&long, None).unwrap();
    // Over 1 MiB: the server would drop the connection; we refuse it first.
    let huge = format!("{base}/{}", "n".repeat((1 << 20) + 1));
    let error = zk
        .create(
            &huge,
            b"",
            zookeeper_mt::CreateOptions::new(CreateMode::Persistent).with_acl(open()),
        )
        .unwrap_err();
    assert!(matches!(error, Error::InvalidPath { .. }), "{error:?}");
    assert!(matches!(zk.exists(&huge), Err(Error::InvalidPath { .. })));
    assert!(matches!(
        zk.delete(&huge, None),
        Err(Error::InvalidPath { .. })
    ));
    assert!(matches!(
        zk.multi(&[Op::check(&huge, -1)]),
        Err(Error::InvalidPath { .. })
    ));
    // The session never dropped.
    assert_eq!(zk.state(), SessionState::Connected);
    zk.delete(&base, None).unwrap();
    zk.close().unwrap();
}
