//! Environment-variable overrides.
//!
//! * `STRAIT_<SECTION>_<KEY>` sets a key of `[mirror]`, `[metrics]`, `[tracing]`, `[log]` or
//!   `[runtime]`:
//!   `STRAIT_MIRROR_GROUP_ID=my-group`, `STRAIT_METRICS_LISTEN=0.0.0.0:9464`. Lists are
//!   comma-separated (`STRAIT_MIRROR_TOPICS=orders,payments-.*`) or, for items that contain commas,
//!   a TOML array (`STRAIT_MIRROR_TOPICS='["a{1,3}"]'`). An unknown key in these sections is an error.
//! * `STRAIT_SOURCE_<PROP>` / `STRAIT_TARGET_<PROP>` set a Kafka client property of `[source]` /
//!   `[target]`. The name is lowercased and `_` becomes `.`:
//!   `STRAIT_SOURCE_BOOTSTRAP_SERVERS` -> `bootstrap.servers`, `STRAIT_TARGET_SASL_PASSWORD` ->
//!   `sasl.password`. This is the convention of the Strimzi and Confluent images (`KAFKA_...`).
//!   Property names that contain `_` or `-` use `__` for `_` and `___` for `-`. Limit: upper-case
//!   letters and runs of four or more `_` cannot be expressed (no Kafka client property needs them);
//!   use the file for those. `STRAIT_SOURCE_ALIAS` / `STRAIT_TARGET_ALIAS` set the alias.
//! * `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_SERVICE_NAME` are used for `tracing.otlp_endpoint` and
//!   `tracing.service_name` only when neither the file nor a `STRAIT_TRACING_...` variable sets
//!   them (the OpenTelemetry rule: explicit configuration beats the generic variables).
//!
//! Other `STRAIT_...` variables (for example `STRAIT_CONFIG`, read by the command line) are ignored.
//! Precedence, lowest to highest: defaults, file (or MirrorMaker files), `OTEL_*`, `STRAIT_*`.

use std::collections::BTreeMap;

use super::raw::{Entry, Origin, RawCluster, RawConfig, Section, suggestion};
use crate::error::{Error, Result};

/// The environment as a map, so tests can inject one. `Debug` shows the names only: the
/// environment holds secrets (`STRAIT_TARGET_SASL_PASSWORD`, `AWS_SECRET_ACCESS_KEY`, ...).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("names", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Environment {
    /// The current process environment (variables that are not valid UTF-8 are skipped).
    pub fn from_process() -> Environment {
        Environment {
            vars: std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        }
    }

    /// An environment with exactly these variables.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Environment {
        Environment {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// One variable.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// The names of the variables that start with `prefix`.
    pub(crate) fn vars_with_prefix<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = &'a str> {
        self.vars
            .keys()
            .filter(move |k| k.starts_with(prefix))
            .map(String::as_str)
    }

    fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Maps the part after `STRAIT_SOURCE_` to a property name: lowercase, `_` -> `.`, `__` -> `_`,
/// `___` -> `-`.
pub(crate) fn property_name(var: &str, suffix: &str) -> Result<String> {
    let invalid = || Error::Invalid {
        key: var.to_string(),
        expected:
            "a property name such as BOOTSTRAP_SERVERS (`_` for `.`, `__` for `_`, `___` for `-`)"
                .into(),
        got: format!("\"{suffix}\""),
    };
    if suffix.is_empty() || suffix.starts_with('_') || suffix.ends_with('_') {
        return Err(invalid());
    }
    let mut out = String::with_capacity(suffix.len());
    let mut run = 0;
    for c in suffix.chars() {
        if c == '_' {
            run += 1;
            continue;
        }
        match run {
            0 => {}
            1 => out.push('.'),
            2 => out.push('_'),
            3 => out.push('-'),
            _ => return Err(invalid()),
        }
        run = 0;
        out.push(c.to_ascii_lowercase());
    }
    Ok(out)
}

