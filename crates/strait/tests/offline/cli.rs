//! Runs the built `strait` binary: version, help, exit codes and messages of the offline
//! commands (`check`, `mirror-maker --check`, `mm2 --check`).

#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::process::Output;

use common::StraitCommand;

fn strait(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = StraitCommand::new(args);
    cmd.command()
        // A clean environment: no STRAIT_*, RUST_LOG or OTEL_* from the developer's shell.
        .env_clear()
        .envs(env.iter().copied());
    cmd.output()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

const VALID: &str = r#"
[source]
alias = "europe"
"bootstrap.servers" = "europe:9092"

[target]
alias = "us"
"bootstrap.servers" = "us:9093"
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "my-us-user"
"sasl.password" = "hunter2"

[mirror]
topics = ["orders.*"]
group_id = "my-group"
"#;

#[test]
fn version_names_the_commit_and_the_build_date() {
    let o = strait(&["--version"], &[]);
    assert!(o.status.success());
    let out = stdout(&o);
    let rest = out
        .trim()
        .strip_prefix(&format!("strait {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{out}"));
    let (commit, date) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", built "))
        .unwrap_or_else(|| panic!("{out}"));
    // This test runs from a git checkout: the commit is a hash, not the fallback.
    assert!(
        commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{out}"
    );
    let d: Vec<&str> = date.split('-').collect();
    assert!(
        d.len() == 3 && d[0].len() == 4 && d.iter().all(|p| p.parse::<u32>().is_ok()),
        "{out}"
    );
}

#[test]
fn help_lists_every_exit_code_the_binary_uses() {
    let o = strait(&["--help"], &[]);
    let out = stdout(&o);
    for (code, meaning) in strait::exit::TABLE {
        assert!(
            out.contains(&format!("{code:>3}  {meaning}")),
            "{code} missing from:\n{out}"
        );
    }
    for code in [3, 4, 5, 130, 143] {
        assert!(
            strait::exit::TABLE.iter().any(|(c, _)| *c == code),
            "exit code {code} is not documented"
        );
    }
}

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = strait(&["completions", shell], &[]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let out = stdout(&o);
        // Every subcommand is completed.
        for sub in ["run", "check", "mirror-maker", "status", "failover"] {
            assert!(out.contains(sub), "{shell}: {sub} missing");
        }
    }
    assert_eq!(strait(&["completions", "tcsh"], &[]).status.code(), Some(2));
    let o = strait(&["man"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(".TH strait 1"), "{out}");
    assert!(out.contains("mirror\\-maker"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let o = strait(&["man", "--dir", dir.path().to_str().unwrap()], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    for page in ["strait.1", "strait-check.1", "strait-status.1"] {
        assert!(dir.path().join(page).exists(), "{page} not written");
    }
}

#[test]
fn check_exits_4_when_a_cluster_cannot_be_reached() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "strait.toml",
        &VALID
            .replace("europe:9092", &format!("127.0.0.1:{port}"))
            .replace("\"security.protocol\" = \"SASL_SSL\"\n", "")
            .replace("\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n", "")
            .replace("\"sasl.username\" = \"my-us-user\"\n", "")
            .replace("\"sasl.password\" = \"hunter2\"\n", ""),
    );
    let o = strait(&["check", "--config", &path], &[]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("source cluster europe: cannot connect"),
        "{}",
        stderr(&o)
    );
    let o = strait(&["check", "--config", &path, "--output", "json"], &[]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["status"], "unreachable", "{doc}");
    assert_eq!(doc["exit_code"], 4);
    assert_eq!(doc["flows"][0]["source"], "europe");
    assert!(
        doc["flows"][0]["error"]
            .as_str()
            .unwrap()
            .contains("cannot connect"),
        "{doc}"
    );
}

#[test]
fn check_offline_json_is_the_effective_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "strait.toml", VALID);
    let o = strait(
        &["check", "--offline", "--output", "json", "--config", &path],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(doc["status"], "ok");
    let config = &doc["flows"][0]["config"];
    assert_eq!(config["mirror"]["group_id"], "my-group");
    assert_eq!(config["target"]["sasl.password"], "<redacted>");
    assert!(!stdout(&o).contains("hunter2"));
}

#[test]
fn help_lists_commands_and_examples() {
    let o = strait(&["--help"], &[]);
    assert!(o.status.success());
    let out = stdout(&o);
    for s in [
        "run",
        "check",
        "mirror-maker",
        "mm2",
        "Examples:",
        "strait run --config",
        "Exit status",
    ] {
        assert!(out.contains(s), "{s} missing from:\n{out}");
    }
    let o = strait(&["mirror-maker", "--help"], &[]);
    assert!(o.status.success());
    let out = stdout(&o);
    for s in [
        "--consumer.config",
        "--producer.config",
        "--include",
        "--whitelist",
        "--num.streams",
    ] {
        assert!(out.contains(s), "{s} missing from:\n{out}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let o = strait(&["frobnicate"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = strait(&["mirror-maker", "--include", "x"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--consumer.config"), "{}", stderr(&o));
}

