//! What the driver's log lines say of the step they belong to: in the text format, each line
//! names its own step once (a reported bug: every line listed every step the run had made so
//! far, `step=AddFinalizer … step=ResolveSource … step=FetchSource`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::json;

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
    type Writer = Lines;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn each_text_line_names_its_own_step_once() {
    let lines = Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(lines.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let w = world();
    let key = w.create(object("vpc", json!({"approvePlan": "auto"})));
    // As an embedding controller may: one span per reconcile, naming the object and declaring
    // step fields (the driver once recorded each step into them).
    let span = tracing::info_span!(
        "reconcile",
        object = %key,
        step = tracing::field::Empty,
        run_id = tracing::field::Empty
    );
    tracing::Instrument::instrument(reconcile(&w, &key), span).await;
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let started: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("step started"))
        .collect();
    assert!(started.len() >= 5, "{text}");
    for line in &started {
        // The step's span and the event itself: `step=` twice, with the same step.
        let steps: Vec<&str> = line
            .split_whitespace()
            .filter_map(|w| w.trim_end_matches(['}', ':']).strip_prefix("step="))
            .collect();
        assert_eq!(steps.len(), 2, "{line}");
        assert_eq!(steps[0], steps[1], "{line}");
    }
    assert!(started.iter().any(|l| l.contains("step=Apply")), "{text}");
}
