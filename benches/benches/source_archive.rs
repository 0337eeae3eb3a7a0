//! `source_archive`: tfops' deterministic archive of a source tree (10,000 small files, a few
//! large ones, ignore rules) against GNU `tar -czf` of the same tree in the same run.

// A benchmark aborts when its setup fails: there is nothing to measure then.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::io::{self, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tfops_core::source::build_archive;

/// Counts bytes, keeps none: both sides write their archive into one of these.
struct Count(u64);

impl Write for Count {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tar_czf(root: &std::path::Path) -> u64 {
    // To a pipe, not /dev/null: GNU tar skips reading files when the archive is /dev/null.
    let mut child = Command::new("tar")
        .args([
            "-czf",
            "-",
            "--exclude=.git",
            "--exclude=.terraform",
            "--exclude=*.bak",
            "-C",
        ])
        .arg(root)
        .arg(".")
        .stdout(Stdio::piped())
        .spawn()
        .expect("GNU tar");
    let mut out = child.stdout.take().expect("stdout");
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0u64;
    loop {
        match out.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => n += k as u64,
            Err(e) => panic!("reading tar: {e}"),
        }
    }
    assert!(child.wait().expect("tar").success());
    n
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let ignore = benches::source_tree(dir.path(), 10_000, 4, 8 << 20).expect("tree");
    let mut probe = Count(0);
    let summary = build_archive(dir.path(), Some(ignore), &mut probe).expect("archive");
    println!(
        "source_archive: {} files, {} bytes in, tfops archive {} bytes, tar -czf archive {} bytes",
        summary.files,
        summary.file_bytes,
        summary.size,
        tar_czf(dir.path())
    );
    let mut g = c.benchmark_group("source_archive/10k-small-4-large");
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("tfops", |b| {
        b.iter(|| build_archive(black_box(dir.path()), Some(ignore), Count(0)).expect("archive"))
    });
    g.bench_function("tar -czf", |b| b.iter(|| tar_czf(black_box(dir.path()))));
    g.finish();
}

criterion_group!(source_archive, bench);
criterion_main!(source_archive);
