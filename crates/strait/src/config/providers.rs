//! Secrets by reference: Kafka's config providers (KIP-297, KIP-421).
//!
//! A client property value may hold references that are replaced when the configuration is
//! loaded (and loaded again on a reload), so that the file itself holds no secret:
//!
//! | reference | provider (Kafka class) | value |
//! |---|---|---|
//! | `${file:/path:key}` | `file` (`FileConfigProvider`) | `key` of the Java properties file `/path` |
//! | `${directory:/dir:name}` | `directory` (`DirectoryConfigProvider`) | the content of `/dir/name`, as it is (a trailing newline stays) |
//! | `${env:VAR}` | `env` (`EnvVarConfigProvider`) | the environment variable `VAR` |
//!
//! References may sit inside a longer value (`sasl.jaas.config = "... password=\"${file:/s:pw}\";"`).
//! MirrorMaker files must declare the providers they use, as Kafka requires
//! (`config.providers=file` and `config.providers.file.class=...FileConfigProvider`); strait.toml
//! always has the three built-in ones under these names. Kafka's own restrictions are honoured:
//! `config.providers.<name>.param.allowed.paths` (file, directory) and
//! `config.providers.<name>.param.allowlist.pattern` (env).
//!
//! Unlike Kafka, which leaves a reference it cannot resolve in place (and then fails later with a
//! confusing authentication error), every unresolvable reference is an error. Errors name the
//! reference and the provider, never a resolved value.

use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use super::Environment;
use crate::config::properties::Properties;
pub use crate::error::{DeclarationError, ReferenceError};

/// Kafka's variable pattern (`ConfigTransformer.DEFAULT_PATTERN`): `${provider:[path:]key}`.
static REFERENCE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\$\{(.*?):((.*?):)?(.*?)\}").ok());

/// The built-in providers: name, Kafka class, kind.
const BUILT_IN: [(&str, &str, Kind); 3] = [
    (
        "file",
        "org.apache.kafka.common.config.provider.FileConfigProvider",
        Kind::File,
    ),
    (
        "directory",
        "org.apache.kafka.common.config.provider.DirectoryConfigProvider",
        Kind::Directory,
    ),
    (
        "env",
        "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        Kind::Env,
    ),
];

/// What a provider reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Directory,
    Env,
}

/// One declared provider.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Provider {
    name: String,
    kind: Kind,
    /// `param.allowed.paths` (file, directory): references must point under one of these.
    allowed_paths: Option<Vec<PathBuf>>,
    /// `param.allowlist.pattern` (env): variables whose names do not match are not readable.
    allowlist: Option<String>,
}

/// The providers a configuration source may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Providers {
    declared: Vec<Provider>,
    /// How to declare a provider, for the "not declared" error.
    how_to_declare: &'static str,
}

impl Default for Providers {
    /// strait.toml's: the three built-in providers, always available.
    fn default() -> Providers {
        Providers {
            declared: BUILT_IN
                .iter()
                .map(|(name, _, kind)| Provider {
                    name: name.to_string(),
                    kind: *kind,
                    allowed_paths: None,
                    allowlist: None,
                })
                .collect(),
            how_to_declare: "strait.toml knows the providers file, directory and env",
        }
    }
}

/// The built-in classes as the errors list them ([`crate::error::BUILT_IN_CLASSES`]).
#[cfg(test)]
fn built_in_classes() -> String {
    BUILT_IN
        .iter()
        .map(|(_, class, _)| *class)
        .collect::<Vec<_>>()
        .join(", ")
}

/// True for `config.providers` and its `config.providers.<name>.*` keys.
pub(crate) fn is_declaration_key(key: &str) -> bool {
    key == "config.providers" || key.starts_with("config.providers.")
}

