//! `strait status`: a running instance's readiness and lag, read from its own HTTP endpoints
//! (`/readyz` and `/metrics`, see [`crate::observe::http`]) and printed as a table or JSON.
//!
//! The parsing and rendering are pure ([`Status::parse`], [`Status::table`]); [`fetch`] is the
//! thin HTTP/1.1 client (hyper) around them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::header::{ACCEPT, HOST};
use hyper_util::rt::TokioIo;

/// How long one request may take (connect, answer and body).
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why the instance could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The URL is not `http://host:port[/prefix]`.
    #[error(
        "--url {url}: {why}; give the instance's metrics.listen address, e.g. http://127.0.0.1:9464"
    )]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// Connecting, sending or reading failed.
    #[error(
        "cannot read {url}: {why}; is strait running there, with metrics.listen on that address?"
    )]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What failed.
        why: String,
    },
    /// The endpoint answered something that is not a strait instance's.
    #[error("{url} answered {status}: {why}; is that address a strait instance's metrics.listen?")]
    Unexpected {
        /// The endpoint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What was wrong with the answer.
        why: String,
    },
}

/// One partition's row.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PartitionRow {
    /// The flow (`source->target`) with several flows, else none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<String>,
    /// The source topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Lag in records.
    pub lag_records: Option<i64>,
    /// Lag in seconds.
    pub lag_seconds: Option<f64>,
    /// `ok`, or the readiness state (`stalled`, `stopped`, `blocked`...).
    pub state: String,
    /// Why it is not ready (empty when ok).
    pub reason: String,
}

/// What the instance said.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Status {
    /// The instance's URL.
    pub url: String,
    /// `/readyz` answered 200.
    pub ready: bool,
    /// Why it is not ready (empty when ready).
    pub reason: String,
    /// Partitions this instance mirrors.
    pub assigned_partitions: u64,
    /// `strait_lag_records`, summed over flows.
    pub lag_records: Option<i64>,
    /// `strait_lag_seconds`, the largest over flows.
    pub lag_seconds: Option<f64>,
    /// Every partition with a lag series or a readiness problem.
    pub partitions: Vec<PartitionRow>,
}

/// One sample of the exposition: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// The samples of an OpenMetrics / Prometheus text exposition (comments skipped, label values
/// unescaped for `\"` and `\\`).
fn samples(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let Some(close) = line.rfind('}') else {
                    continue;
                };
                (
                    &line[..open],
                    labels(&line[open + 1..close]),
                    &line[close + 1..],
                )
            }
            None => match line.split_once(' ') {
                Some((n, r)) => (n, BTreeMap::new(), r),
                None => continue,
            },
        };
        let Some(value) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) else {
            continue;
        };
        out.push((name.to_string(), labels, value));
    }
    out
}

fn labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

