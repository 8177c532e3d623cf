//! Strimzi `KafkaMirrorMaker` and `KafkaMirrorMaker2` custom resources -> strait.toml.
//!
//! A `KafkaMirrorMaker` (v1beta1, v1beta2) is MirrorMaker 1 with its options in YAML: its consumer
//! and producer become the properties `strait mirror-maker` reads, and go through the same mapping
//! (`import::mirrormaker::mm1`). A `KafkaMirrorMaker2` (v1beta2 with `clusters`/`connectCluster`
//! or with `target`/`mirrors[].source`, v1 with the latter) becomes the mm2.properties of its
//! mirrors (`A.bootstrap.servers`, `A->B.topics`, the connectors' `config`...; several mirrors
//! become `[[flows]]`, whose Secret values are `${env:STRAIT_CLUSTER_<ALIAS>_...}` references)
//! and goes through
//! `strait mm2`'s mapping (`import::mirrormaker::mm2`). The keys of that mapping's warnings are
//! therefore mm2.properties keys: `<alias>.<key>` is `config.<key>` of that cluster,
//! `<source>-><target>.<key>` is `config.<key>` of one of the mirror's connectors.
//!
//! Secrets are not read: a Secret key becomes the path where the Helm chart (deploy/helm/strait)
//! mounts it, [`TLS_DIR`]`/<source|target>/ca/<key>` for the cluster CA and
//! [`TLS_DIR`]`/<source|target>/user/<key>` for the client certificate and key, and a SASL
//! password becomes the environment variable `STRAIT_SOURCE_SASL_PASSWORD` /
//! `STRAIT_TARGET_SASL_PASSWORD`, which the chart fills from the Secret (`secrets.<side>` in its
//! values); an OAuth client secret likewise becomes
//! `STRAIT_<SIDE>_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_SECRET`. Every field is either
//! converted or listed with the reason ([`Unmapped`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use yaml_serde::{Mapping, Value};

use super::Error;
use crate::config::properties::{Properties, Property};
use crate::config::{Config, Environment};
use crate::import::mirrormaker::{Mm1Options, mm1, mm2};

/// Where the Helm chart mounts the certificate Secrets: `<side>/ca/<key>` (the cluster CA,
/// `secrets.<side>.clusterCaCert`) and `<side>/user/<key>` (the client certificate and key,
/// `secrets.<side>.userCert`), e.g. `/etc/strait/tls/source/user/user.crt`.
pub const TLS_DIR: &str = "/etc/strait/tls";

/// The metrics, `/healthz` and `/readyz` listener in a pod: all interfaces, so the kubelet's
/// probes and Prometheus reach it (Strait's default is loopback only).
pub const POD_METRICS_LISTEN: &str = "0.0.0.0:9464";

/// OTLP over HTTP, the protocol Strait exports spans with.
const OTLP_HTTP_PORT: u16 = 4318;

/// What the caller chose.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `metadata.name` of the resource to convert when the file holds several.
    pub name: Option<String>,
    /// Source alias of the one `KafkaMirrorMaker2` mirror to convert (default: every mirror,
    /// as `[[flows]]` when there are several).
    pub mirror: Option<String>,
}

/// A field of the resource that was not converted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// The field, e.g. `spec.template.pod.affinity`.
    pub field: String,
    /// Why it has no equivalent and what to do instead.
    pub why: String,
}

/// A Secret key read as a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFile {
    /// `source` or `target`; with several mirrors ([[flows]]), the cluster's alias.
    pub side: String,
    /// `ca` (the cluster CA), `user` (the client certificate and key), `oauth` (an OAuth access
    /// token) or `oauth-ca` (the CA of the OAuth token endpoint).
    pub role: &'static str,
    /// The Secret.
    pub secret: String,
    /// The key in the Secret.
    pub key: String,
}

impl SecretFile {
    /// Where the Helm chart mounts it.
    pub fn path(&self) -> String {
        format!("{TLS_DIR}/{}/{}/{}", self.side, self.role, self.key)
    }
}

/// An environment variable whose value comes from a Secret key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretEnv {
    /// The variable, e.g. `STRAIT_TARGET_SASL_PASSWORD`.
    pub var: String,
    /// The Secret.
    pub secret: String,
    /// The key in the Secret.
    pub key: String,
}

/// The result of a conversion.
#[derive(Debug, Clone)]
pub struct Converted {
    /// The strait.toml text: a comment block (origin, Secrets, what was not converted), then
    /// the configuration. Loads with [`Config::from_toml_str`] once the [`SecretEnv`] variables
    /// are set.
    pub toml: String,
    /// Values for the Helm chart (YAML).
    pub helm_values: String,
    /// The configuration, as loaded back from [`Converted::toml`] (SASL passwords set to
    /// placeholders); the first flow when there are several.
    pub config: Config,
    /// Every flow when the `KafkaMirrorMaker2` has several mirrors (`[[flows]]`), else empty.
    pub flows: Vec<Config>,
    /// `KafkaMirrorMaker` or `KafkaMirrorMaker2`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.replicas`, when given.
    pub replicas: Option<u64>,
    /// Fields that were not converted.
    pub unmapped: Vec<Unmapped>,
    /// Remarks from the conversion (ignored client settings, defaults that differ...).
    pub notes: Vec<String>,
    /// Secret keys read as files.
    pub secret_files: Vec<SecretFile>,
    /// Environment variables taken from Secrets.
    pub secret_env: Vec<SecretEnv>,
}

impl Converted {
    /// One line per warning, for stderr.
    pub fn warning_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .unmapped
            .iter()
            .map(|u| format!("not converted: {}: {}", u.field, u.why))
            .collect();
        out.extend(self.notes.iter().cloned());
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Walking the YAML: every field is taken by the code that converts it; what is left is listed.

/// One segment of a field path.
#[derive(Debug, Clone)]
enum Seg {
    Key(String),
    Item(usize),
}

fn display(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Item(i) => {
                let _ = write!(s, "[{i}]");
            }
        }
    }
    s
}

/// A mapping of the resource with its path; fields are removed as they are converted.
#[derive(Clone)]
struct Node {
    path: Vec<Seg>,
    map: Mapping,
}

impl Node {
    fn field(&self, key: &str) -> Vec<Seg> {
        let mut p = self.path.clone();
        p.push(Seg::Key(key.to_string()));
        p
    }

    fn name(&self, key: &str) -> String {
        display(&self.field(key))
    }

