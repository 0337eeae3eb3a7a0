//! Source archives: deterministic building with ignore rules, and safe extraction of hostile
//! archives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tfops_core::source::{ExtractError, ExtractLimits, build_archive, extract};

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, content).unwrap();
}

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(r, "main.tf", "resource \"terraform_data\" \"a\" {}\n");
    write(r, "modules/net/main.tf", "variable \"cidr\" {}\n");
    write(r, "modules/net/README.md", "docs\n");
    write(r, ".git/HEAD", "ref: refs/heads/main\n");
    write(r, ".git/objects/ab/cdef", "blob");
    write(r, ".terraform/providers/p", "binary");
    write(r, "scripts/run.sh", "#!/bin/sh\necho hi\n");
    fs::set_permissions(r.join("scripts/run.sh"), fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("modules/net", r.join("net")).unwrap();
    dir
}

fn archive(root: &Path, ignore: Option<&str>) -> (Vec<u8>, tfops_core::source::ArchiveSummary) {
    let mut out = Vec::new();
    let summary = build_archive(root, ignore, &mut out).unwrap();
    (out, summary)
}

fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.push((rel, format!("-> {}", fs::read_link(&p).unwrap().display())));
            } else if meta.is_dir() {
                out.push((rel.clone(), "dir".into()));
                walk(base, &p, out);
            } else {
                let exec = meta.permissions().mode() & 0o111 != 0;
                out.push((
                    rel,
                    format!(
                        "{}{}",
                        fs::read_to_string(&p).unwrap(),
                        if exec { " (x)" } else { "" }
                    ),
                ));
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

#[test]
fn the_same_tree_gives_the_same_bytes() {
    let t = tree();
    let (a, sa) = archive(t.path(), None);
    // Times and permissions other than the executable bit do not matter.
    fs::set_permissions(t.path().join("main.tf"), fs::Permissions::from_mode(0o600)).unwrap();
    let f = fs::File::options()
        .append(true)
        .open(t.path().join("main.tf"))
        .unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(12345))
        .unwrap();
    let (b, sb) = archive(t.path(), None);
    assert_eq!(a, b);
    assert_eq!(sa.sha256, sb.sha256);
    assert_eq!(sa.size, a.len() as u64);
    write(t.path(), "main.tf", "changed\n");
    assert_ne!(archive(t.path(), None).1.sha256, sa.sha256);
}

#[test]
fn ignore_rules_git_and_sourceignore_filter_the_tree() {
    let t = tree();
    write(t.path(), ".sourceignore", "*.md\n.terraform/\n");
    let (bytes, summary) = archive(t.path(), Some("scripts/*\n!scripts/run.sh\n"));
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("src");
    extract(&bytes[..], &dest, ExtractLimits::default()).unwrap();
    let names: Vec<String> = listing(&dest).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        vec![
            ".sourceignore",
            "main.tf",
            "modules",
            "modules/net",
            "modules/net/main.tf",
            "net",
            "scripts",
            "scripts/run.sh"
        ],
    );
    assert_eq!(summary.files, 4);
}

#[test]
fn archives_round_trip_with_executable_bits_and_inner_symlinks() {
    let t = tree();
    let (bytes, _) = archive(t.path(), Some(".terraform/"));
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("x");
    let summary = extract(&bytes[..], &dest, ExtractLimits::default()).unwrap();
    assert_eq!(summary.files, 4);
    let got = listing(&dest);
    assert!(got.contains(&("scripts/run.sh".into(), "#!/bin/sh\necho hi\n (x)".into())));
    assert!(got.contains(&("net".into(), "-> modules/net".into())));
    assert!(!got.iter().any(|(n, _)| n.starts_with(".git")));
    assert_eq!(
        fs::read_to_string(dest.join("net/main.tf")).unwrap(),
        "variable \"cidr\" {}\n"
    );
}

#[test]
fn a_symlink_leaving_the_tree_is_not_archived() {
    let t = tree();
    std::os::unix::fs::symlink("../../etc/passwd", t.path().join("modules/leak")).unwrap();
    let err = build_archive(t.path(), None, Vec::new()).unwrap_err();
    assert!(err.to_string().contains("modules/leak"), "{err}");
}