impl Status {
    /// Builds the status from `/readyz` (its status code and JSON body) and `/metrics`.
    pub fn parse(
        url: &str,
        ready: bool,
        readyz: &str,
        metrics: &str,
    ) -> Result<Status, StatusError> {
        let body: serde_json::Value =
            serde_json::from_str(readyz).map_err(|e| StatusError::Unexpected {
                url: format!("{url}/readyz"),
                status: if ready { 200 } else { 503 },
                why: format!("not the JSON body of strait's /readyz ({e})"),
            })?;
        let mut rows: BTreeMap<(Option<String>, String, i32), PartitionRow> = BTreeMap::new();
        let (mut lag_records, mut lag_seconds) = (None::<i64>, None::<f64>);
        for (name, labels, value) in samples(metrics) {
            let flow = labels.get("flow").cloned();
            match name.as_str() {
                "strait_lag_records" => {
                    lag_records = Some(lag_records.unwrap_or(0) + value as i64);
                }
                "strait_lag_seconds" => {
                    lag_seconds = Some(lag_seconds.unwrap_or(0.0).max(value));
                }
                "strait_partition_lag_records" | "strait_partition_lag_seconds" => {
                    let (Some(topic), Some(partition)) = (
                        labels.get("topic"),
                        labels.get("partition").and_then(|p| p.parse().ok()),
                    ) else {
                        continue;
                    };
                    let row = rows
                        .entry((flow.clone(), topic.clone(), partition))
                        .or_insert_with(|| PartitionRow {
                            flow,
                            topic: topic.clone(),
                            partition,
                            lag_records: None,
                            lag_seconds: None,
                            state: "ok".into(),
                            reason: String::new(),
                        });
                    if name == "strait_partition_lag_records" {
                        row.lag_records = Some(value as i64);
                    } else {
                        row.lag_seconds = Some(value);
                    }
                }
                _ => {}
            }
        }
        for p in body["not_ready_partitions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (Some(topic), Some(partition)) = (
                p["topic"].as_str(),
                p["partition"].as_i64().and_then(|n| i32::try_from(n).ok()),
            ) else {
                continue;
            };
            let flow = p["flow"].as_str().map(str::to_owned);
            let row = rows
                .entry((flow.clone(), topic.to_owned(), partition))
                .or_insert_with(|| PartitionRow {
                    flow,
                    topic: topic.to_owned(),
                    partition,
                    lag_records: p["lag_records"].as_i64(),
                    lag_seconds: None,
                    state: String::new(),
                    reason: String::new(),
                });
            row.state = p["state"].as_str().unwrap_or("not_ready").to_owned();
            row.reason = p["reason"].as_str().unwrap_or_default().to_owned();
        }
        Ok(Status {
            url: url.to_owned(),
            ready,
            reason: body["reason"].as_str().unwrap_or_default().to_owned(),
            assigned_partitions: body["assigned_partitions"].as_u64().unwrap_or(0),
            lag_records,
            lag_seconds,
            partitions: rows.into_values().collect(),
        })
    }

    /// The table `strait status` prints.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let status = if self.ready {
            "ready".to_owned()
        } else {
            format!("NOT READY: {}", self.reason)
        };
        let _ = writeln!(out, "instance   {}", self.url);
        let _ = writeln!(out, "status     {status}");
        let _ = writeln!(out, "partitions {} assigned", self.assigned_partitions);
        let _ = writeln!(
            out,
            "lag        {} records, {} behind (oldest record not yet on the target)",
            self.lag_records
                .map_or_else(|| "?".to_owned(), |r| r.to_string()),
            self.lag_seconds
                .map_or_else(|| "?".to_owned(), |s| format!("{s:.1} s")),
        );
        if self.partitions.is_empty() {
            return out;
        }
        let flows = self.partitions.iter().any(|p| p.flow.is_some());
        let mut table: Vec<Vec<String>> = vec![
            [
                "FLOW",
                "TOPIC",
                "PARTITION",
                "LAG_RECORDS",
                "LAG_SECONDS",
                "STATE",
                "REASON",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for p in &self.partitions {
            table.push(vec![
                p.flow.clone().unwrap_or_default(),
                p.topic.clone(),
                p.partition.to_string(),
                p.lag_records.map_or_else(|| "-".into(), |r| r.to_string()),
                p.lag_seconds
                    .map_or_else(|| "-".into(), |s| format!("{s:.1}")),
                p.state.clone(),
                p.reason.clone(),
            ]);
        }
        let skip = usize::from(!flows);
        let widths: Vec<usize> = (0..7)
            .map(|c| {
                table
                    .iter()
                    .map(|r| r[c].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        out.push('\n');
        for row in &table {
            let cells: Vec<String> = (skip..7)
                .map(|c| format!("{:<w$}", row[c], w = widths[c]))
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        out
    }
}

/// `(host:port, path prefix)` of an `http://host:port[/prefix]` URL.
fn target(url: &str) -> Result<(String, String), StatusError> {
    let bad = |why: &str| StatusError::Url {
        url: url.to_owned(),
        why: why.to_owned(),
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("only http:// is served by metrics.listen"))?;
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let authority = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, prefix.to_owned()))
}

/// One GET: the status code and the body.
async fn get(authority: &str, path: &str, url: &str) -> Result<(u16, String), StatusError> {
    let unreachable = |why: String| StatusError::Unreachable {
        url: url.to_owned(),
        why,
    };
    let work = async {
        let stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(conn);
        let req = Request::get(path)
            .header(HOST, authority)
            // The Prometheus text format: the exposition without OpenMetrics' `# EOF` suffixes.
            .header(ACCEPT, "text/plain")
            .body(Empty::<Bytes>::new())
            .map_err(|e| unreachable(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(TIMEOUT, work)
        .await
        .map_err(|_| unreachable(format!("no answer within {TIMEOUT:?}")))?
}

/// Reads `/readyz` and `/metrics` of the instance at `url`.
pub async fn fetch(url: &str) -> Result<Status, StatusError> {
    let (authority, prefix) = target(url)?;
    let url = url.trim_end_matches('/');
    let readyz_url = format!("{url}/readyz");
    let (code, readyz) = get(&authority, &format!("{prefix}/readyz"), &readyz_url).await?;
    if code != 200 && code != 503 {
        return Err(StatusError::Unexpected {
            url: readyz_url,
            status: code,
            why: "expected 200 (ready) or 503 (not ready)".into(),
        });
    }
    let metrics_url = format!("{url}/metrics");
    let (mcode, metrics) = get(&authority, &format!("{prefix}/metrics"), &metrics_url).await?;
    if mcode != 200 {
        return Err(StatusError::Unexpected {
            url: metrics_url,
            status: mcode,
            why: "expected 200".into(),
        });
    }
    Status::parse(url, code == 200, &readyz, &metrics)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# HELP strait_partition_lag_records Source end offset minus ...
# TYPE strait_partition_lag_records gauge
strait_partition_lag_records{topic=\"orders\",partition=\"0\"} 10
strait_partition_lag_records{topic=\"orders\",partition=\"1\"} 0
strait_partition_lag_seconds{topic=\"orders\",partition=\"0\"} 2.5
strait_partition_lag_seconds{topic=\"orders\",partition=\"1\"} 0.0
strait_lag_records 10
strait_lag_seconds 2.5
";

    #[test]
    fn readiness_and_lag_make_one_table() {
        let readyz = r#"{"status":"not_ready","reason":"1 of 2 assigned partitions are not making progress (stalled)","assigned_partitions":2,"not_ready_partitions":[{"topic":"orders","partition":0,"state":"stalled","reason":"no progress for 60 s","lag_records":10,"no_progress_seconds":60.0}]}"#;
        let s = Status::parse("http://h:1", false, readyz, METRICS).unwrap();
        assert!(!s.ready);
        assert_eq!(s.lag_records, Some(10));
        assert_eq!(s.lag_seconds, Some(2.5));
        assert_eq!(s.partitions.len(), 2);
        assert_eq!(s.partitions[0].state, "stalled");
        assert_eq!(s.partitions[1].state, "ok");
        let t = s.table();
        assert!(t.contains("status     NOT READY: 1 of 2"), "{t}");
        assert!(t.contains("lag        10 records, 2.5 s behind"), "{t}");
        assert!(
            t.contains("TOPIC   PARTITION  LAG_RECORDS  LAG_SECONDS  STATE    REASON"),
            "{t}"
        );
        assert!(
            t.contains(
                "orders  0          10           2.5          stalled  no progress for 60 s"
            ),
            "{t}"
        );
        assert!(
            t.contains("orders  1          0            0.0          ok\n"),
            "{t}"
        );
    }

    #[test]
    fn flows_get_a_column_and_lag_adds_up() {
        let metrics = "strait_lag_records{flow=\"a->b\"} 3\nstrait_lag_records{flow=\"b->a\"} 4\n\
                       strait_partition_lag_records{flow=\"a->b\",topic=\"t\",partition=\"0\"} 3\n";
        let s = Status::parse("http://h:1", true, r#"{"status":"ready"}"#, metrics).unwrap();
        assert_eq!(s.lag_records, Some(7));
        assert_eq!(s.partitions[0].flow.as_deref(), Some("a->b"));
        assert!(s.table().contains("FLOW  TOPIC"), "{}", s.table());
    }

    #[test]
    fn urls() {
        assert_eq!(
            target("http://127.0.0.1:9464").unwrap(),
            ("127.0.0.1:9464".into(), String::new())
        );
        assert_eq!(
            target("http://strait/mirror/").unwrap(),
            ("strait:80".into(), "/mirror".into())
        );
        assert!(target("https://x:1").is_err());
        assert!(Status::parse("u", true, "<html>", "").is_err());
    }
}
