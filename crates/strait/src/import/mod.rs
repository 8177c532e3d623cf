//! `strait import`: converts another tool's deployment description into a strait.toml (and
//! values for the Helm chart in `deploy/helm/strait`).
//!
//! The conversion goes through the same MirrorMaker mappings as `strait mirror-maker` and
//! `strait mm2` (`import::mirrormaker`), and the result is loaded back with Strait's own
//! configuration loader before anything is written, so what is printed is a file `strait run`
//! accepts. Everything that cannot be converted is listed, on stderr and in a comment block at
//! the top of the output: nothing is dropped silently.

pub(crate) mod mirrormaker;
pub mod strimzi;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};

/// `strait import` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum ImportCommand {
    /// Convert a Strimzi `KafkaMirrorMaker` (kafka.strimzi.io/v1beta1, v1beta2) or
    /// `KafkaMirrorMaker2` (v1beta2, v1) custom resource into a strait.toml.
    #[command(
        after_help = "Example:\n  strait import strimzi my-mirror-maker.yaml --output strait.toml --helm-values values.yaml"
    )]
    Strimzi(StrimziArgs),
}

/// `import strimzi` arguments.
#[derive(Debug, Clone, Args)]
pub struct StrimziArgs {
    /// The YAML file holding the custom resource (other documents in the file are skipped).
    #[arg(value_name = "FILE.yaml")]
    pub file: PathBuf,
    /// Write the strait.toml to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also write values for the Strait Helm chart (replicas, the configuration, the Secrets to
    /// mount and the environment taken from Secrets).
    #[arg(long, value_name = "FILE")]
    pub helm_values: Option<PathBuf>,
    /// The `metadata.name` of the resource to convert when the file holds several.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// For a `KafkaMirrorMaker2` with several mirrors: the source cluster alias of the one mirror
    /// to convert (the single-flow form the Helm chart takes). Default: every mirror, as
    /// `[clusters.*]` + `[[flows]]`.
    #[arg(long, value_name = "SOURCE_ALIAS")]
    pub mirror: Option<String>,
}

/// What can stop an import. Each message says what is wrong and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The input file could not be read.
    #[error("cannot read {}: {source}; check the path and its permissions", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The input is not YAML.
    #[error(
        "{}: not valid YAML: {message}; fix the syntax (`kubectl apply --dry-run=client -f FILE` reports the same)",
        path.display()
    )]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// No resource of a kind this command converts.
    #[error(
        "{}: no KafkaMirrorMaker or KafkaMirrorMaker2 resource found (kinds in the file: {found}); \
         pass the file that holds the mirror's custom resource (`kubectl get kafkamirrormaker NAME -o yaml`)",
        path.display()
    )]
    NoResource {
        /// The file.
        path: PathBuf,
        /// The kinds that were found, comma-separated, or "none".
        found: String,
    },
    /// Several mirror resources and no `--name`, or `--name` matches none.
    #[error("{}: {problem}; pick one with --name (mirror resources in the file: {names})", path.display())]
    Choose {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        problem: String,
        /// The `kind/name` of each mirror resource.
        names: String,
    },
    /// An `apiVersion` this command does not know.
    #[error(
        "{kind} {name}: apiVersion {got:?} is not supported; expected {expected} (convert the \
         resource with Strimzi's conversion tool first if it is older)"
    )]
    ApiVersion {
        /// The resource kind.
        kind: String,
        /// metadata.name.
        name: String,
        /// The apiVersion given.
        got: String,
        /// The versions accepted for this kind.
        expected: String,
    },
    /// A field that must be there is missing.
    #[error("{field}: missing; {hint}")]
    Missing {
        /// The field path, e.g. `spec.consumer.bootstrapServers`.
        field: String,
        /// What to put there.
        hint: String,
    },
    /// A field has the wrong form.
    #[error("{field}: expected {expected}, got {got}")]
    Invalid {
        /// The field path.
        field: String,
        /// The accepted form.
        expected: String,
        /// What was found.
        got: String,
    },
    /// The converted settings were rejected by Strait's configuration loader. The message names
    /// the Strait key and, in parentheses, the Strimzi field it came from.
    #[error(
        "the converted configuration is not valid: {0}; correct that field of the resource and run the import again"
    )]
    Config(#[source] crate::Error),
    /// An output file could not be written.
    #[error("cannot write {}: {source}; check the directory exists and is writable", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Runs `strait import ...`: writes the outputs, prints the warnings on stderr, and returns the
/// exit status (0, or 2 for an input the command cannot convert).
pub fn run(command: &ImportCommand) -> ExitCode {
    let ImportCommand::Strimzi(args) = command;
    match run_strimzi(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_strimzi(args: &StrimziArgs) -> Result<(), Error> {
    let text = std::fs::read_to_string(&args.file).map_err(|source| Error::Read {
        path: args.file.clone(),
        source,
    })?;
    let options = strimzi::Options {
        name: args.name.clone(),
        mirror: args.mirror.clone(),
    };
    let converted = strimzi::convert(&text, &args.file, &options)?;
    for line in converted.warning_lines() {
        eprintln!("warning: {line}");
    }
    match &args.output {
        Some(path) => write_file(path, &converted.toml)?,
        None => {
            let mut out = std::io::stdout().lock();
            // A closed stdout (`| head`) is not worth an error of its own.
            let _ = out.write_all(converted.toml.as_bytes());
        }
    }
    if let Some(path) = &args.helm_values {
        write_file(path, &converted.helm_values)?;
    }
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}
