//! Generates the gRPC code of `proto/runner.proto` with the vendored `protoc`, so a fresh
//! machine needs no protobuf compiler installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure().compile_with_config(
        config,
        &["proto/runner.proto"],
        &["proto"],
    )?;
    println!("cargo:rerun-if-changed=proto/runner.proto");
    Ok(())
}