// ---- hostile archives, written byte by byte ----

/// A name and what it is, written as raw bytes (so hostile names survive).
type RawEntry = (Vec<u8>, Kind);

#[derive(Debug, Clone)]
enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(Vec<u8>),
    HardLink(Vec<u8>),
    Fifo,
    CharDevice,
}

fn raw_entry(name: &[u8], kind: &Kind) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    let gnu = h.as_gnu_mut().unwrap();
    let n = name.len().min(100);
    gnu.name[..n].copy_from_slice(&name[..n]);
    let (t, size, link, data): (tar::EntryType, u64, &[u8], &[u8]) = match kind {
        Kind::File(d) => (tar::EntryType::Regular, d.len() as u64, b"", d),
        Kind::Dir => (tar::EntryType::Directory, 0, b"", b""),
        Kind::Symlink(l) => (tar::EntryType::Symlink, 0, l, b""),
        Kind::HardLink(l) => (tar::EntryType::Link, 0, l, b""),
        Kind::Fifo => (tar::EntryType::Fifo, 0, b"", b""),
        Kind::CharDevice => (tar::EntryType::Char, 0, b"", b""),
    };
    let gnu = h.as_gnu_mut().unwrap();
    let l = link.len().min(100);
    gnu.linkname[..l].copy_from_slice(&link[..l]);
    h.set_entry_type(t);
    h.set_size(size);
    h.set_mode(0o4755);
    h.set_mtime(0);
    h.set_cksum();
    let mut out = h.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn raw_archive(entries: &[(Vec<u8>, Kind)]) -> Vec<u8> {
    let mut tar: Vec<u8> = entries.iter().flat_map(|(n, k)| raw_entry(n, k)).collect();
    tar.extend_from_slice(&[0u8; 1024]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

fn file(name: &str, content: &str) -> (Vec<u8>, Kind) {
    (
        name.as_bytes().to_vec(),
        Kind::File(content.as_bytes().to_vec()),
    )
}

fn entry(name: &str, kind: Kind) -> (Vec<u8>, Kind) {
    (name.as_bytes().to_vec(), kind)
}

/// Extracts into `sandbox/dest`, where `sandbox` also holds an `outside` marker directory.
fn try_extract(
    bytes: &[u8],
    limits: ExtractLimits,
) -> (tempfile::TempDir, PathBuf, Result<(), ExtractError>) {
    let sandbox = tempfile::tempdir().unwrap();
    fs::create_dir(sandbox.path().join("outside")).unwrap();
    let dest = sandbox.path().join("dest");
    let result = extract(bytes, &dest, limits).map(|_| ());
    (sandbox, dest, result)
}

fn sandbox_names(sandbox: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(sandbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn hostile_archives_are_refused_naming_the_entry_and_leave_nothing() {
    let cases: Vec<(Vec<RawEntry>, &str)> = vec![
        (
            vec![file("ok.tf", "x"), file("/etc/cron.d/evil", "x")],
            "/etc/cron.d/evil",
        ),
        (
            vec![file("ok.tf", "x"), file("a/../../evil", "x")],
            "a/../../evil",
        ),
        (
            vec![entry("link", Kind::Symlink(b"../outside".to_vec()))],
            "link",
        ),
        (vec![entry("link", Kind::Symlink(b"/etc".to_vec()))], "link"),
        (
            vec![entry("d/link", Kind::Symlink(b"x/../../..".to_vec()))],
            "d/link",
        ),
        (
            vec![
                entry("sub", Kind::Dir),
                entry("link", Kind::Symlink(b"sub".to_vec())),
                file("link/f", "x"),
            ],
            "link/f",
        ),
        (
            vec![
                entry("link", Kind::Symlink(b"sub".to_vec())),
                file("link", "overwrite"),
            ],
            "link",
        ),
        (
            vec![entry("hard", Kind::HardLink(b"../outside/x".to_vec()))],
            "hard",
        ),
        (
            vec![entry("hard", Kind::HardLink(b"/etc/passwd".to_vec()))],
            "hard",
        ),
        (
            vec![
                entry("hard", Kind::HardLink(b"not-yet.tf".to_vec())),
                file("not-yet.tf", "x"),
            ],
            "hard",
        ),
        (vec![entry("pipe", Kind::Fifo)], "pipe"),
        (vec![entry("tty", Kind::CharDevice)], "tty"),
    ];
    for (entries, named) in cases {
        let (sandbox, _, result) = try_extract(&raw_archive(&entries), ExtractLimits::default());
        let err = result.expect_err(named);
        assert!(
            err.to_string().contains(named),
            "{err} does not name {named}"
        );
        assert_eq!(
            sandbox_names(sandbox.path()),
            vec!["outside"],
            "left something for {named}"
        );
        assert_eq!(
            fs::read_dir(sandbox.path().join("outside"))
                .unwrap()
                .count(),
            0
        );
    }
}

#[test]
fn limits_are_enforced() {
    let many: Vec<_> = (0..20).map(|i| file(&format!("f{i}"), "x")).collect();
    let limits = ExtractLimits {
        max_entries: 10,
        ..ExtractLimits::default()
    };
    let (_, _, r) = try_extract(&raw_archive(&many), limits);
    assert!(matches!(r, Err(ExtractError::TooManyEntries { limit: 10 })));

    let big = vec![file("a", &"x".repeat(600)), file("b", &"x".repeat(600))];
    let limits = ExtractLimits {
        max_total_bytes: 1000,
        ..ExtractLimits::default()
    };
    let (_, _, r) = try_extract(&raw_archive(&big), limits);
    assert!(matches!(r, Err(ExtractError::TooLarge { ref entry, .. }) if entry == "b"));

    let long = vec![file(&"d/".repeat(40), "x")];
    let limits = ExtractLimits {
        max_path_len: 50,
        ..ExtractLimits::default()
    };
    let (_, _, r) = try_extract(&raw_archive(&long), limits);
    assert!(matches!(
        r,
        Err(ExtractError::PathTooLong {
            len: 80,
            limit: 50,
            ..
        })
    ));
}

#[test]
fn a_root_entry_as_the_usual_packers_write_it_is_accepted_and_nothing_more() {
    // Flux's OCI artifact builder writes `.`, GNU tar `./`: the root, a directory.
    for root in [".", "./"] {
        let entries = vec![
            entry(root, Kind::Dir),
            entry("./modules/", Kind::Dir),
            file("./modules/net.tf", "net"),
            file("./main.tf", "main"),
        ];
        let (_sandbox, dest, r) = try_extract(&raw_archive(&entries), ExtractLimits::default());
        r.unwrap_or_else(|e| panic!("root entry {root:?}: {e}"));
        assert_eq!(fs::read_to_string(dest.join("main.tf")).unwrap(), "main");
        assert_eq!(
            fs::read_to_string(dest.join("modules/net.tf")).unwrap(),
            "net"
        );
    }
    // A root entry that is not a directory, or another empty name, stays refused.
    for (name, kind) in [
        (".", Kind::File(b"x".to_vec())),
        ("./", Kind::Symlink(b"/etc".to_vec())),
        (".//.", Kind::Dir),
        ("", Kind::Dir),
    ] {
        let (sandbox, _dest, r) = try_extract(
            &raw_archive(&[entry(name, kind.clone())]),
            ExtractLimits::default(),
        );
        assert!(r.is_err(), "{name:?} as {kind:?} is refused");
        assert_eq!(sandbox_names(sandbox.path()), ["outside"], "nothing left");
    }
}

#[test]
fn an_archive_made_by_gnu_tar_from_dot_extracts() {
    let tree = tree();
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("src.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-C")
        .arg(tree.path())
        .arg("-czf")
        .arg(&file)
        .arg(".")
        .status()
        .expect("GNU tar runs");
    assert!(status.success());
    let bytes = fs::read(&file).unwrap();
    let (_sandbox, dest, r) = try_extract(&bytes, ExtractLimits::default());
    r.unwrap();
    assert_eq!(listing(&dest), listing(tree.path()));
}

#[test]
fn safe_links_and_modes_are_accepted() {
    let entries = vec![
        entry("modules", Kind::Dir),
        file("modules/net.tf", "net"),
        entry(
            "modules/again.tf",
            Kind::HardLink(b"modules/net.tf".to_vec()),
        ),
        entry("modules/up", Kind::Symlink(b"../main.tf".to_vec())),
        entry("here", Kind::Symlink(b"./modules".to_vec())),
        file("main.tf", "main"),
    ];
    let (_sandbox, dest, r) = try_extract(&raw_archive(&entries), ExtractLimits::default());
    r.unwrap();
    assert_eq!(
        fs::read_to_string(dest.join("modules/again.tf")).unwrap(),
        "net"
    );
    assert_eq!(fs::read_to_string(dest.join("modules/up")).unwrap(), "main");
    let mode = fs::metadata(dest.join("main.tf"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o755, "setuid is dropped, the executable bit kept");
}

#[test]
fn garbage_and_an_existing_destination_are_refused() {
    let (_, _, r) = try_extract(b"not a gzip stream at all", ExtractLimits::default());
    assert!(matches!(r, Err(ExtractError::Corrupt(_))), "{r:?}");
    let sandbox = tempfile::tempdir().unwrap();
    write(sandbox.path(), "dest/keep", "mine");
    let err = extract(
        &raw_archive(&[file("a", "b")])[..],
        &sandbox.path().join("dest"),
        ExtractLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ExtractError::DestinationExists(_)));
    assert_eq!(
        fs::read_to_string(sandbox.path().join("dest/keep")).unwrap(),
        "mine"
    );
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    let part = prop_oneof![
        Just(b"..".to_vec()),
        Just(b".".to_vec()),
        Just(b"".to_vec()),
        Just(b"a".to_vec()),
        Just(b"b".to_vec()),
        Just(b"link".to_vec()),
        Just(b"outside".to_vec()),
        proptest::collection::vec(any::<u8>(), 1..4),
    ];
    (any::<bool>(), proptest::collection::vec(part, 1..5)).prop_map(|(abs, parts)| {
        let mut n = if abs { b"/".to_vec() } else { Vec::new() };
        n.extend(parts.join(&b'/'));
        n
    })
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Kind::File),
        1 => Just(Kind::Dir),
        2 => name().prop_map(Kind::Symlink),
        1 => name().prop_map(Kind::HardLink),
        1 => Just(Kind::Fifo),
        1 => Just(Kind::CharDevice),
    ]
}

/// Every path under `dir`, resolved, stays under `root`.
fn assert_contained(root: &Path, dir: &Path) {
    let root = fs::canonicalize(root).unwrap();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let meta = fs::symlink_metadata(&p).unwrap();
        if let Ok(real) = fs::canonicalize(&p) {
            assert!(
                real.starts_with(&root),
                "{} resolves to {}",
                p.display(),
                real.display()
            );
        }
        if meta.is_dir() {
            assert_contained(&root, &p);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// No archive makes extraction write outside its root or panic.
    #[test]
    fn no_archive_escapes_or_panics(entries in proptest::collection::vec((name(), kind()), 0..12)) {
        let (sandbox, dest, result) = try_extract(&raw_archive(&entries), ExtractLimits::default());
        prop_assert_eq!(fs::read_dir(sandbox.path().join("outside")).unwrap().count(), 0);
        let names = sandbox_names(sandbox.path());
        match result {
            Ok(()) => {
                prop_assert_eq!(names, vec!["dest".to_string(), "outside".to_string()]);
                assert_contained(&dest, &dest);
            }
            Err(_) => prop_assert_eq!(names, vec!["outside".to_string()]),
        }
    }

    /// Arbitrary bytes are refused (or accepted) without a panic.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let (_, _, _) = try_extract(&bytes, ExtractLimits::default());
    }
}