#[test]
fn check_prints_the_effective_config_with_secrets_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "strait.toml", VALID);
    let o = strait(&["check", "--offline", "--config", &path], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("\"sasl.password\" = \"<redacted>\""), "{out}");
    assert!(!out.contains("hunter2"), "{out}");
    assert!(out.contains("group_id = \"my-group\""), "{out}");
    assert!(out.contains("start = \"earliest\""), "{out}");
    // The printed form is itself a valid configuration.
    let again = write(dir.path(), "again.toml", &out.replace("<redacted>", "x"));
    let o = strait(&["check", "--offline", "--config", &again], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn check_with_a_bad_value_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "bad.toml",
        &format!("{VALID}start = \"begin\"\n"),
    );
    let o = strait(&["check", "--offline", "--config", &path], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).trim(),
        "error: mirror.start: expected \"earliest\" or \"latest\", got \"begin\""
    );
    assert!(stdout(&o).is_empty());

    let path = write(
        dir.path(),
        "typo.toml",
        &format!("{VALID}grup_id = \"x\"\n"),
    );
    let o = strait(&["check", "--offline", "--config", &path], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("mirror.grup_id: unknown key; did you mean \"group_id\"?"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn environment_overrides_and_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "strait.toml", VALID);
    let o = strait(
        &["check", "--offline", "--config", &path],
        &[
            ("STRAIT_MIRROR_GROUP_ID", "from-env"),
            ("STRAIT_SOURCE_CLIENT_ID", "eu"),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("group_id = \"from-env\""));
    assert!(stdout(&o).contains("\"client.id\" = \"eu\""));

    let o = strait(
        &["check", "--offline", "--config", &path],
        &[("STRAIT_MIRROR_START", "begin")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("mirror.start (from STRAIT_MIRROR_START)"),
        "{}",
        stderr(&o)
    );

    // STRAIT_CONFIG names the file, as --config does.
    let o = strait(&["check", "--offline"], &[("STRAIT_CONFIG", &path)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn missing_files_exit_2() {
    let o = strait(
        &["check", "--offline", "--config", "/nonexistent/strait.toml"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot read /nonexistent/strait.toml"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn mm2_check_lists_ignored_settings_in_one_warning() {
    let reference = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mm2.properties");
    let o = strait(&["mm2", reference, "--check"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("warning: ") && l.contains(" settings strait does not use"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    for k in [
        "tasks.max",
        "emit.heartbeats.enabled",
        "checkpoints.topic.replication.factor",
    ] {
        assert!(warnings[0].contains(k), "{k} missing: {err}");
    }
    // Mapped, not ignored; but without `groups` it would sync nothing, and Strait says so.
    assert!(!warnings[0].contains("sync.group.offsets.enabled"), "{err}");
    assert!(
        err.lines().any(|l| l.starts_with("warning: ")
            && l.contains("sync.group.offsets.enabled = true syncs nothing without `groups`")),
        "{err}"
    );
    let out = stdout(&o);
    assert!(
        out.contains("alias = \"A\"") && out.contains("alias = \"B\""),
        "{out}"
    );
    assert!(out.contains("rename = \"identity\""), "{out}");
    assert!(out.contains("topics = [\"perf.*\"]"), "{out}");
}

#[test]
fn mm2_with_two_flows_runs_both_or_the_one_clusters_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "mm2.properties",
        "clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\nB->A.enabled = true\n",
    );
    // Both flows in one process (docs/flows.md), each printed with its own group.
    let o = strait(&["mm2", &path, "--check"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("# flow A->B") && out.contains("# flow B->A"),
        "{out}"
    );
    assert!(
        out.contains("group_id = \"strait-A-B\"") && out.contains("group_id = \"strait-B-A\""),
        "{out}"
    );
    let o = strait(&["mm2", &path, "--clusters", "A", "--check"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"bootstrap.servers\" = \"b:1\""));
}

#[test]
fn mirror_maker_check_and_unsupported_options() {
    let dir = tempfile::tempdir().unwrap();
    let c = write(
        dir.path(),
        "c.properties",
        "bootstrap.servers=a:9092\ngroup.id=mm1\nenable.auto.commit=false\n",
    );
    let p = write(
        dir.path(),
        "p.properties",
        "bootstrap.servers=b:9092\nlinger.ms=5\n",
    );
    let base = [
        "mirror-maker",
        "--consumer.config",
        &c,
        "--producer.config",
        &p,
        "--include",
        "perf.*",
    ];
    let mut args = base.to_vec();
    args.push("--check");
    let o = strait(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("ignoring 1 setting strait does not use: enable.auto.commit"),
        "{err}"
    );
    assert!(
        err.contains("ignoring 1 setting strait does not use: linger.ms"),
        "{err}"
    );
    assert!(stdout(&o).contains("start = \"latest\""));

    let mut args = base.to_vec();
    args.extend(["--message.handler", "com.example.Handler", "--check"]);
    let o = strait(&args, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: not supported: --message.handler com.example.Handler"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_fails_with_1_when_the_metrics_port_is_taken() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "strait.toml", VALID);
    let o = strait(
        &["run", "--config", &path],
        &[("STRAIT_METRICS_LISTEN", &addr)],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("metrics.listen: cannot listen on {addr}")),
        "{}",
        stderr(&o)
    );
}