impl Providers {
    /// The providers a Java properties file declares (`config.providers` and
    /// `config.providers.<name>.class` / `.param.*`), as Kafka reads them: none without
    /// `config.providers`.
    pub(crate) fn declared_in(props: &Properties) -> Result<Providers, DeclarationError> {
        let mut declared = Vec::new();
        let names = props
            .get("config.providers")
            .map(|p| p.value.as_str())
            .unwrap_or("");
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let prefix = format!("config.providers.{name}.");
            let class = props
                .get(&format!("{prefix}class"))
                .map(|p| p.value.trim().to_string())
                .ok_or_else(|| DeclarationError::MissingClass { name: name.into() })?;
            let kind = BUILT_IN
                .iter()
                .find(|(_, c, _)| *c == class)
                .map(|(_, _, k)| *k)
                .ok_or_else(|| DeclarationError::UnknownClass {
                    name: name.into(),
                    class: class.clone(),
                })?;
            let mut provider = Provider {
                name: name.to_string(),
                kind,
                allowed_paths: None,
                allowlist: None,
            };
            let params = props.entries.iter().filter_map(|p| {
                p.key
                    .strip_prefix(&format!("{prefix}param."))
                    .map(|k| (k, p.value.trim()))
            });
            for (param, value) in params {
                match (kind, param) {
                    (Kind::File | Kind::Directory, "allowed.paths") => {
                        provider.allowed_paths = Some(
                            value
                                .split(',')
                                .map(str::trim)
                                .filter(|p| !p.is_empty())
                                .map(|p| normalise(Path::new(p)))
                                .collect(),
                        );
                    }
                    (Kind::Env, "allowlist.pattern") => {
                        Regex::new(&format!("^(?:{value})$")).map_err(|e| {
                            DeclarationError::BadPattern {
                                name: name.into(),
                                why: e.to_string(),
                            }
                        })?;
                        provider.allowlist = Some(value.to_string());
                    }
                    _ => {
                        return Err(DeclarationError::UnknownParam {
                            name: name.into(),
                            param: param.into(),
                        });
                    }
                }
            }
            declared.push(provider);
        }
        Ok(Providers {
            declared,
            how_to_declare: "declare it as Kafka requires, e.g. config.providers=file and \
                             config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider",
        })
    }

    /// `value` with every reference replaced; `None` when it holds no reference.
    pub(crate) fn resolve(
        &self,
        value: &str,
        env: &Environment,
    ) -> Result<Option<String>, ReferenceError> {
        let Some(re) = REFERENCE.as_ref() else {
            return Ok(None);
        };
        if !re.is_match(value) {
            return Ok(None);
        }
        let mut out = String::with_capacity(value.len());
        let mut last = 0;
        for caps in re.captures_iter(value) {
            let (Some(whole), Some(provider), Some(key)) = (caps.get(0), caps.get(1), caps.get(4))
            else {
                continue;
            };
            let path = caps.get(3).map_or("", |m| m.as_str());
            let reference = whole.as_str();
            out.push_str(&value[last..whole.start()]);
            out.push_str(&self.lookup(reference, provider.as_str(), path, key.as_str(), env)?);
            last = whole.end();
        }
        out.push_str(&value[last..]);
        Ok(Some(out))
    }

    fn lookup(
        &self,
        reference: &str,
        name: &str,
        path: &str,
        key: &str,
        env: &Environment,
    ) -> Result<String, ReferenceError> {
        let provider = self
            .declared
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ReferenceError::Undeclared {
                reference: reference.into(),
                provider: name.into(),
                how: self.how_to_declare,
            })?;
        let malformed = |why: &str| ReferenceError::Malformed {
            reference: reference.into(),
            why: why.into(),
        };
        match provider.kind {
            Kind::Env => {
                if !path.is_empty() {
                    return Err(malformed(
                        "the env provider takes no path; write ${env:VARIABLE}",
                    ));
                }
                let env_error = |why: String| ReferenceError::Env {
                    reference: reference.into(),
                    provider: name.into(),
                    why,
                };
                if let Some(pattern) = &provider.allowlist {
                    let allowed =
                        Regex::new(&format!("^(?:{pattern})$")).is_ok_and(|re| re.is_match(key));
                    if !allowed {
                        return Err(env_error(format!(
                            "variable {key} does not match config.providers.{name}.param.allowlist.pattern"
                        )));
                    }
                }
                env.get(key)
                    .map(str::to_string)
                    .ok_or_else(|| env_error(format!("environment variable {key} is not set")))
            }
            Kind::File => {
                if path.is_empty() {
                    return Err(malformed(
                        "the file provider needs a path and a key: ${file:/path/to/file.properties:key}",
                    ));
                }
                let path = provider.allowed(reference, Path::new(path))?;
                let text = read(reference, name, &path)?;
                let props =
                    Properties::parse(&text, &path).map_err(|_| ReferenceError::NotFound {
                        reference: reference.into(),
                        provider: name.into(),
                        path: path.clone(),
                        what: "is not a Java properties file".into(),
                    })?;
                props
                    .get(key)
                    .map(|p| p.value.clone())
                    .ok_or_else(|| ReferenceError::NotFound {
                        reference: reference.into(),
                        provider: name.into(),
                        path,
                        what: format!("has no key {key}"),
                    })
            }
            Kind::Directory => {
                if path.is_empty() || key.contains(['/', '\\']) || key == ".." || key == "." {
                    return Err(malformed(
                        "the directory provider needs a directory and a file name in it: \
                         ${directory:/path/to/dir:file}",
                    ));
                }
                let dir = provider.allowed(reference, Path::new(path))?;
                // Kafka returns the file's content as it is, trailing newline included.
                read(reference, name, &dir.join(key))
            }
        }
    }
}