/// Applies `STRAIT_*` and the `OTEL_*` fallbacks to `raw`.
pub(crate) fn apply(raw: &mut RawConfig, env: &Environment) -> Result<()> {
    for (name, value) in env.iter() {
        let Some(rest) = name.strip_prefix("STRAIT_") else {
            continue;
        };
        let origin = Origin::Env(name.to_string());
        if let Some(suffix) = rest.strip_prefix("SOURCE_") {
            apply_cluster(&mut raw.source, name, suffix, value, origin)?;
        } else if let Some(suffix) = rest.strip_prefix("TARGET_") {
            apply_cluster(&mut raw.target, name, suffix, value, origin)?;
        } else if let Some((section, suffix)) = Section::ALL.into_iter().find_map(|s| {
            rest.strip_prefix(&format!("{}_", s.name().to_ascii_uppercase()))
                .map(|suffix| (s, suffix))
        }) {
            let key = suffix.to_ascii_lowercase();
            if !section.keys().contains(&key.as_str()) {
                let upper: Vec<String> = section
                    .keys()
                    .iter()
                    .map(|k| {
                        format!(
                            "STRAIT_{}_{}",
                            section.name().to_ascii_uppercase(),
                            k.to_ascii_uppercase()
                        )
                    })
                    .collect();
                let upper: Vec<&str> = upper.iter().map(String::as_str).collect();
                return Err(Error::UnknownKey {
                    key: format!("{name} ({}.{key})", section.name()),
                    suggestion: suggestion(name, &upper),
                });
            }
            raw.set(section, &key, Entry::text(value, origin));
        }
    }
    for (var, key) in [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "otlp_endpoint"),
        ("OTEL_SERVICE_NAME", "service_name"),
    ] {
        if let Some(value) = env.get(var)
            && !value.is_empty()
            && !raw.contains(Section::Tracing, key)
        {
            raw.set(
                Section::Tracing,
                key,
                Entry::text(value, Origin::Env(var.to_string())),
            );
        }
    }
    Ok(())
}

fn apply_cluster(
    cluster: &mut RawCluster,
    var: &str,
    suffix: &str,
    value: &str,
    origin: Origin,
) -> Result<()> {
    if suffix == "ALIAS" {
        cluster.alias = Some(Entry::text(value, origin));
    } else {
        let prop = property_name(var, suffix)?;
        cluster.set_property(&prop, value, origin);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::raw::RawValue;

    #[test]
    fn property_names_follow_the_kafka_image_convention() {
        let p = |s| property_name("V", s).unwrap();
        assert_eq!(p("BOOTSTRAP_SERVERS"), "bootstrap.servers");
        assert_eq!(p("SSL_CA_LOCATION"), "ssl.ca.location");
        assert_eq!(p("SASL_PASSWORD"), "sasl.password");
        assert_eq!(p("FOO__BAR"), "foo_bar");
        assert_eq!(p("FOO___BAR"), "foo-bar");
        assert!(property_name("V", "FOO____BAR").is_err());
        assert!(property_name("V", "").is_err());
        assert!(property_name("V", "FOO_").is_err());
    }

    #[test]
    fn env_sets_sections_and_client_properties() {
        let env = Environment::from_pairs([
            ("STRAIT_MIRROR_GROUP_ID", "g"),
            ("STRAIT_SOURCE_BOOTSTRAP_SERVERS", "a:9092"),
            ("STRAIT_TARGET_ALIAS", "us"),
            ("STRAIT_CONFIG", "/etc/strait.toml"),
            ("OTEL_SERVICE_NAME", "svc"),
            ("PATH", "/bin"),
        ]);
        let mut raw = RawConfig::default();
        raw.source
            .set_property("bootstrap.servers", "file:9092", Origin::File);
        apply(&mut raw, &env).unwrap();
        assert_eq!(raw.source.property("bootstrap.servers"), Some("a:9092"));
        assert_eq!(
            raw.target.alias.as_ref().unwrap().value,
            RawValue::Text("us".into())
        );
        assert_eq!(
            raw.get(Section::Mirror, "group_id").unwrap().value,
            RawValue::Text("g".into())
        );
        assert_eq!(
            raw.get(Section::Tracing, "service_name").unwrap().origin,
            Origin::Env("OTEL_SERVICE_NAME".into())
        );
    }

    #[test]
    fn otel_variables_do_not_override_explicit_settings() {
        let env = Environment::from_pairs([
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
            ("STRAIT_TRACING_OTLP_ENDPOINT", "http://strait:4318"),
        ]);
        let mut raw = RawConfig::default();
        apply(&mut raw, &env).unwrap();
        assert_eq!(
            raw.get(Section::Tracing, "otlp_endpoint").unwrap().value,
            RawValue::Text("http://strait:4318".into())
        );
    }

    #[test]
    fn unknown_section_keys_in_env_are_errors_with_a_suggestion() {
        let env = Environment::from_pairs([("STRAIT_MIRROR_GROUPID", "g")]);
        let err = apply(&mut RawConfig::default(), &env)
            .unwrap_err()
            .to_string();
        assert!(err.contains("STRAIT_MIRROR_GROUPID"), "{err}");
        assert!(
            err.contains("did you mean \"STRAIT_MIRROR_GROUP_ID\""),
            "{err}"
        );
    }
}