    fn take(&mut self, key: &str) -> Option<Value> {
        match self.map.shift_remove(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A scalar as text (numbers and booleans as YAML writes them).
    fn text(&mut self, key: &str) -> Result<Option<String>, Error> {
        let field = self.name(key);
        self.take(key).map(|v| scalar(&v, &field)).transpose()
    }

    fn required_text(&mut self, key: &str, hint: &str) -> Result<String, Error> {
        self.text(key)?.ok_or_else(|| Error::Missing {
            field: self.name(key),
            hint: hint.to_string(),
        })
    }

    fn node(&mut self, key: &str) -> Result<Option<Node>, Error> {
        let path = self.field(key);
        match self.take(key) {
            None => Ok(None),
            Some(Value::Mapping(map)) => Ok(Some(Node { path, map })),
            Some(other) => Err(Error::Invalid {
                field: display(&path),
                expected: "a mapping (key: value lines indented under it)".into(),
                got: short(&other),
            }),
        }
    }

    fn list(&mut self, key: &str) -> Result<Vec<Node>, Error> {
        let path = self.field(key);
        match self.take(key) {
            None => Ok(Vec::new()),
            Some(Value::Sequence(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    let mut p = path.clone();
                    p.push(Seg::Item(i));
                    match v {
                        Value::Mapping(map) => Ok(Node { path: p, map }),
                        other => Err(Error::Invalid {
                            field: display(&p),
                            expected: "a mapping".into(),
                            got: short(&other),
                        }),
                    }
                })
                .collect(),
            Some(other) => Err(Error::Invalid {
                field: display(&path),
                expected: "a list (lines starting with `- `)".into(),
                got: short(&other),
            }),
        }
    }

    /// `config:` maps: every entry as `(key, value, path)`; nested values are listed.
    fn config(
        &mut self,
        key: &str,
        ctx: &mut Ctx,
    ) -> Result<Vec<(String, String, Vec<Seg>)>, Error> {
        let Some(node) = self.node(key)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (k, v) in node.map {
            let Some(k) = key_text(&k) else { continue };
            let mut path = node.path.clone();
            path.push(Seg::Key(k.clone()));
            match v {
                Value::Mapping(_) | Value::Sequence(_) | Value::Tagged(_) => ctx.unmapped(
                    display(&path),
                    "a Kafka client or connector setting must be a single value",
                ),
                Value::Null => {}
                v => out.push((k, scalar(&v, &display(&path))?, path)),
            }
        }
        Ok(out)
    }

    /// Lists every field not taken, with `why`.
    fn rest(self, ctx: &mut Ctx, why: &str) {
        for (k, v) in self.map {
            if v.is_null() {
                continue;
            }
            let Some(k) = key_text(&k) else { continue };
            let mut p = self.path.clone();
            p.push(Seg::Key(k));
            ctx.unmapped(display(&p), why);
        }
    }
}

fn key_text(k: &Value) -> Option<String> {
    match k {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn scalar(v: &Value, field: &str) -> Result<String, Error> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        other => Err(Error::Invalid {
            field: field.to_string(),
            expected: "a single value".into(),
            got: short(other),
        }),
    }
}

/// A value as a short YAML snippet for messages.
fn short(v: &Value) -> String {
    let s = yaml_serde::to_string(v).unwrap_or_default();
    let s = s.trim().replace('\n', " ");
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// Finds the line of a field in the file, for messages (`file.yaml:17 A->B.topics`). YAML
/// parsers keep no positions in values, so this follows the path through the text: each key is
/// the next line (after the previous one) that starts with it; list items are counted by their
/// `- ` at the list's indentation. Approximate by design: a wrong guess only moves a line number.
struct Locator<'a> {
    lines: Vec<&'a str>,
    start: usize,
}

impl<'a> Locator<'a> {
    fn new(text: &'a str, document: usize) -> Locator<'a> {
        let lines: Vec<&str> = text.lines().collect();
        let mut starts = vec![0];
        for (i, l) in lines.iter().enumerate() {
            if l.trim_end() == "---" {
                starts.push(i + 1);
            }
        }
        // A leading `---` does not open an empty first document.
        let first_content = lines
            .iter()
            .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if first_content.is_some_and(|i| lines[i].trim_end() == "---") {
            starts.remove(0);
        }
        let start = starts.get(document).copied().unwrap_or(0);
        Locator { lines, start }
    }

    fn line(&self, path: &[Seg]) -> usize {
        let mut pos = self.start;
        for seg in path {
            let found = match seg {
                Seg::Key(k) => (pos..self.lines.len()).find(|&i| starts_with_key(self.lines[i], k)),
                Seg::Item(n) => {
                    let mut indent = None;
                    let mut count = 0;
                    let mut hit = None;
                    for i in pos + 1..self.lines.len() {
                        let l = self.lines[i];
                        let t = l.trim_start();
                        if !t.starts_with('-') || t.starts_with("---") {
                            continue;
                        }
                        let ind = l.len() - t.len();
                        match indent {
                            None => indent = Some(ind),
                            Some(x) if x != ind => continue,
                            Some(_) => {}
                        }
                        if count == *n {
                            hit = Some(i);
                            break;
                        }
                        count += 1;
                    }
                    hit
                }
            };
            match found {
                Some(i) => pos = i,
                None => break,
            }
        }
        pos + 1
    }
}

fn starts_with_key(line: &str, key: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix('-').map(str::trim_start).unwrap_or(t);
    for quote in ["", "\"", "'"] {
        if let Some(rest) = t
            .strip_prefix(quote)
            .and_then(|r| r.strip_prefix(key))
            .and_then(|r| r.strip_prefix(quote))
            && rest.trim_start().starts_with(':')
        {
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// The conversion.

/// What the conversion collects besides the client properties.
#[derive(Default)]
struct Ctx {
    unmapped: Vec<Unmapped>,
    notes: Vec<String>,
    secret_files: Vec<SecretFile>,
    secret_env: Vec<SecretEnv>,
    /// `STRAIT_*` settings of the sections the MirrorMaker mappings do not fill.
    env: Vec<(String, String)>,
    replicas: Option<u64>,
    resources: Option<Value>,
}

impl Ctx {
    fn unmapped(&mut self, field: impl Into<String>, why: impl Into<String>) {
        self.unmapped.push(Unmapped {
            field: field.into(),
            why: why.into(),
        });
    }

    fn secret_file(&mut self, side: &Side, role: &'static str, secret: &str, key: &str) -> String {
        let f = SecretFile {
            side: side.name(),
            role,
            secret: secret.to_string(),
            key: key.to_string(),
        };
        let path = f.path();
        if !self.secret_files.contains(&f) {
            self.secret_files.push(f);
        }
        path
    }

    /// A client property whose value is the Secret key `secret`/`key`. One flow: the variable
    /// `STRAIT_<SIDE>_<PROPERTY>`, which sets the property (the Helm chart fills it from the
    /// Secret); several flows (where `STRAIT_SOURCE_*` cannot say which cluster): the property
    /// is written as a `${env:STRAIT_CLUSTER_<ALIAS>_<PROPERTY>}` reference (config providers).
    fn secret_property(
        &mut self,
        side: &Side,
        property: &str,
        (secret, key): (String, String),
        field: Vec<Seg>,
        props: &mut ClientProps,
    ) {
        let var = format!(
            "{}_{}",
            side.env_prefix(),
            property.replace('.', "_").to_ascii_uppercase()
        );
        if let Side::Cluster(_) = side {
            props.push((property.to_string(), format!("${{env:{var}}}"), field));
        }
        self.secret_env.push(SecretEnv { var, secret, key });
    }
}

/// Which side of the mirror a cluster is, or (several mirrors) which cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Side {
    Source,
    Target,
    /// A cluster of a `[[flows]]` configuration, by alias.
    Cluster(String),
}

impl Side {
    fn name(&self) -> String {
        match self {
            Side::Source => "source".into(),
            Side::Target => "target".into(),
            Side::Cluster(alias) => alias.clone(),
        }
    }

    fn env_prefix(&self) -> String {
        match self {
            Side::Source => "STRAIT_SOURCE".into(),
            Side::Target => "STRAIT_TARGET".into(),
            Side::Cluster(alias) => format!(
                "STRAIT_CLUSTER_{}",
                alias
                    .chars()
                    .map(|c| match c.is_ascii_alphanumeric() {
                        true => c.to_ascii_uppercase(),
                        false => '_',
                    })
                    .collect::<String>()
            ),
        }
    }
}

/// Client properties of one cluster with the field each came from.
type ClientProps = Vec<(String, String, Vec<Seg>)>;

/// Converts the resource in `text` (`path` is used in messages).
pub fn convert(text: &str, path: &Path, options: &Options) -> Result<Converted, Error> {
    let (kinds, mirrors) = mirror_documents(text, path)?;
    let (document, kind, name, doc) = choose_resource(mirrors, &kinds, path, options)?;
    let Value::Mapping(mut top) = doc else {
        return Err(no_resource(path, &kinds));
    };
    let locator = Locator::new(text, document);
    let api_version = top
        .shift_remove("apiVersion")
        .as_ref()
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    top.shift_remove("kind");
    let expected: &[&str] = if kind == "KafkaMirrorMaker" {
        &["kafka.strimzi.io/v1beta1", "kafka.strimzi.io/v1beta2"]
    } else {
        &["kafka.strimzi.io/v1beta2", "kafka.strimzi.io/v1"]
    };
    if !expected.contains(&api_version.as_str()) {
        return Err(Error::ApiVersion {
            kind,
            name,
            got: api_version,
            expected: expected.join(" or "),
        });
    }
    let mut resource = Node {
        path: Vec::new(),
        map: top,
    };
    let mut ctx = Ctx::default();
    // metadata and status describe the Kubernetes object, not the mirror.
    resource.take("metadata");
    resource.take("status");
    let spec = spec_of(&mut resource)?;
    resource.rest(&mut ctx, "not part of a mirror resource's definition");

    let (loaded, placeholder_env) = if kind == "KafkaMirrorMaker" {
        convert_mm1(spec, path, &locator, &mut ctx)?
    } else {
        convert_mm2(spec, path, &locator, options, &mut ctx)?
    };
    let mut loaded = loaded;
    ctx.notes.append(&mut loaded.warnings);
    render(loaded, kind, name, api_version, path, ctx, placeholder_env)
}

/// A mirror resource of the input: (document index, kind, name, document).
type MirrorDocument = (usize, String, String, Value);

/// Every document's kind, and the mirror resources among them (with their document index, for
/// line numbers).
fn mirror_documents(text: &str, path: &Path) -> Result<(Vec<String>, Vec<MirrorDocument>), Error> {
    let yaml_error = |e: yaml_serde::Error| Error::Yaml {
        path: path.to_path_buf(),
        message: if looks_unindented(text) {
            format!(
                "{e} (the resource looks unindented: `spec:` is followed by fields at the start of \
                 the line; a copy from a web page loses the indentation, restore it)"
            )
        } else {
            e.to_string()
        },
    };
    let mut documents = Vec::new();
    for document in yaml_serde::Deserializer::from_str(text) {
        documents.push(Value::deserialize(document).map_err(yaml_error)?);
    }
    // Mirror resources, with their document index (for line numbers).
    let mut kinds = Vec::new();
    let mut mirrors = Vec::new();
    for (i, doc) in documents.into_iter().enumerate() {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if kind.is_empty() {
            continue;
        }
        kinds.push(kind.clone());
        if kind == "KafkaMirrorMaker" || kind == "KafkaMirrorMaker2" {
            let name = doc
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            mirrors.push((i, kind, name, doc));
        }
    }
    Ok((kinds, mirrors))
}

/// The mirror resource to convert: the one `--name` names, or the only one.
fn choose_resource(
    mut mirrors: Vec<MirrorDocument>,
    kinds: &[String],
    path: &Path,
    options: &Options,
) -> Result<MirrorDocument, Error> {
    let listed = |m: &[(usize, String, String, Value)]| {
        m.iter()
            .map(|(_, k, n, _)| format!("{k}/{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let chosen = match &options.name {
        Some(want) => {
            let pos = mirrors.iter().position(|(_, _, n, _)| n == want);
            match pos {
                Some(p) => mirrors.swap_remove(p),
                None if mirrors.is_empty() => {
                    return Err(no_resource(path, kinds));
                }
                None => {
                    return Err(Error::Choose {
                        path: path.to_path_buf(),
                        problem: format!("no mirror resource is named {want:?}"),
                        names: listed(&mirrors),
                    });
                }
            }
        }
        None => match mirrors.len() {
            0 => return Err(no_resource(path, kinds)),
            1 => mirrors.remove(0),
            _ => {
                return Err(Error::Choose {
                    path: path.to_path_buf(),
                    problem: "several mirror resources".into(),
                    names: listed(&mirrors),
                });
            }
        },
    };
    Ok(chosen)
}

/// The resource's `spec`; without one, says whether the YAML lost its indentation.
fn spec_of(resource: &mut Node) -> Result<Node, Error> {
    match resource.node("spec")? {
        Some(spec) => Ok(spec),
        None => {
            // A copy from a web page often loses its indentation: the spec's fields then sit at
            // the top level and `spec:` is empty.
            let flattened = ["replicas", "consumer", "mirrors", "clusters"]
                .iter()
                .any(|k| resource.map.contains_key(*k));
            Err(Error::Missing {
                field: "spec".into(),
                hint: if flattened {
                    "the spec's fields are at the top level of the document: the YAML lost its \
                     indentation (a copy from a web page?); indent them under `spec:`"
                        .into()
                } else {
                    "the resource has no spec; pass the complete custom resource".into()
                },
            })
        }
    }
}

/// `spec:` (or `metadata:`) followed by a line that is not indented.
fn looks_unindented(text: &str) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    lines.windows(2).any(|w| {
        (w[0] == "spec:" || w[0] == "metadata:")
            && !w[1].is_empty()
            && !w[1].starts_with([' ', '\t', '-', '#'])
    })
}

fn no_resource(path: &Path, kinds: &[String]) -> Error {
    Error::NoResource {
        path: path.to_path_buf(),
        found: if kinds.is_empty() {
            "none".into()
        } else {
            kinds.join(", ")
        },
    }
}

/// The environment the MirrorMaker mappings validate with: the `STRAIT_*` settings collected in
/// `ctx.env`, and a placeholder for each password that comes from a Secret at run time.
fn validation_env(ctx: &Ctx) -> (Environment, Vec<(String, String)>) {
    let placeholders: Vec<(String, String)> = ctx
        .secret_env
        .iter()
        .map(|s| {
            (
                s.var.clone(),
                format!("<from Secret {} key {}>", s.secret, s.key),
            )
        })
        .collect();
    let env = Environment::from_pairs(
        ctx.env
            .iter()
            .chain(placeholders.iter())
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    (env, placeholders)
}

fn config_error(e: crate::Error) -> Error {
    Error::Config(e)
}

// --- KafkaMirrorMaker (MirrorMaker 1) --------------------------------------------------------

fn convert_mm1(
    mut spec: Node,
    path: &Path,
    locator: &Locator<'_>,
    ctx: &mut Ctx,
) -> Result<(crate::Loaded, Vec<(String, String)>), Error> {
    let file = path.display().to_string();
    let mut opts = Mm1Options::default();
    deployment(&mut spec, "mirrorMakerContainer", ctx)?;
    opts.include = Some(mm1_include(&mut spec, ctx)?);

    let mut consumer = spec.node("consumer")?.ok_or_else(|| Error::Missing {
        field: "spec.consumer".into(),
        hint: "describe the source cluster (bootstrapServers, groupId...)".into(),
    })?;
    let mut producer = spec.node("producer")?.ok_or_else(|| Error::Missing {
        field: "spec.producer".into(),
        hint: "describe the target cluster (bootstrapServers...)".into(),
    })?;
    let consumer_props = mm1_consumer(&mut consumer, &mut opts, ctx)?;
    consumer.rest(ctx, "no equivalent in Strait's source settings");
    let producer_props = mm1_producer(&mut producer, &mut opts, ctx)?;
    producer.rest(ctx, "no equivalent in Strait's target settings");
    spec.rest(ctx, "no equivalent in Strait");

    let properties = |props: ClientProps, what: &str| Properties {
        // Only used in messages: `file.yaml#spec.consumer:12 group.id`.
        path: PathBuf::from(format!("{file}#{what}")),
        entries: props
            .into_iter()
            .map(|(key, value, field)| Property {
                key,
                value,
                line: locator.line(&field),
            })
            .collect(),
    };
    mm1_aliases(&consumer_props, &producer_props, ctx);
    let consumer = properties(consumer_props, "spec.consumer");
    let producer = properties(producer_props, "spec.producer");
    opts.consumer_config = consumer.path.clone();
    opts.producer_config = producer.path.clone();
    let (env, placeholders) = validation_env(ctx);
    let loaded = mm1::from_properties(&opts, &consumer, &producer, &env).map_err(config_error)?;
    Ok((loaded, placeholders))
}

/// `spec.include` (or its deprecated name `spec.whitelist`): the topics pattern.
fn mm1_include(spec: &mut Node, ctx: &mut Ctx) -> Result<String, Error> {
    let include = spec.text("include")?;
    let whitelist = spec.text("whitelist")?;
    match (include, whitelist) {
        (Some(i), Some(_)) => {
            ctx.unmapped(
                "spec.whitelist",
                "spec.include is set too and wins (whitelist is its deprecated name)",
            );
            Ok(i)
        }
        (Some(i), None) => Ok(i),
        (None, Some(w)) => Ok(w),
        (None, None) => Err(Error::Missing {
            field: "spec.include".into(),
            hint: "give the topics to mirror as a regular expression, e.g. include: \"orders|payments.*\" \
                   (spec.whitelist in v1beta1)"
                .into(),
        }),
    }
}

/// `spec.consumer`: the source cluster's client properties (and the commit interval).
fn mm1_consumer(
    consumer: &mut Node,
    opts: &mut Mm1Options,
    ctx: &mut Ctx,
) -> Result<ClientProps, Error> {
    let mut consumer_props: ClientProps = Vec::new();
    let servers =
        consumer.required_text("bootstrapServers", "the source cluster's host:port list")?;
    consumer_props.push((
        "bootstrap.servers".into(),
        servers,
        consumer.field("bootstrapServers"),
    ));
    if let Some(g) = consumer.text("groupId")? {
        consumer_props.push(("group.id".into(), g, consumer.field("groupId")));
    }
    if let Some(n) = consumer.text("numStreams")? {
        ctx.unmapped(
            consumer.name("numStreams"),
            format!("{n} streams: Strait sizes its own concurrency (one fetch session per broker, every assigned partition in flight)"),
        );
    }
    if let Some(ms) = consumer.text("offsetCommitInterval")? {
        opts.offset_commit_interval_ms = Some(ms.trim().parse().map_err(|_| Error::Invalid {
            field: consumer.name("offsetCommitInterval"),
            expected: "milliseconds (an integer)".into(),
            got: format!("{ms:?}"),
        })?);
    }
    security(consumer, &Side::Source, &mut consumer_props, ctx)?;
    consumer_props.extend(consumer.config("config", ctx)?);
    Ok(consumer_props)
}

/// `spec.producer`: the target cluster's client properties (and abortOnSendFailure).
fn mm1_producer(
    producer: &mut Node,
    opts: &mut Mm1Options,
    ctx: &mut Ctx,
) -> Result<ClientProps, Error> {
    let mut producer_props: ClientProps = Vec::new();
    let servers =
        producer.required_text("bootstrapServers", "the target cluster's host:port list")?;
    producer_props.push((
        "bootstrap.servers".into(),
        servers,
        producer.field("bootstrapServers"),
    ));
    if let Some(abort) = producer.text("abortOnSendFailure")? {
        opts.abort_on_send_failure = Some(abort.trim().eq_ignore_ascii_case("true"));
    }
    security(producer, &Side::Target, &mut producer_props, ctx)?;
    producer_props.extend(producer.config("config", ctx)?);
    Ok(producer_props)
}

/// MirrorMaker 1 has no cluster names; Strimzi's bootstrap Service `<cluster>-kafka-bootstrap`
/// gives one (a metrics label; names are kept, so it prefixes nothing).
fn mm1_aliases(consumer_props: &ClientProps, producer_props: &ClientProps, ctx: &mut Ctx) {
    for (props, var) in [
        (consumer_props, "STRAIT_SOURCE_ALIAS"),
        (producer_props, "STRAIT_TARGET_ALIAS"),
    ] {
        if let Some(alias) = props
            .first()
            .and_then(|(_, servers, _)| strimzi_cluster_name(servers))
        {
            ctx.env.push((var.into(), alias));
        }
    }
}

/// `europe` for `europe-kafka-bootstrap:9093` (or `europe-kafka-bootstrap.ns.svc:9093`).
fn strimzi_cluster_name(servers: &str) -> Option<String> {
    let host = servers.split(',').next()?.trim().split(':').next()?;
    let service = host.split('.').next()?;
    let name = service.strip_suffix("-kafka-bootstrap")?;
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .then(|| name.to_string())
}

// --- KafkaMirrorMaker2 -----------------------------------------------------------------------

/// One cluster of a `KafkaMirrorMaker2`, still to be converted.
#[derive(Clone)]
struct ClusterSpec {
    alias: String,
    node: Node,
}

fn convert_mm2(
    mut spec: Node,
    path: &Path,
    locator: &Locator<'_>,
    options: &Options,
    ctx: &mut Ctx,
) -> Result<(crate::Loaded, Vec<(String, String)>), Error> {
    deployment(&mut spec, "connectContainer", ctx)?;
    let legacy = spec.map.contains_key("clusters") || spec.map.contains_key("connectCluster");
    let current = spec.map.contains_key("target");
    if legacy && current {
        return Err(Error::Invalid {
            field: "spec".into(),
            expected: "either spec.target with spec.mirrors[].source, or the deprecated \
                       spec.clusters with spec.connectCluster (Strimzi rejects the mix too)"
                .into(),
            got: "both".into(),
        });
    }
    let mirrors = spec.list("mirrors")?;
    if mirrors.is_empty() {
        return Err(Error::Missing {
            field: "spec.mirrors".into(),
            hint: "add the mirror to convert (source cluster, topicsPattern...)".into(),
        });
    }
    let flows = match current {
        true => target_flows(&mut spec, mirrors, ctx)?,
        false => cluster_list_flows(&mut spec, mirrors, ctx)?,
    };
    spec.rest(ctx, "no equivalent in Strait");

    let all = options.mirror.is_none() && flows.len() > 1;
    let flows = match all {
        true => flows,
        false => vec![select_mirror(flows, options, ctx)?],
    };
    let entries = flow_properties(flows, all, ctx)?;
    let props = Properties {
        path: path.to_path_buf(),
        entries: entries
            .into_iter()
            .map(|(key, value, field)| Property {
                key,
                value,
                line: locator.line(&field),
            })
            .collect(),
    };
    let (env, placeholders) = validation_env(ctx);
    let loaded = mm2::from_properties(&props, &[], &env).map_err(config_error)?;
    Ok((loaded, placeholders))
}

/// One mirror to convert: (source cluster, target cluster, the mirror's fields).
type MirrorFlow = (ClusterSpec, ClusterSpec, Node);

/// The mirrors of the current form: one `spec.target`, each mirror with its own `source`.
fn target_flows(
    spec: &mut Node,
    mirrors: Vec<Node>,
    ctx: &mut Ctx,
) -> Result<Vec<MirrorFlow>, Error> {
    let mut flows: Vec<MirrorFlow> = Vec::new();
    let mut target = spec.node("target")?.ok_or_else(|| Error::Missing {
        field: "spec.target".into(),
        hint: "describe the target cluster".into(),
    })?;
    let alias = target.text("alias")?.unwrap_or_else(|| "target".into());
    for (key, why) in [
        (
            "groupId",
            "Kafka Connect's group; Strait keeps its positions in mirror.group_id on the source",
        ),
        (
            "configStorageTopic",
            "a Kafka Connect internal topic; Strait needs none",
        ),
        (
            "statusStorageTopic",
            "a Kafka Connect internal topic; Strait needs none",
        ),
        (
            "offsetStorageTopic",
            "a Kafka Connect internal topic; Strait commits its positions to the source cluster",
        ),
    ] {
        if target.text(key)?.is_some() {
            ctx.unmapped(target.name(key), why);
        }
    }
    let target = ClusterSpec {
        alias,
        node: target,
    };
    for mut m in mirrors {
        let mut source = m.node("source")?.ok_or_else(|| Error::Missing {
            field: m.name("source"),
            hint: "describe the mirror's source cluster (alias, bootstrapServers...)".into(),
        })?;
        let alias = source.required_text("alias", "name the source cluster")?;
        flows.push((
            ClusterSpec {
                alias,
                node: source,
            },
            target.clone(),
            m,
        ));
    }
    Ok(flows)
}

/// The mirrors of the deprecated form: `spec.clusters` named by each mirror's `sourceCluster`
/// and `targetCluster` (default `spec.connectCluster`).
fn cluster_list_flows(
    spec: &mut Node,
    mirrors: Vec<Node>,
    ctx: &mut Ctx,
) -> Result<Vec<MirrorFlow>, Error> {
    let mut flows: Vec<MirrorFlow> = Vec::new();
    let mut clusters: Vec<ClusterSpec> = Vec::new();
    for mut c in spec.list("clusters")? {
        let alias = c.required_text("alias", "name the cluster")?;
        clusters.push(ClusterSpec { alias, node: c });
    }
    let connect = spec.text("connectCluster")?;
    for mut m in mirrors {
        let source = m.required_text("sourceCluster", "name the alias of the source cluster")?;
        let target = m
            .text("targetCluster")?
            .or_else(|| connect.clone())
            .ok_or_else(|| Error::Missing {
                field: m.name("targetCluster"),
                hint: "name the alias of the target cluster".into(),
            })?;
        let find = |alias: &str, field: String, clusters: &[ClusterSpec]| {
            clusters
                .iter()
                .find(|c| c.alias == alias)
                .cloned()
                .ok_or_else(|| Error::Invalid {
                    field,
                    expected: format!(
                        "an alias listed in spec.clusters ({})",
                        clusters
                            .iter()
                            .map(|c| c.alias.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    got: format!("{alias:?}"),
                })
        };
        let s = find(&source, m.name("sourceCluster"), &clusters)?;
        let t = find(&target, m.name("targetCluster"), &clusters)?;
        flows.push((s, t, m));
    }
    let used: Vec<&str> = flows
        .iter()
        .flat_map(|(s, t, _)| [s.alias.as_str(), t.alias.as_str()])
        .collect();
    for c in &clusters {
        if !used.contains(&c.alias.as_str()) {
            ctx.unmapped(
                display(&c.node.path),
                format!("cluster {} is used by no mirror", c.alias),
            );
        }
    }
    Ok(flows)
}

/// The mm2.properties entries of `flows`: each cluster once, then each flow's settings; with
/// `all` (several flows), every cluster under its alias and secrets as `${env:...}`.
fn flow_properties(flows: Vec<MirrorFlow>, all: bool, ctx: &mut Ctx) -> Result<ClientProps, Error> {
    let mut entries: ClientProps = Vec::new();
    let mut aliases: Vec<String> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (source, target, mut mirror) in flows {
        if source.alias == target.alias {
            return Err(Error::Invalid {
                field: display(&mirror.path),
                expected: "different source and target clusters".into(),
                got: format!("{} -> {}", source.alias, target.alias),
            });
        }
        let flow = format!("{}->{}", source.alias, target.alias);
        if names.contains(&flow) {
            return Err(Error::Invalid {
                field: display(&mirror.path),
                expected: "each source -> target pair in one mirror".into(),
                got: format!("a second mirror {flow}"),
            });
        }
        entries.push((
            format!("{flow}.enabled"),
            "true".into(),
            mirror.path.clone(),
        ));
        // One flow keeps the [source]/[target] form; several name each cluster once.
        for (cluster, side) in [(source, Side::Source), (target, Side::Target)] {
            if aliases.contains(&cluster.alias) {
                continue;
            }
            let side = match all {
                true => Side::Cluster(cluster.alias.clone()),
                false => side,
            };
            aliases.push(cluster.alias.clone());
            entries.extend(cluster_entries(cluster, &side, ctx)?);
        }
        entries.extend(mirror_entries(&flow, &mut mirror, ctx)?);
        mirror.rest(ctx, "no equivalent in Strait");
        names.push(flow);
    }
    entries.insert(0, ("clusters".into(), aliases.join(", "), Vec::new()));
    if all {
        // Several flows write their secrets as ${env:STRAIT_CLUSTER_...} references.
        entries.push(("config.providers".into(), "env".into(), Vec::new()));
        entries.push((
            "config.providers.env.class".into(),
            "org.apache.kafka.common.config.provider.EnvVarConfigProvider".into(),
            Vec::new(),
        ));
    }

    Ok(entries)
}

/// `--mirror <alias>` (or the only mirror): the flow to convert; the others are listed.
fn select_mirror(
    mut flows: Vec<MirrorFlow>,
    options: &Options,
    ctx: &mut Ctx,
) -> Result<MirrorFlow, Error> {
    let index = match &options.mirror {
        Some(want) => flows
            .iter()
            .position(|(s, _, _)| &s.alias == want)
            .ok_or_else(|| Error::Invalid {
                field: "--mirror".into(),
                expected: format!(
                    "the source alias of a mirror ({})",
                    flows
                        .iter()
                        .map(|(s, _, _)| s.alias.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                got: format!("{want:?}"),
            })?,
        None => 0,
    };
    let chosen = flows[index].0.alias.clone();
    for (i, (s, t, m)) in flows.iter().enumerate() {
        if i != index {
            ctx.unmapped(
                display(&m.path),
                format!(
                    "mirror {}->{}: --mirror {chosen} converts one mirror; convert this one with \
                     `--mirror {}`, or all of them into [[flows]] without --mirror",
                    s.alias, t.alias, s.alias
                ),
            );
        }
    }
    Ok(flows.swap_remove(index))
}

/// A cluster's mm2.properties entries (`<alias>.bootstrap.servers`, security, `config`).
fn cluster_entries(
    mut cluster: ClusterSpec,
    side: &Side,
    ctx: &mut Ctx,
) -> Result<ClientProps, Error> {
    let node = &mut cluster.node;
    let servers = node.required_text("bootstrapServers", "the cluster's host:port list")?;
    let mut props: ClientProps = vec![(
        "bootstrap.servers".into(),
        servers,
        node.field("bootstrapServers"),
    )];
    security(node, side, &mut props, ctx)?;
    props.extend(node.config("config", ctx)?);
    let why = match side {
        Side::Source => "no equivalent in Strait's source settings",
        Side::Target => "no equivalent in Strait's target settings",
        Side::Cluster(_) => "no equivalent in Strait's cluster settings",
    };
    cluster.node.rest(ctx, why);
    Ok(props
        .into_iter()
        .map(|(k, v, f)| (format!("{}.{k}", cluster.alias), v, f))
        .collect())
}

/// A mirror's connector-level mm2.properties entries (`<flow>.topics`, groups, the connectors'
/// `config`).
fn mirror_entries(flow: &str, mirror: &mut Node, ctx: &mut Ctx) -> Result<ClientProps, Error> {
    let mut entries: ClientProps = Vec::new();
    if let Some(p) = mirror.text("topicsPattern")? {
        entries.push((format!("{flow}.topics"), p, mirror.field("topicsPattern")));
    }
    for key in ["topicsExcludePattern", "topicsBlacklistPattern"] {
        if let Some(p) = mirror.text(key)? {
            let k = if key == "topicsExcludePattern" {
                "topics.exclude"
            } else {
                "topics.blacklist"
            };
            entries.push((format!("{flow}.{k}"), p, mirror.field(key)));
        }
    }
    let checkpoints = mirror
        .map
        .get("checkpointConnector")
        .is_some_and(|v| !v.is_null());
    let groups_fields = [
        ("groupsPattern", "groups"),
        ("groupsExcludePattern", "groups.exclude"),
        ("groupsBlacklistPattern", "groups.blacklist"),
    ];
    for (key, mm2_key) in groups_fields {
        let Some(p) = mirror.text(key)? else { continue };
        if checkpoints {
            entries.push((format!("{flow}.{mm2_key}"), p, mirror.field(key)));
        } else {
            ctx.unmapped(
                mirror.name(key),
                "the mirror has no checkpointConnector, so Strimzi checkpoints no group and \
                 neither does Strait; add a checkpointConnector to the resource to convert it",
            );
        }
    }
    if checkpoints
        && !entries
            .iter()
            .any(|(k, _, _)| k == &format!("{flow}.groups"))
    {
        // MM2's checkpoint connector defaults to every group; Strait checkpoints only the
        // groups it is told, so the default is written out.
        entries.push((
            format!("{flow}.groups"),
            ".*".into(),
            mirror.field("checkpointConnector"),
        ));
        ctx.notes.push(format!(
            "{}: no groupsPattern, so every consumer group is checkpointed (MirrorMaker 2's \
             default groups = .*), written out as mirror.groups = [\".*\"]",
            mirror.name("checkpointConnector")
        ));
    }
    for connector in [
        "sourceConnector",
        "checkpointConnector",
        "heartbeatConnector",
    ] {
        let Some(mut c) = mirror.node(connector)? else {
            continue;
        };
        if connector == "heartbeatConnector" {
            ctx.unmapped(
                display(&c.path),
                "Strait has no heartbeat connector to configure (Strimzi removes it in v1); its \
                 settings below are listed as ignored",
            );
        }
        for (k, v, f) in c.config("config", ctx)? {
            entries.push((format!("{flow}.{k}"), v, f));
        }
        if let Some(n) = c.text("tasksMax")? {
            ctx.unmapped(
                c.name("tasksMax"),
                format!("{n}: Strait has no tasks; run more replicas to spread the partitions"),
            );
        }
        c.rest(
            ctx,
            "a Kafka Connect connector setting; Strait runs no connectors",
        );
    }
    Ok(entries)
}

// --- shared pieces -----------------------------------------------------------------------------

/// `tls` and `authentication` of a cluster (`spec.consumer`, `spec.producer`, `clusters[]`,
/// `target`, `mirrors[].source`) -> client properties, mounted Secret files and Secret variables.
fn security(
    node: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
) -> Result<(), Error> {
    let mut tls = false;
    if let Some(mut t) = node.node("tls")? {
        tls = true;
        trusted_certificates(&mut t, side, props, ctx)?;
        t.rest(ctx, "no equivalent in Strait's TLS settings");
    }
    let mut sasl = false;
    if let Some(mut auth) = node.node("authentication")? {
        sasl = authentication(&mut auth, side, props, ctx, &mut tls)?;
        auth.rest(ctx, "no equivalent in Strait's authentication settings");
    }
    let protocol = match (tls, sasl) {
        (false, false) => None,
        (true, false) => Some("SSL"),
        (false, true) => Some("SASL_PLAINTEXT"),
        (true, true) => Some("SASL_SSL"),
    };
    if let Some(p) = protocol {
        let field = node.field(if sasl { "authentication" } else { "tls" });
        props.insert(
            1.min(props.len()),
            ("security.protocol".into(), p.into(), field),
        );
    }
    Ok(())
}

/// `tls.trustedCertificates`: the first one becomes `ssl.ca.location`; Strait reads one CA file
/// per cluster, so the others are listed as not converted.
fn trusted_certificates(
    t: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
) -> Result<(), Error> {
    let mut cas = Vec::new();
    for mut cert in t.list("trustedCertificates")? {
        let secret =
            cert.required_text("secretName", "name the Secret holding the CA certificate")?;
        let Some(key) = trusted_certificate_key(&mut cert, ctx)? else {
            continue;
        };
        cas.push((secret, key, cert.field("secretName")));
        cert.rest(ctx, "no equivalent in Strait's TLS settings");
    }
    let mut cas = cas.into_iter();
    if let Some((secret, key, field)) = cas.next() {
        let path = ctx.secret_file(side, "ca", &secret, &key);
        props.push(("ssl.ca.location".into(), path, field));
    }
    for (secret, key, field) in cas {
        ctx.unmapped(
            display(&field).replace(".secretName", ""),
            format!(
                "Secret {secret} key {key}: Strait reads one CA file per cluster; put all the \
                 certificates into one PEM bundle in one Secret key and list only that one"
            ),
        );
    }
    Ok(())
}

/// The Secret key of one trusted certificate (`certificate`, or a `pattern` matching Strimzi's
/// `ca.crt`); `None` when the pattern cannot be read as one file (listed as not converted).
fn trusted_certificate_key(cert: &mut Node, ctx: &mut Ctx) -> Result<Option<String>, Error> {
    let key = match (cert.text("certificate")?, cert.text("pattern")?) {
        (Some(c), _) => c,
        (None, Some(pattern)) => {
            // Strimzi's cluster CA Secret holds ca.crt (and ca.p12, ca.password).
            if glob_matches(&pattern, "ca.crt") {
                ctx.notes.push(format!(
                    "{}: pattern {pattern:?} is read as the Secret's ca.crt; during a CA \
                     renewal Strimzi adds older certificates to the Secret, which Strait \
                     does not read",
                    cert.name("pattern")
                ));
                "ca.crt".to_string()
            } else {
                ctx.unmapped(
                    cert.name("pattern"),
                    format!(
                        "{pattern:?}: Strait reads one CA file; name the key with certificate:"
                    ),
                );
                return Ok(None);
            }
        }
        (None, None) => {
            return Err(Error::Missing {
                field: cert.name("certificate"),
                hint: "name the Secret key holding the CA certificate, e.g. certificate: ca.crt"
                    .into(),
            });
        }
    };
    Ok(Some(key))
}

/// `authentication`: client certificate, SCRAM/PLAIN or OAuth; returns whether it is SASL.
/// A client certificate without a `tls` section turns TLS on (`tls`).
fn authentication(
    auth: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
    tls: &mut bool,
) -> Result<bool, Error> {
    let kind = auth.required_text("type", "tls, scram-sha-512, scram-sha-256, plain or oauth")?;
    let auth_path = display(&auth.path);
    match kind.as_str() {
        "tls" => {
            client_certificate(auth, side, props, ctx)?;
            if !*tls {
                // Strimzi refuses this too: a client certificate needs TLS.
                *tls = true;
                ctx.notes.push(format!(
                    "{auth_path}: type tls without a tls section; the connection uses TLS \
                     with the system's trusted CAs"
                ));
            }
            Ok(false)
        }
        "scram-sha-512" | "scram-sha-256" | "plain" => {
            password(&kind, auth, side, props, ctx)?;
            Ok(true)
        }
        "oauth" => {
            props.push((
                "sasl.mechanism".into(),
                "OAUTHBEARER".into(),
                auth.field("type"),
            ));
            oauth(auth, side, props, ctx)?;
            Ok(true)
        }
        other => {
            let why = format!(
                "authentication type {other:?} is not supported by Strait (it supports \
                 tls, scram-sha-512, scram-sha-256, plain and oauth)"
            );
            ctx.unmapped(format!("{auth_path} (type {other})"), why);
            // The rest of an unsupported authentication is covered by the line above.
            auth.map.clear();
            Ok(false)
        }
    }
}

/// `type: tls`: the client certificate and key from `certificateAndKey`.
fn client_certificate(
    auth: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
) -> Result<(), Error> {
    let mut ck = auth
        .node("certificateAndKey")?
        .ok_or_else(|| Error::Missing {
            field: auth.name("certificateAndKey"),
            hint:
                "name the Secret with the client certificate and key (secretName, certificate, key)"
                    .into(),
        })?;
    let secret = ck.required_text(
        "secretName",
        "name the Secret (the KafkaUser's, for Strimzi users)",
    )?;
    let cert = ck.required_text(
        "certificate",
        "the Secret key of the certificate, e.g. user.crt",
    )?;
    let key = ck.required_text("key", "the Secret key of the private key, e.g. user.key")?;
    let cert_path = ctx.secret_file(side, "user", &secret, &cert);
    let key_path = ctx.secret_file(side, "user", &secret, &key);
    props.push((
        "ssl.certificate.location".into(),
        cert_path,
        ck.field("certificate"),
    ));
    props.push(("ssl.key.location".into(), key_path, ck.field("key")));
    ck.rest(ctx, "no equivalent in Strait's TLS settings");
    Ok(())
}

/// `type: scram-sha-512 | scram-sha-256 | plain`: mechanism, user, and the password's Secret.
fn password(
    kind: &str,
    auth: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
) -> Result<(), Error> {
    let mechanism = kind.to_ascii_uppercase();
    props.push(("sasl.mechanism".into(), mechanism, auth.field("type")));
    let user = auth.required_text("username", "the SASL user name (the KafkaUser's name)")?;
    props.push(("sasl.username".into(), user, auth.field("username")));
    let mut ps = auth.node("passwordSecret")?.ok_or_else(|| Error::Missing {
        field: auth.name("passwordSecret"),
        hint: "name the Secret with the password (secretName, password)".into(),
    })?;
    let secret = ps.required_text("secretName", "name the Secret holding the password")?;
    let key = ps.required_text(
        "password",
        "the Secret key holding the password, e.g. password",
    )?;
    let field = ps.field("password");
    ps.rest(ctx, "no equivalent in Strait's SASL settings");
    ctx.secret_property(side, "sasl.password", (secret, key), field, props);
    Ok(())
}

/// Strimzi's `authentication: type: oauth` (KafkaClientAuthenticationOAuth) -> Strait's
/// OAUTHBEARER client properties (docs/security.md): the client credentials grant against
/// `tokenEndpointUri`, or a static `accessToken` read from its mounted Secret at every refresh.
fn oauth(
    auth: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
) -> Result<(), Error> {
    oauth_grant(auth, side, props, ctx)?;
    if let Some(scope) = auth.text("scope")? {
        props.push(("sasl.oauthbearer.scope".into(), scope, auth.field("scope")));
    }
    for (key, property) in [
        ("connectTimeoutSeconds", "sasl.login.connect.timeout.ms"),
        ("readTimeoutSeconds", "sasl.login.read.timeout.ms"),
    ] {
        if let Some(secs) = auth.text(key)? {
            let ms = secs.trim().parse::<u64>().map_err(|_| Error::Invalid {
                field: auth.name(key),
                expected: "whole seconds".into(),
                got: format!("{secs:?}"),
            })? * 1000;
            props.push((property.into(), ms.to_string(), auth.field(key)));
        }
    }
    oauth_trusted_certificates(auth, side, ctx)?;
    oauth_unsupported(auth, ctx);
    Ok(())
}

/// How the token is obtained: a static `accessToken` Secret, or the client credentials grant
/// (`tokenEndpointUri`, `clientId`, `clientSecret`).
fn oauth_grant(
    auth: &mut Node,
    side: &Side,
    props: &mut ClientProps,
    ctx: &mut Ctx,
) -> Result<(), Error> {
    if let Some((secret, key, _)) = secret_ref(auth, "accessToken", ctx)? {
        // Java's `file:` token URL: the token is read again at every refresh, so a rotated
        // Secret is picked up.
        let path = ctx.secret_file(side, "oauth", &secret, &key);
        props.push((
            "sasl.oauthbearer.token.endpoint.url".into(),
            format!("file:{path}"),
            auth.field("accessToken"),
        ));
    } else {
        let url = auth.required_text(
            "tokenEndpointUri",
            "the token endpoint of the authorization server (client credentials), or an \
             accessToken Secret",
        )?;
        props.push((
            "sasl.oauthbearer.token.endpoint.url".into(),
            url,
            auth.field("tokenEndpointUri"),
        ));
        let id = auth.required_text("clientId", "the OAuth client id")?;
        props.push((
            "sasl.oauthbearer.client.credentials.client.id".into(),
            id,
            auth.field("clientId"),
        ));
        match secret_ref(auth, "clientSecret", ctx)? {
            Some((secret, key, field)) => ctx.secret_property(
                side,
                "sasl.oauthbearer.client.credentials.client.secret",
                (secret, key),
                field,
                props,
            ),
            None => {
                return Err(Error::Missing {
                    field: auth.name("clientSecret"),
                    hint: "Strait's OAuth client uses the client credentials grant: name the \
                           Secret with the client secret (secretName, key)"
                        .into(),
                });
            }
        }
    }
    Ok(())
}

/// The token endpoint's CA: Strait's token requests trust the system CAs or SSL_CERT_FILE.
fn oauth_trusted_certificates(auth: &mut Node, side: &Side, ctx: &mut Ctx) -> Result<(), Error> {
    for (i, mut cert) in auth.list("tlsTrustedCertificates")?.into_iter().enumerate() {
        let secret = cert.required_text("secretName", "name the Secret holding the CA")?;
        let key = cert.required_text("certificate", "the Secret key of the CA certificate")?;
        let (field, item) = (cert.name("secretName"), display(&cert.path));
        cert.rest(ctx, "no equivalent in Strait's OAuth settings");
        let path = ctx.secret_file(side, "oauth-ca", &secret, &key);
        match i {
            0 => ctx.notes.push(format!(
                "{}: token requests trust the system CAs, or the PEM bundle SSL_CERT_FILE \
                 names: set SSL_CERT_FILE={path} in the pod (Secret {secret}, key {key}); it \
                 applies to every token endpoint of the process",
                field.replace(".secretName", "")
            )),
            _ => ctx.unmapped(
                item,
                "SSL_CERT_FILE names one PEM bundle: put every CA of the token endpoints into it",
            ),
        }
    }
    Ok(())
}

/// The OAuth settings Strait has no equivalent for, each listed with why.
fn oauth_unsupported(auth: &mut Node, ctx: &mut Ctx) {
    for (key, why) in [
        (
            "audience",
            "Strait's token request sends no audience parameter; configure the client's default audience at the authorization server",
        ),
        (
            "refreshToken",
            "Strait's OAuth client implements the client credentials grant and file tokens, not the refresh token grant; use clientId + clientSecret, or accessToken",
        ),
        (
            "passwordSecret",
            "Strait's OAuth client implements the client credentials grant, not the password grant; use clientId + clientSecret",
        ),
        ("username", "see passwordSecret"),
        (
            "disableTlsHostnameVerification",
            "Strait always verifies the token endpoint's host name",
        ),
    ] {
        if auth.map.get(key).is_some_and(|v| !v.is_null()) {
            auth.take(key);
            ctx.unmapped(auth.name(key), why);
        }
    }
}

/// A `{secretName, key}` field of an OAuth authentication: (Secret, key, the key's field).
fn secret_ref(
    n: &mut Node,
    key: &str,
    ctx: &mut Ctx,
) -> Result<Option<(String, String, Vec<Seg>)>, Error> {
    let Some(mut s) = n.node(key)? else {
        return Ok(None);
    };
    let name = s.required_text("secretName", "name the Secret")?;
    let k = s.required_text("key", "the key in the Secret")?;
    let field = s.field("key");
    s.rest(ctx, "no equivalent in Strait's OAuth settings");
    Ok(Some((name, k, field)))
}

/// `*` and `?` globs (Strimzi's trustedCertificates pattern).
fn glob_matches(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some('*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some('?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

/// The Deployment-level fields both kinds share: replicas, tracing, logging, metrics, the pod
/// template, resources, probes, JVM and image settings.
fn deployment(spec: &mut Node, container: &str, ctx: &mut Ctx) -> Result<(), Error> {
    if let Some(r) = spec.text("replicas")? {
        ctx.replicas = Some(r.trim().parse().map_err(|_| Error::Invalid {
            field: "spec.replicas".into(),
            expected: "a number of pods".into(),
            got: format!("{r:?}"),
        })?);
    }
    ctx.resources = spec.take("resources");
    if ctx.resources.is_some() {
        ctx.notes.push(
            "spec.resources: written to the Helm values (resources); size them from Strait's \
             benchmark rather than the JVM's needs"
                .into(),
        );
    }
    jvm_pod_settings(spec, ctx);
    // Metrics: Strait always serves its own (and the probes need the listener), so the listener
    // is opened for the pod whether or not Strimzi exported metrics.
    for key in ["metricsConfig", "metrics"] {
        if spec.take(key).is_some() {
            ctx.unmapped(
                format!("spec.{key}"),
                format!(
                    "the JMX exporter configuration does not apply: Strait serves its own \
                     Prometheus metrics at {POD_METRICS_LISTEN}/metrics (metrics.listen); \
                     dashboards need Strait's metric names"
                ),
            );
        }
    }
    ctx.env
        .push(("STRAIT_METRICS_LISTEN".into(), POD_METRICS_LISTEN.into()));
    logging(spec, ctx)?;

    // The container's environment carries the tracing settings (JAEGER_*, OTEL_*).
    let env = container_env(spec, container, ctx)?;
    let env_field = format!("spec.template.{container}.env");
    let tracing_type = match spec.node("tracing")? {
        Some(mut t) => {
            let kind = t.required_text("type", "jaeger or opentelemetry")?;
            t.rest(ctx, "no equivalent in Strait's tracing settings");
            Some(kind)
        }
        None => None,
    };
    tracing(tracing_type.as_deref(), env, &env_field, ctx);
    Ok(())
}

/// The pod settings of Strimzi's JVM deployment that do not apply to Strait, each listed with
/// why.
fn jvm_pod_settings(spec: &mut Node, ctx: &mut Ctx) {
    for (key, why) in [
        (
            "version",
            "the Kafka version of Strimzi's image; Strait speaks to Kafka 0.11 and later by itself",
        ),
        (
            "image",
            "Strimzi's container image; the Helm chart sets Strait's image",
        ),
        ("jvmOptions", "Strait is not a JVM"),
        (
            "jmxOptions",
            "Strait is not a JVM; its metrics are served over HTTP (/metrics)",
        ),
        (
            "livenessProbe",
            "the Helm chart probes /healthz with its own timings",
        ),
        (
            "readinessProbe",
            "the Helm chart probes /readyz with its own timings",
        ),
        (
            "rack",
            "Strait does not fetch from the closest replica (no client.rack)",
        ),
        (
            "clientRackInitImage",
            "Strait does not fetch from the closest replica (no client.rack)",
        ),
        (
            "externalConfiguration",
            "environment variables and volumes for Kafka Connect; set Strait's through the Helm chart",
        ),
    ] {
        if let Some(v) = spec.take(key) {
            ctx.unmapped(format!("spec.{key}"), format!("{}: {why}", short(&v)));
        }
    }
}

/// A container variable: (name, value, its field).
type EnvVar = (String, Option<String>, Vec<Seg>);

/// The variables of the mirror container in `spec.template` (name, value, field); values
/// from Secrets or ConfigMaps are listed as not converted. The rest of the template is listed.
fn container_env(spec: &mut Node, container: &str, ctx: &mut Ctx) -> Result<Vec<EnvVar>, Error> {
    let mut env: Vec<EnvVar> = Vec::new();
    if let Some(mut template) = spec.node("template")? {
        if let Some(mut c) = template.node(container)? {
            for mut e in c.list("env")? {
                let name = e.required_text("name", "the variable's name")?;
                let value = e.text("value")?;
                let field = e.path.clone();
                if value.is_none() && e.take("valueFrom").is_some() {
                    ctx.unmapped(
                        format!("{}[{name}]", c.name("env")),
                        "a value from a Secret or ConfigMap; set it through the Helm chart's environment",
                    );
                    continue;
                }
                env.push((name, value, field));
            }
            c.rest(
                ctx,
                "a container setting; set it through the Helm chart's values",
            );
        }
        template.rest(
            ctx,
            "a Kubernetes pod setting; set it through the Helm chart's values",
        );
    }
    Ok(env)
}

/// `spec.logging`: the root logger's level becomes `log.level`.
fn logging(spec: &mut Node, ctx: &mut Ctx) -> Result<(), Error> {
    let Some(mut logging) = spec.node("logging")? else {
        return Ok(());
    };
    let kind = logging.text("type")?.unwrap_or_default();
    if kind != "inline" {
        ctx.unmapped(
            "spec.logging",
            format!(
                "{kind:?} logging (a log4j file in a ConfigMap) has no equivalent; set log.level"
            ),
        );
        logging.map.clear();
        return Ok(());
    }
    if let Some(mut loggers) = logging.node("loggers")? {
        for (k, v) in std::mem::take(&mut loggers.map) {
            let Some(k) = key_text(&k) else { continue };
            let field = format!("{}.{k}", display(&loggers.path));
            let level = scalar(&v, &field)?;
            let mapped = match level.trim().to_ascii_uppercase().as_str() {
                "ALL" | "TRACE" => Some("trace"),
                "DEBUG" => Some("debug"),
                "INFO" => Some("info"),
                "WARN" => Some("warn"),
                "ERROR" | "FATAL" => Some("error"),
                "OFF" => Some("off"),
                _ => None,
            };
            match (k.ends_with("root.logger") || k.ends_with("root.logger.level"), mapped) {
                (true, Some(l)) => ctx.env.push(("STRAIT_LOG_LEVEL".into(), l.into())),
                _ => ctx.unmapped(field, "a Java logger; Strait's log.level takes tracing directives (e.g. \"strait=debug,info\")"),
            }
        }
    }
    logging.rest(ctx, "no equivalent in Strait's log settings");
    Ok(())
}

/// `spec.tracing` and the container's JAEGER_* / OTEL_* variables -> `[tracing]`.
fn tracing(kind: Option<&str>, env: Vec<EnvVar>, env_field: &str, ctx: &mut Ctx) {
    let field = |name: &str| format!("{env_field}[{name}]");
    let Some(kind) = kind else {
        for (name, _, _) in env {
            ctx.unmapped(
                field(&name),
                "spec.tracing is not set, so Strimzi did not trace and neither does Strait; other \
                 variables: set them through the Helm chart's environment",
            );
        }
        return;
    };
    if kind != "jaeger" && kind != "opentelemetry" {
        ctx.unmapped(
            "spec.tracing.type",
            format!("{kind:?} tracing is not supported; Strait exports OpenTelemetry traces over OTLP/HTTP"),
        );
    }
    let mut read = TracingEnv::default();
    for (name, value, _) in env {
        let value = value.unwrap_or_default();
        read.variable(&name, value.trim(), &field(&name), ctx);
    }
    read.apply(kind, env_field, ctx);
}

/// What the tracing variables of a Strimzi resource say, read one variable at a time.
#[derive(Default)]
struct TracingEnv {
    endpoint: Option<String>,
    service: Option<String>,
    /// (sampler type, the variable's field).
    sampler: Option<(String, String)>,
    sampler_param: Option<String>,
}

impl TracingEnv {
    /// Reads the variable `name` = `v` (written at `field`).
    fn variable(&mut self, name: &str, v: &str, field: &str, ctx: &mut Ctx) {
        match name {
            "JAEGER_SERVICE_NAME" | "OTEL_SERVICE_NAME" => self.service = Some(v.to_string()),
            "OTEL_EXPORTER_OTLP_ENDPOINT" | "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" => {
                self.endpoint = Some(otlp_endpoint(v, field, ctx));
            }
            "OTEL_EXPORTER_OTLP_PROTOCOL" | "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" => {
                if v != "http/protobuf" {
                    ctx.notes.push(format!(
                        "{field}: {v:?}: Strait always exports OTLP over HTTP (http/protobuf)"
                    ));
                }
            }
            "OTEL_TRACES_EXPORTER" => {
                if v != "otlp" {
                    ctx.unmapped(field, format!("{v:?}: Strait exports OTLP only"));
                }
            }
            "JAEGER_AGENT_HOST" => {
                let url = jaeger_agent_endpoint(v, field, ctx);
                if self.endpoint.is_none() {
                    self.endpoint = Some(url);
                }
            }
            "JAEGER_ENDPOINT" => {
                // http://collector:14268/api/traces -> the same host's OTLP/HTTP port.
                let host = v
                    .split("://")
                    .nth(1)
                    .unwrap_or(v)
                    .split(['/', ':'])
                    .next()
                    .unwrap_or("")
                    .to_string();
                let url = format!("http://{host}:{OTLP_HTTP_PORT}");
                ctx.notes.push(format!(
                    "{field}: {v} takes Jaeger Thrift; tracing.otlp_endpoint is {url} (the same \
                     host's OTLP/HTTP port)"
                ));
                self.endpoint = Some(url);
            }
            "JAEGER_AGENT_PORT" => ctx.notes.push(format!(
                "{field}: {v}: the agent port is not used (Strait sends OTLP/HTTP to port {OTLP_HTTP_PORT})"
            )),
            "JAEGER_SAMPLER_TYPE" | "OTEL_TRACES_SAMPLER" => {
                self.sampler = Some((v.to_string(), field.to_string()))
            }
            "JAEGER_SAMPLER_PARAM" | "OTEL_TRACES_SAMPLER_ARG" => {
                self.sampler_param = Some(v.to_string())
            }
            _ => ctx.unmapped(
                field,
                "not a tracing setting Strait reads; set it through the Helm chart's environment",
            ),
        }
    }

    /// Turns what was read into Strait's tracing variables (or notes on what is missing).
    fn apply(self, kind: &str, env_field: &str, ctx: &mut Ctx) {
        if let Some((sampler, field)) = self.sampler {
            match sample_ratio(&sampler, self.sampler_param.as_deref()) {
                Some(r) => {
                    ctx.env
                        .push(("STRAIT_TRACING_SAMPLE_RATIO".into(), r.to_string()));
                }
                None => ctx.unmapped(
                    field,
                    format!(
                        "sampler {sampler:?} with parameter {:?} has no equivalent; Strait samples a \
                         fixed ratio (tracing.sample_ratio, default 1)",
                        self.sampler_param.unwrap_or_default()
                    ),
                ),
            }
        }
        if let Some(s) = self.service.filter(|s| !s.is_empty()) {
            ctx.env.push(("STRAIT_TRACING_SERVICE_NAME".into(), s));
        }
        match self.endpoint {
            Some(url) => ctx.env.push(("STRAIT_TRACING_OTLP_ENDPOINT".into(), url)),
            None => ctx.notes.push(format!(
                "spec.tracing.type is {kind} but no collector address was found in {env_field}; \
                 set tracing.otlp_endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT in the pod) to export spans"
            )),
        }
    }
}

/// An OTLP endpoint variable as Strait's OTLP/HTTP endpoint (gRPC's port 4317 becomes 4318).
fn otlp_endpoint(v: &str, field: &str, ctx: &mut Ctx) -> String {
    let url = if v.starts_with("http://") || v.starts_with("https://") {
        v.to_string()
    } else {
        format!("http://{v}")
    };
    let (url, rewritten) = with_port(&url, 4317, OTLP_HTTP_PORT);
    if rewritten {
        ctx.notes.push(format!(
            "{field}: {v} is OTLP/gRPC (port 4317); Strait exports OTLP over HTTP, so \
             tracing.otlp_endpoint is {url}; check the collector listens there"
        ));
    }
    url
}

/// The Jaeger agent takes UDP Thrift, not OTLP. The Jaeger operator names the collector next to
/// it `<name>-collector`, which accepts OTLP/HTTP on 4318.
fn jaeger_agent_endpoint(v: &str, field: &str, ctx: &mut Ctx) -> String {
    let host = match v.strip_suffix("-agent") {
        Some(base) => format!("{base}-collector"),
        None => v.to_string(),
    };
    let url = format!("http://{host}:{OTLP_HTTP_PORT}");
    ctx.notes.push(format!(
        "{field}: {v} is a Jaeger agent (UDP), which does not take OTLP; \
         tracing.otlp_endpoint is {url} (the Jaeger collector's OTLP/HTTP port); \
         change it if your collector is elsewhere"
    ));
    url
}

/// The fixed sampling ratio a Jaeger or OpenTelemetry sampler amounts to, if any.
fn sample_ratio(sampler: &str, param: Option<&str>) -> Option<f64> {
    let param: Option<f64> = param.and_then(|p| p.parse().ok());
    let ratio = match sampler {
        "const" => param.map(|p| if p >= 1.0 { 1.0 } else { 0.0 }),
        "probabilistic" | "traceidratio" | "parentbased_traceidratio" => param,
        "always_on" | "parentbased_always_on" => Some(1.0),
        "always_off" | "parentbased_always_off" => Some(0.0),
        _ => None,
    };
    ratio.filter(|r| (0.0..=1.0).contains(r))
}

/// Replaces an explicit `:from` port of a URL's authority by `:to`.
fn with_port(url: &str, from: u16, to: u16) -> (String, bool) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let (authority, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once(':') {
        Some((host, port)) if port == from.to_string() => {
            (format!("{scheme}://{host}:{to}{tail}"), true)
        }
        _ => (url.to_string(), false),
    }
}

// --- output -------------------------------------------------------------------------------------

fn render(
    loaded: crate::Loaded,
    kind: String,
    name: String,
    api_version: String,
    path: &Path,
    ctx: Ctx,
    placeholders: Vec<(String, String)>,
) -> Result<Converted, Error> {
    let mut flows = match loaded.flows.is_empty() {
        true => vec![loaded.config],
        false => loaded.flows,
    };
    for config in &mut flows {
        hide_secrets(config, &placeholders);
    }
    let head = header(&kind, &name, &api_version, path, &ctx);
    let body = match flows.as_slice() {
        [one] => one.to_toml(false),
        several => crate::config::flows::to_toml(several, false),
    };
    let toml = format!("{head}{body}");

    // The file must load as it is written (with the passwords the chart provides).
    let env = Environment::from_pairs(placeholders.iter().map(|(k, v)| (k.clone(), v.clone())));
    let reloaded = Config::from_toml_str(&toml, path, &env).map_err(config_error)?;
    let helm_values = match flows.as_slice() {
        [one] => helm_values(&kind, &name, one, &ctx),
        several => flows_helm_values(&kind, &name, several.len()),
    };
    Ok(Converted {
        toml,
        helm_values,
        config: reloaded.config,
        flows: reloaded.flows,
        kind,
        name,
        replicas: ctx.replicas,
        unmapped: ctx.unmapped,
        notes: ctx.notes,
        secret_files: ctx.secret_files,
        secret_env: ctx.secret_env,
    })
}

/// The comment block at the top of the converted file: where it came from, replicas, the
/// mounted Secrets and environment variables it expects, what was not converted, and notes.
fn header(kind: &str, name: &str, api_version: &str, path: &Path, ctx: &Ctx) -> String {
    let mut head = String::new();
    let _ = writeln!(
        head,
        "# Converted by `strait import strimzi` from {kind} {name} ({api_version}) in {}.",
        path.display()
    );
    if let Some(r) = ctx.replicas {
        let _ = writeln!(
            head,
            "# spec.replicas = {r}: run {r} strait process{} with this file (Helm: replicas); \
             they share mirror.group_id and split the partitions between them.",
            if r == 1 { "" } else { "es" }
        );
    }
    if !ctx.secret_files.is_empty() {
        let _ = writeln!(
            head,
            "#\n# Certificates are read from Secrets mounted where the Helm chart mounts them \
             (secrets.<side> in its values):\n\
             # {TLS_DIR}/<source|target or cluster>/ca/<key> (cluster CA), .../user/<key> (client \
             certificate), .../oauth/<key> (OAuth access token), .../oauth-ca/<key> (token \
             endpoint CA):"
        );
        for f in &ctx.secret_files {
            let _ = writeln!(
                head,
                "#   {}  (Secret {}, key {})",
                f.path(),
                f.secret,
                f.key
            );
        }
    }
    if !ctx.secret_env.is_empty() {
        let _ = writeln!(
            head,
            "#\n# Passwords are not in this file; strait reads them from the environment:"
        );
        for e in &ctx.secret_env {
            let _ = writeln!(
                head,
                "#   {} = key {} of Secret {} (the Helm chart sets it)",
                e.var, e.key, e.secret
            );
        }
    }
    if !ctx.unmapped.is_empty() {
        let _ = writeln!(head, "#\n# Not converted ({}):", ctx.unmapped.len());
        for u in &ctx.unmapped {
            let _ = writeln!(head, "#   {}: {}", u.field, u.why);
        }
    }
    if !ctx.notes.is_empty() {
        let _ = writeln!(head, "#\n# Notes:");
        for n in &ctx.notes {
            let _ = writeln!(head, "#   {n}");
        }
    }
    head.push('\n');
    head
}

/// Secrets stand for themselves in the file: a property resolved from a `${env:...}` reference
/// is written as the reference, and one a `STRAIT_SOURCE_*`/`STRAIT_TARGET_*` variable sets
/// (its value a placeholder here) is left out.
fn hide_secrets(config: &mut Config, placeholders: &[(String, String)]) {
    for cluster in [&mut config.source, &mut config.target] {
        for (key, written) in &cluster.references {
            if let Some(slot) = cluster.properties.iter_mut().find(|(k, _)| k == key) {
                slot.1 = written.clone();
            }
        }
    }
    for (var, _) in placeholders {
        let (cluster, rest) = match (
            var.strip_prefix("STRAIT_SOURCE_"),
            var.strip_prefix("STRAIT_TARGET_"),
        ) {
            (Some(rest), _) => (&mut config.source, rest),
            (_, Some(rest)) => (&mut config.target, rest),
            _ => continue,
        };
        let property = rest.to_ascii_lowercase().replace('_', ".");
        cluster.properties.retain(|(k, _)| *k != property);
    }
}

/// The chart renders one flow ([source]/[target]); for several it says what to do instead.
fn flows_helm_values(kind: &str, name: &str, flows: usize) -> String {
    format!(
        "# Values for the Strait Helm chart (deploy/helm/strait), converted by `strait import \
         strimzi` from {kind} {name}.\n\
         # The resource has {flows} mirrors, converted into one strait.toml with [clusters.*] and \
         [[flows]]; the chart\n\
         # renders the single-flow form ([source]/[target]) only. Run the strait.toml as it is \
         (its secrets come from\n\
         # the STRAIT_CLUSTER_* variables and Secret mounts its comment block lists), or \
         convert each mirror for the chart\n\
         # with `--mirror <source alias>` and install one release per mirror.\n"
    )
}

/// Values for the Helm chart in deploy/helm/strait: `replicas`, `config` (the configuration as
/// YAML, without what the chart sets itself: `metrics.listen` and the `ssl.*.location` of the
/// Secrets it mounts), `secrets` (the cluster CA, client certificate and SASL password Secrets
/// per side) and `resources`.
fn helm_values(kind: &str, name: &str, config: &Config, ctx: &Ctx) -> String {
    let s = |v: &str| Value::String(v.to_string());
    let mut values = Mapping::new();
    if let Some(r) = ctx.replicas {
        values.insert(s("replicas"), Value::Number(r.into()));
    }
    let mut table: toml::Table = config.to_toml(false).parse().unwrap_or_default();
    if let Some(toml::Value::Table(m)) = table.get_mut("metrics") {
        m.remove("listen");
    }
    let mut secrets = Mapping::new();
    for side in ["source", "target"] {
        let mut mine = Mapping::new();
        let files: Vec<&SecretFile> = ctx.secret_files.iter().filter(|f| f.side == side).collect();
        let cluster = match table.get_mut(side) {
            Some(toml::Value::Table(t)) => Some(t),
            _ => None,
        };
        let mut remove = Vec::new();
        if let Some(ca) = files.iter().find(|f| f.role == "ca") {
            let mut m = Mapping::new();
            m.insert(s("name"), s(&ca.secret));
            m.insert(s("key"), s(&ca.key));
            mine.insert(s("clusterCaCert"), Value::Mapping(m));
            remove.push("ssl.ca.location");
        }
        let user: Vec<&&SecretFile> = files.iter().filter(|f| f.role == "user").collect();
        if let [cert, key] = user.as_slice() {
            let mut m = Mapping::new();
            m.insert(s("name"), s(&cert.secret));
            m.insert(s("certKey"), s(&cert.key));
            m.insert(s("keyKey"), s(&key.key));
            mine.insert(s("userCert"), Value::Mapping(m));
            remove.extend(["ssl.certificate.location", "ssl.key.location"]);
        }
        if let Some(e) = ctx
            .secret_env
            .iter()
            .find(|e| e.var == format!("STRAIT_{}_SASL_PASSWORD", side.to_ascii_uppercase()))
        {
            let mut m = Mapping::new();
            m.insert(s("name"), s(&e.secret));
            m.insert(s("key"), s(&e.key));
            mine.insert(s("saslPassword"), Value::Mapping(m));
        }
        if let Some(t) = cluster {
            for k in remove {
                t.remove(k);
            }
        }
        if !mine.is_empty() {
            secrets.insert(s(side), Value::Mapping(mine));
        }
    }
    values.insert(
        s("config"),
        yaml_serde::to_value(&table).unwrap_or(Value::Null),
    );
    values.insert(s("secrets"), Value::Mapping(secrets));
    // Other Secret values (an OAuth client secret): container variables from the Secret.
    let extra: Vec<Value> = ctx
        .secret_env
        .iter()
        .filter(|e| !e.var.ends_with("_SASL_PASSWORD"))
        .map(|e| {
            let mut key_ref = Mapping::new();
            key_ref.insert(s("name"), s(&e.secret));
            key_ref.insert(s("key"), s(&e.key));
            let mut from = Mapping::new();
            from.insert(s("secretKeyRef"), Value::Mapping(key_ref));
            let mut var = Mapping::new();
            var.insert(s("name"), s(&e.var));
            var.insert(s("valueFrom"), Value::Mapping(from));
            Value::Mapping(var)
        })
        .collect();
    if !extra.is_empty() {
        values.insert(s("extraEnv"), Value::Sequence(extra));
    }
    if let Some(r) = &ctx.resources {
        values.insert(s("resources"), r.clone());
    }
    let body = yaml_serde::to_string(&values).unwrap_or_default();
    let mut head = format!(
        "# Values for the Strait Helm chart (deploy/helm/strait), converted by `strait import \
         strimzi` from {kind} {name}.\n\
         # replicas: spec.replicas. config: the strait.toml as YAML (the chart adds metrics.listen \
         and the\n\
         # certificate paths of the Secrets under `secrets`, which it mounts). resources: spec.resources.\n"
    );
    if !ctx.unmapped.is_empty() {
        let _ = writeln!(
            head,
            "# Not converted ({}): see the strait.toml's comment block or the import's warnings.",
            ctx.unmapped.len()
        );
    }
    head + &body
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn convert_text(text: &str) -> Result<Converted, Error> {
        convert(text, Path::new("mm.yaml"), &Options::default())
    }

    #[test]
    fn globs() {
        assert!(glob_matches("*.crt", "ca.crt"));
        assert!(glob_matches("ca.???", "ca.crt"));
        assert!(!glob_matches("*.p12", "ca.crt"));
    }

    #[test]
    fn ports_are_rewritten_only_when_explicit() {
        assert_eq!(
            with_port("http://otel:4317", 4317, 4318),
            ("http://otel:4318".to_string(), true)
        );
        assert_eq!(
            with_port("http://otel:4317/v1", 4317, 4318),
            ("http://otel:4318/v1".to_string(), true)
        );
        assert_eq!(
            with_port("http://otel:4318", 4317, 4318),
            ("http://otel:4318".to_string(), false)
        );
    }

    #[test]
    fn the_locator_follows_paths_through_lists() {
        let text = "apiVersion: x\nkind: K\n---\nkind: KafkaMirrorMaker2\nspec:\n  mirrors:\n  - sourceCluster: a\n    topicsPattern: x\n  - sourceCluster: b\n    sourceConnector:\n      config:\n        replication.factor: 1\n";
        let l = Locator::new(text, 1);
        let k = |s: &str| Seg::Key(s.into());
        assert_eq!(l.line(&[k("spec"), k("mirrors"), Seg::Item(1)]), 9);
        assert_eq!(
            l.line(&[
                k("spec"),
                k("mirrors"),
                Seg::Item(1),
                k("sourceConnector"),
                k("config"),
                k("replication.factor")
            ]),
            12
        );
        assert_eq!(
            l.line(&[k("spec"), k("mirrors"), Seg::Item(0), k("topicsPattern")]),
            8
        );
    }

    const MM1: &str = r#"
apiVersion: kafka.strimzi.io/v1beta2
kind: KafkaMirrorMaker
metadata:
  name: mm
spec:
  replicas: 2
  consumer:
    bootstrapServers: a:9093
    groupId: g
    numStreams: 2
    tls:
      trustedCertificates:
        - secretName: a-ca
          certificate: ca.crt
        - secretName: other-ca
          certificate: ca.crt
    authentication:
      type: scram-sha-512
      username: mm-user
      passwordSecret:
        secretName: mm-user
        password: password
    config:
      auto.offset.reset: earliest
      max.poll.records: 100
  producer:
    bootstrapServers: b:9092
    config:
      compression.type: zstd
  include: "orders, payments.*"
"#;

    #[test]
    fn mm1_maps_clusters_secrets_and_lists_the_rest() {
        let c = convert_text(MM1).unwrap();
        let cfg = &c.config;
        assert_eq!(cfg.source.property("security.protocol"), Some("SASL_SSL"));
        assert_eq!(cfg.source.property("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(
            cfg.source.property("ssl.ca.location"),
            Some("/etc/strait/tls/source/ca/ca.crt")
        );
        // The placeholder password never reaches the file.
        assert!(!c.toml.contains("sasl.password"), "{}", c.toml);
        assert!(
            c.toml
                .contains("STRAIT_SOURCE_SASL_PASSWORD = key password of Secret mm-user")
        );
        assert_eq!(cfg.mirror.group_id, "g");
        assert_eq!(cfg.mirror.topics.include(), ["orders|payments.*"]);
        assert_eq!(cfg.target.property("security.protocol"), None);
        assert_eq!(c.replicas, Some(2));
        let fields: Vec<&str> = c.unmapped.iter().map(|u| u.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.consumer.numStreams",
                "spec.consumer.tls.trustedCertificates[1]"
            ],
            "{:#?}",
            c.unmapped
        );
        let notes = c.notes.join("\n");
        assert!(notes.contains("max.poll.records"), "{notes}");
        assert!(c.helm_values.contains("saslPassword"), "{}", c.helm_values);
        assert!(c.helm_values.contains("replicas: 2"), "{}", c.helm_values);
    }

    #[test]
    fn unknown_fields_are_listed_never_dropped() {
        let text = MM1.replace("  replicas: 2\n", "  replicas: 2\n  newField: {a: 1}\n");
        let c = convert_text(&text).unwrap();
        assert!(
            c.unmapped.iter().any(|u| u.field == "spec.newField"),
            "{:#?}",
            c.unmapped
        );
        assert!(c.toml.contains("#   spec.newField: "), "{}", c.toml);
    }

    #[test]
    fn errors_name_the_field() {
        let text = MM1.replace("    bootstrapServers: a:9093\n", "");
        let err = convert_text(&text).unwrap_err().to_string();
        assert!(
            err.starts_with("spec.consumer.bootstrapServers: missing;"),
            "{err}"
        );

        let text = MM1.replace("compression.type: zstd", "compression.type: brotli");
        let err = convert_text(&text).unwrap_err().to_string();
        assert!(
            err.contains("mirror.compression (from producer.config mm.yaml#spec.producer:30 compression.type)"),
            "{err}"
        );

        let err = convert_text("kind: Kafka\napiVersion: kafka.strimzi.io/v1beta2\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "no KafkaMirrorMaker or KafkaMirrorMaker2 resource found (kinds in the file: Kafka)"
            ),
            "{err}"
        );

        let err = convert_text(&MM1.replace("v1beta2", "v1alpha1"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("apiVersion \"kafka.strimzi.io/v1alpha1\" is not supported"),
            "{err}"
        );

        let flat = "apiVersion: kafka.strimzi.io/v1beta1\nkind: KafkaMirrorMaker\nmetadata:\nname: m\nspec:\nreplicas: 1\n";
        let err = convert_text(flat).unwrap_err().to_string();
        assert!(err.contains("lost its indentation"), "{err}");
    }
}
