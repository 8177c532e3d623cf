//! Logging to stderr with `tracing-subscriber`: human-readable text or one JSON object per line.
//!
//! The level comes from `log.level` unless `RUST_LOG` is set (and not empty), which wins, as
//! usual for Rust programs. Both take `EnvFilter` directives (`info`, `strait=debug,warn`).
//!
//! [`init`] installs a complete subscriber whose level [`set_level`] changes later (a
//! configuration reload, see `crate::run::reload`). Callers that add layers of their own (for example an
//! OpenTelemetry layer) build the registry themselves from [`filter`] and [`fmt_layer`].

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat};
use crate::error::{Error, Result};

/// The filter: `rust_log` (the value of `RUST_LOG`) when set and not empty, else `log.level`.
pub fn filter(cfg: &LogConfig, rust_log: Option<&str>) -> Result<EnvFilter> {
    match rust_log.map(str::trim).filter(|s| !s.is_empty()) {
        Some(directives) => EnvFilter::try_new(directives).map_err(|e| Error::Logging {
            key: "RUST_LOG".into(),
            message: format!(
                "invalid filter {directives:?}: {e}; use e.g. RUST_LOG=info or unset it"
            ),
        }),
        None => EnvFilter::try_new(&cfg.level).map_err(|e| Error::Logging {
            key: "log.level".into(),
            message: format!("invalid filter {:?}: {e}", cfg.level),
        }),
    }
}

/// The formatting layer for `cfg.format`, writing to stderr.
pub fn fmt_layer<S>(cfg: &LogConfig) -> Box<dyn Layer<S> + Send + Sync + 'static>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    layer_with_writer(cfg, std::io::stderr)
}

fn layer_with_writer<S, W>(cfg: &LogConfig, writer: W) -> Box<dyn Layer<S> + Send + Sync + 'static>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    match cfg.format {
        LogFormat::Json => layer
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        _ => layer.with_ansi(false).with_target(true).boxed(),
    }
}

/// Changes the filter of the subscriber [`init`] installed.
type FilterHandle = tracing_subscriber::reload::Handle<EnvFilter, tracing_subscriber::Registry>;

static FILTER: OnceLock<FilterHandle> = OnceLock::new();

/// Installs the global subscriber. Fails on a bad filter; a second call is a no-op.
pub fn init(cfg: &LogConfig) -> Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(cfg, rust_log.as_deref())?;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    // try_init: tests and embedders may already have installed one; keep theirs.
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt_layer(cfg))
        .try_init()
        .is_ok()
    {
        let _ = FILTER.set(handle);
    }
    Ok(())
}

/// Applies a new `log.level` to the running process. `RUST_LOG` still wins, as at start: then
/// nothing changes and a warning says so. Fails on a bad filter (nothing changes then either).
pub fn set_level(cfg: &LogConfig) -> Result<()> {
    let filter = filter(cfg, None)?;
    if std::env::var("RUST_LOG").is_ok_and(|v| !v.trim().is_empty()) {
        tracing::warn!(
            "log.level changed to {:?}, but RUST_LOG is set and wins; unset it to configure the \
             level in the file",
            cfg.level
        );
        return Ok(());
    }
    if let Some(handle) = FILTER.get()
        && let Err(e) = handle.reload(filter)
    {
        tracing::warn!(error = %e, "cannot change the log level");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cfg(level: &str, format: LogFormat) -> LogConfig {
        LogConfig {
            format,
            level: level.into(),
        }
    }

    #[test]
    fn rust_log_wins_over_the_configured_level() {
        let f = filter(&cfg("info", LogFormat::Text), Some("strait=trace")).unwrap();
        assert_eq!(f.to_string(), "strait=trace");
        let f = filter(&cfg("warn", LogFormat::Text), Some("  ")).unwrap();
        assert_eq!(f.to_string(), "warn");
        let f = filter(&cfg("debug", LogFormat::Text), None).unwrap();
        assert_eq!(f.to_string(), "debug");
    }

    #[test]
    fn bad_filters_name_their_source() {
        let e = filter(&cfg("info", LogFormat::Text), Some("strait=loud")).unwrap_err();
        assert!(e.to_string().starts_with("RUST_LOG: invalid filter"), "{e}");
        assert_eq!(e.exit_code(), 2);
        let e = filter(&cfg("=", LogFormat::Json), None).unwrap_err();
        assert!(
            e.to_string().starts_with("log.level: invalid filter"),
            "{e}"
        );
    }

    #[test]
    fn text_and_json_formats() {
        use std::io::Write;
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let emit = |format| {
            let buf = Buf::default();
            let writer = buf.clone();
            let subscriber = tracing_subscriber::registry()
                .with(layer_with_writer(&cfg("info", format), move || {
                    writer.clone()
                }));
            tracing::subscriber::with_default(subscriber, || {
                tracing::info!(topic = "orders", "mirroring");
            });
            String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
        };
        let json = emit(LogFormat::Json);
        assert!(
            json.starts_with('{') && json.trim_end().ends_with('}'),
            "{json}"
        );
        assert!(json.contains("\"topic\":\"orders\""), "{json}");
        assert!(json.contains("\"level\":\"INFO\""), "{json}");
        let text = emit(LogFormat::Text);
        assert!(!text.starts_with('{'), "{text}");
        assert!(
            text.contains("INFO") && text.contains("mirroring topic=\"orders\""),
            "{text}"
        );
    }
}
