//! `plan_codec`: tfops' plan codec against gzip-everything (existing controllers' approach)
//! and a plain copy into 1 MiB pieces (the limit), on real Terraform plans and on synthetic
//! compressible and incompressible data.

// A benchmark aborts when its setup fails: there is nothing to measure then.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Duration;

use benches::{
    copy_chunks, find_terraform, gunzip_everything, gzip_everything, noise, plan_like_text,
    real_plan,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tfops_core::plan::{CodecConfig, OrderedChunks, decode_to_vec, encode_reader};

fn datasets() -> Vec<(String, Vec<u8>)> {
    let mut sets = Vec::new();
    match find_terraform() {
        Some(tf) => {
            for resources in [1000, 10_000] {
                let dir = tempfile::tempdir().expect("temp dir");
                match real_plan(&tf, dir.path(), resources) {
                    Ok(plan) => sets.push((format!("real-{resources}-resources"), plan)),
                    Err(e) => eprintln!("skipping the real plan of {resources} resources: {e}"),
                }
            }
        }
        None => eprintln!(
            "no terraform found (set TFOPS_TERRAFORM or put terraform on PATH; scripts/install-terraform installs one): skipping real plans"
        ),
    }
    for (label, size) in [
        ("100KiB", 100 << 10),
        ("5MiB", 5 << 20),
        ("50MiB", 50 << 20),
    ] {
        sets.push((format!("compressible-{label}"), plan_like_text(size)));
        sets.push((format!("incompressible-{label}"), noise(size, 42)));
    }
    sets
}

fn bench(c: &mut Criterion) {
    let config = CodecConfig::default();
    for (name, data) in datasets() {
        let (index, chunks) = encode_reader(
            &data[..],
            config.clone(),
            "plan-main-0123456789",
            "u",
            Vec::new(),
        )
        .expect("encode");
        let gz = gzip_everything(&data);
        let gz_size: usize = gz.iter().map(Vec::len).sum();
        println!(
            "stored size {name}: tfops {} ({}) vs gzip-everything {gz_size} vs raw {} -> tfops/gzip {:.4}",
            index.stored_size,
            index.compression,
            data.len(),
            index.stored_size as f64 / gz_size as f64
        );
        let mut g = c.benchmark_group(format!("plan_codec/{name}"));
        g.throughput(Throughput::Bytes(data.len() as u64));
        g.sample_size(10);
        g.warm_up_time(Duration::from_millis(500));
        g.measurement_time(Duration::from_secs(if data.len() > (8 << 20) {
            8
        } else {
            3
        }));
        g.bench_function(BenchmarkId::new("encode", "tfops"), |b| {
            b.iter(|| {
                encode_reader(
                    black_box(&data[..]),
                    config.clone(),
                    "plan-main-0123456789",
                    "u",
                    Vec::new(),
                )
                .expect("encode")
            })
        });
        g.bench_function(BenchmarkId::new("encode", "gzip-everything"), |b| {
            b.iter(|| gzip_everything(black_box(&data)))
        });
        g.bench_function(BenchmarkId::new("encode", "copy"), |b| {
            b.iter(|| copy_chunks(black_box(&data)))
        });
        g.bench_function(BenchmarkId::new("decode", "tfops"), |b| {
            b.iter(|| {
                let source = OrderedChunks::new(&index, chunks.clone()).expect("chunks");
                decode_to_vec(index.clone(), source, &config).expect("decode")
            })
        });
        g.bench_function(BenchmarkId::new("decode", "gzip-everything"), |b| {
            b.iter(|| gunzip_everything(black_box(&gz)))
        });
        g.finish();
    }
}

criterion_group!(plan_codec, bench);
criterion_main!(plan_codec);
