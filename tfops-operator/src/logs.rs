//! Logs of every tfops binary: `tracing` events through `tracing-subscriber`, on standard
//! error, as readable lines or one JSON object per line, filtered by `RUST_LOG`.

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line (the default in a Pod).
    Json,
    /// Readable lines for a terminal.
    Text,
}

/// Installs the log subscriber, filtered by `RUST_LOG` (default `default_filter`). Does
/// nothing when one is installed already (a test, an embedding program).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
