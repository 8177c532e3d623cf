//! Issue 32 item 1: every key the parser accepts is documented in examples/strait.toml and, for
//! the sections the Helm chart renders, listed in its values.schema.json. The accepted keys come
//! from the parser's own tables ([`Section::keys`], the top-level sections, `[[flows]]`' keys and
//! `strait_wire`'s client properties), so a key added there fails this test until it is
//! documented.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::raw::Section;
use super::{Config, Environment, SECTIONS};

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_file(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The lines of each `[section]` of a TOML text (commented lines included), by section name.
/// A commented-out header (`#   [mirror]`, in an example block) starts a section named
/// `#mirror`; `[[flows]]` is named `[flows]`.
fn section_lines(text: &str) -> Vec<(String, Vec<&str>)> {
    let mut out: Vec<(String, Vec<&str>)> = vec![(String::new(), Vec::new())];
    for line in text.lines() {
        let t = line.trim();
        let uncommented = t.trim_start_matches('#').trim_start();
        if uncommented.starts_with('[') {
            let inner = uncommented.strip_prefix('[').unwrap_or(uncommented);
            let name = inner.split(']').next().unwrap_or("");
            let name = if inner.starts_with('[') {
                format!("{name}]")
            } else {
                name.to_string()
            };
            let commented = if t.starts_with('#') { "#" } else { "" };
            out.push((format!("{commented}{name}"), Vec::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push(line);
        }
    }
    out
}

/// `key` as a setting line, live or commented out: `key = ...` or `# key = ...`.
fn setting_key(line: &str) -> Option<&str> {
    let t = line.trim_start().trim_start_matches('#').trim_start();
    let (key, _) = t.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._".contains(c)))
    .then_some(key)
}

#[test]
fn every_accepted_key_is_in_examples_strait_toml() {
    let text = read("examples/strait.toml");
    // The example is a valid configuration as it stands.
    Config::from_toml_str(&text, Path::new("strait.toml"), &Environment::default())
        .unwrap_or_else(|e| panic!("examples/strait.toml: {e}"));
    let sections = section_lines(&text);
    let keys_in = |name: &str| -> BTreeSet<&str> {
        sections
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, lines)| lines.iter().filter_map(|l| setting_key(l)))
            .collect()
    };
    let mut missing = Vec::new();
    for section in SECTIONS {
        if !sections.iter().any(|(n, _)| n == section) {
            missing.push(format!("[{section}]"));
        }
    }
    for section in Section::ALL {
        let documented = keys_in(section.name());
        for key in section.keys() {
            if !documented.contains(key) {
                missing.push(format!("{}.{key}", section.name()));
            }
        }
        // And the other way: a commented-out setting in a fixed section is a key it accepts.
        for key in documented {
            if !section.keys().contains(&key) {
                missing.push(format!(
                    "{}.{key} (documented, not accepted)",
                    section.name()
                ));
            }
        }
    }
    // Client properties: each one strait-wire accepts is shown (quoted) in [source].
    let source: String = sections
        .iter()
        .filter(|(n, _)| n == "source")
        .flat_map(|(_, l)| l.iter().map(|l| format!("{l}\n")))
        .collect();
    for key in strait_wire::config::KNOWN_KEYS {
        if !source.contains(&format!("\"{key}\"")) {
            missing.push(format!("source.\"{key}\" (client property)"));
        }
    }
    if !source.lines().any(|l| setting_key(l) == Some("alias")) {
        missing.push("source.alias".into());
    }
    // The several-flows form (a commented-out example): [clusters.<alias>] and [[flows]] with
    // its own keys.
    if !sections.iter().any(|(n, _)| n.starts_with("#clusters.")) {
        missing.push("[clusters.<alias>]".into());
    }
    let flow_keys: BTreeSet<&str> = ["[flows]", "#[flows]"]
        .iter()
        .flat_map(|name| keys_in(name))
        .collect();
    for key in super::flows::FLOW_KEYS {
        if !flow_keys.contains(key) {
            missing.push(format!("[[flows]] {key}"));
        }
    }
    assert!(
        missing.is_empty(),
        "examples/strait.toml must document every key strait accepts (as a setting or a \
         commented-out one in its section); missing: {missing:?}"
    );
}

/// The chart renders `.Values.config` section by section into strait.toml (templates/_helpers.tpl
/// `strait.config`), so its schema lists the sections (single-flow and `clusters`/`flows`), and
/// the keys of the fixed ones and of a `[[flows]]` entry, exactly as strait accepts them. Cluster
/// sections hold free-form client properties.
#[test]
fn the_helm_schema_lists_the_accepted_keys() {
    let schema: serde_json::Value =
        serde_json::from_str(&read("deploy/helm/strait/values.schema.json")).unwrap();
    let config = &schema["properties"]["config"];
    assert_eq!(config["additionalProperties"], false);
    let listed = |v: &serde_json::Value| -> BTreeSet<String> {
        v["properties"]
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let sections = listed(config);
    let expected: BTreeSet<String> = SECTIONS
        .iter()
        .chain(&["clusters", "flows"])
        .map(|s| s.to_string())
        .collect();
    assert_eq!(sections, expected, "values.schema.json config.properties");
    // A [[flows]] entry: its own keys and every [mirror] key, nothing else.
    let flow = &schema["definitions"]["flow"];
    assert_eq!(flow["additionalProperties"], false);
    assert_eq!(
        config["properties"]["flows"]["items"]["$ref"],
        "#/definitions/flow"
    );
    let expected: BTreeSet<String> = super::flows::FLOW_KEYS
        .iter()
        .chain(Section::Mirror.keys())
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        listed(flow),
        expected,
        "values.schema.json definitions.flow"
    );
    for section in Section::ALL {
        let body = &config["properties"][section.name()];
        let body = match body["$ref"].as_str() {
            Some(r) => &schema["definitions"][r.trim_start_matches("#/definitions/")],
            None => body,
        };
        assert_eq!(
            body["additionalProperties"],
            false,
            "values.schema.json config.{} must refuse unknown keys",
            section.name()
        );
        let expected: BTreeSet<String> = section.keys().iter().map(|s| s.to_string()).collect();
        assert_eq!(
            listed(body),
            expected,
            "values.schema.json config.{}: the keys strait accepts",
            section.name()
        );
    }
}