impl Provider {
    /// `path`, normalised, when it is under `allowed.paths` (or there is no such limit).
    fn allowed(&self, reference: &str, path: &Path) -> Result<PathBuf, ReferenceError> {
        let normal = normalise(path);
        match &self.allowed_paths {
            Some(allowed) if !allowed.iter().any(|a| normal.starts_with(a)) => {
                Err(ReferenceError::NotAllowed {
                    reference: reference.into(),
                    provider: self.name.clone(),
                    path: normal,
                })
            }
            _ => Ok(normal),
        }
    }
}

fn read(reference: &str, provider: &str, path: &Path) -> Result<String, ReferenceError> {
    std::fs::read_to_string(path).map_err(|source| ReferenceError::Read {
        reference: reference.into(),
        provider: provider.into(),
        path: path.to_path_buf(),
        source,
    })
}

/// Removes `.` and resolves `..` lexically, as Java's `Path.normalize` does for `allowed.paths`.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_errors_name_every_built_in_class() {
        assert_eq!(crate::error::BUILT_IN_CLASSES, built_in_classes());
    }

    fn env() -> Environment {
        Environment::from_pairs([("PW", "env-secret"), ("OTHER", "x")])
    }

    fn declared(text: &str) -> Result<Providers, DeclarationError> {
        Providers::declared_in(&Properties::parse(text, Path::new("mm2.properties")).unwrap())
    }

    const ALL: &str = "config.providers = file, directory, env\n\
        config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider\n\
        config.providers.directory.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider\n\
        config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n";

    #[test]
    fn the_three_providers_resolve_inside_longer_values() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.properties");
        std::fs::write(&file, "password = file-secret\nother=1\n").unwrap();
        std::fs::write(dir.path().join("token"), "dir-secret\n").unwrap();
        let value = format!(
            "a=\"${{file:{}:password}}\" b=\"${{directory:{}:token}}\" c=\"${{env:PW}}\";",
            file.display(),
            dir.path().display()
        );
        for providers in [Providers::default(), declared(ALL).unwrap()] {
            let got = providers.resolve(&value, &env()).unwrap().unwrap();
            // The directory provider keeps the file's trailing newline, as Kafka's does.
            assert_eq!(
                got,
                "a=\"file-secret\" b=\"dir-secret\n\" c=\"env-secret\";"
            );
        }
        assert_eq!(
            Providers::default()
                .resolve("plain $PW {x}", &env())
                .unwrap(),
            None
        );
    }

    #[test]
    fn mirror_maker_files_resolve_only_declared_providers() {
        let only_env = declared(
            "config.providers=env\nconfig.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider\n",
        )
        .unwrap();
        assert_eq!(
            only_env.resolve("${env:PW}", &env()).unwrap().as_deref(),
            Some("env-secret")
        );
        let e = only_env
            .resolve("${file:/etc/x.properties:pw}", &env())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "${file:/etc/x.properties:pw}: config provider \"file\" is not declared; declare it"
            ),
            "{e}"
        );
        // No config.providers at all: nothing is declared.
        let e = declared("")
            .unwrap()
            .resolve("${env:PW}", &env())
            .unwrap_err();
        assert!(e.to_string().contains("not declared"), "{e}");
        // Custom providers and classes are named.
        assert_eq!(
            declared("config.providers=vault\n").unwrap_err(),
            DeclarationError::MissingClass {
                name: "vault".into()
            }
        );
        let e = declared("config.providers=v\nconfig.providers.v.class=com.example.Vault\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("com.example.Vault: not supported"), "{e}");
    }

    #[test]
    fn errors_name_the_reference_never_a_value() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.properties");
        std::fs::write(&file, "password=file-secret\n").unwrap();
        let p = Providers::default();
        let cases = [
            format!("${{file:{}:nope}}", file.display()),
            format!("${{file:{}/missing:pw}}", dir.path().display()),
            format!("${{directory:{}:missing}}", dir.path().display()),
            "${directory:/x:../etc/passwd}".to_string(),
            "${env:UNSET}".to_string(),
            "${env:/p:PW}".to_string(),
            "${file:nopath}".to_string(),
        ];
        for reference in cases {
            let e = p.resolve(&reference, &env()).unwrap_err().to_string();
            assert!(e.starts_with(&reference), "{e}");
            for secret in ["file-secret", "env-secret"] {
                assert!(!e.contains(secret), "{e}");
            }
        }
    }

    /// strait.toml: the built-in providers in client properties, single-flow and flows form;
    /// `strait check` prints the reference.
    #[test]
    fn strait_toml_references_resolve_in_both_forms() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("password"), "dir-secret").unwrap();
        let reference = format!("${{directory:{}:password}}", dir.path().display());
        let cluster = format!(
            "\"bootstrap.servers\" = \"a:9092\"\n\"security.protocol\" = \"SASL_PLAINTEXT\"\n\
             \"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"${{env:OTHER}}\"\n\
             \"sasl.password\" = \"{reference}\"\n"
        );
        let single = format!("[source]\n{cluster}[target]\n\"bootstrap.servers\" = \"b:9092\"\n");
        let flows = format!(
            "[clusters.a]\n{cluster}[clusters.b]\n\"bootstrap.servers\" = \"b:9092\"\n\
             [[flows]]\nsource = \"a\"\ntarget = \"b\"\n"
        );
        for text in [single, flows] {
            let loaded =
                super::super::Config::from_toml_str(&text, Path::new("strait.toml"), &env())
                    .unwrap();
            let c = &loaded.config;
            assert_eq!(c.source.property("sasl.password"), Some("dir-secret"));
            assert_eq!(c.source.property("sasl.username"), Some("x"));
            let shown = c.to_toml(true);
            assert!(shown.contains(&reference), "{shown}");
            assert!(shown.contains("${env:OTHER}"), "{shown}");
            assert!(!shown.contains("dir-secret"), "{shown}");
            let e = super::super::Config::from_toml_str(
                &text,
                Path::new("strait.toml"),
                &Environment::default(),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with("source.sasl.username: ${env:OTHER}: provider \"env\": environment variable OTHER is not set"),
                "{e}"
            );
        }
    }

    #[test]
    fn kafka_restrictions_are_honoured() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s"), "k=v\n").unwrap();
        let p = declared(&format!(
            "{ALL}config.providers.file.param.allowed.paths={}\n\
             config.providers.env.param.allowlist.pattern=P.*\n",
            dir.path().display()
        ))
        .unwrap();
        let inside = format!("${{file:{}/s:k}}", dir.path().display());
        assert_eq!(p.resolve(&inside, &env()).unwrap().as_deref(), Some("v"));
        let escape = format!("${{file:{}/../x:k}}", dir.path().display());
        let e = p.resolve(&escape, &env()).unwrap_err().to_string();
        assert!(
            e.contains("is not under config.providers.file.param.allowed.paths"),
            "{e}"
        );
        assert!(p.resolve("${env:PW}", &env()).is_ok());
        let e = p.resolve("${env:OTHER}", &env()).unwrap_err().to_string();
        assert!(e.contains("does not match"), "{e}");
        let e = declared(&format!("{ALL}config.providers.env.param.x=1\n")).unwrap_err();
        assert!(matches!(e, DeclarationError::UnknownParam { .. }), "{e}");
    }
}
