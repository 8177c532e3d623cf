//! A Java `.properties` reader (the format of MirrorMaker's configuration files).
//!
//! Hand-written rather than taken from the `java-properties` crate (2.0.0, last released 2023,
//! which pulls in `encoding_rs` and `lazy_static`) because the callers need the entries in file
//! order with their line numbers, and the grammar is small. It follows `java.util.Properties.load`:
//!
//! * `key=value`, `key: value` and `key value`; whitespace around the separator is skipped;
//! * `#` and `!` start comment lines (only at the start of a line, after whitespace);
//! * a line ending in an odd number of `\` continues on the next line, whose leading whitespace
//!   is dropped;
//! * escapes `\t \n \r \f \\ \uXXXX`, and `\` before any other character stands for that
//!   character (`\=`, `\:`, `\ `, `\#`);
//! * a key repeated later replaces the earlier value (the entry keeps its first position).
//!
//! One deliberate difference: trailing whitespace of a value is removed (Java keeps it; Kafka
//! then trims most values anyway). Escape it (`\ `) to keep it. Files are read as UTF-8, falling
//! back to ISO-8859-1 (Java's encoding for `Properties.load(InputStream)`) when not valid UTF-8.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// One `key = value` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// The key, unescaped.
    pub key: String,
    /// The value, unescaped.
    pub value: String,
    /// 1-based line where the entry starts.
    pub line: usize,
}

/// A parsed properties file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties {
    /// The file it came from (for messages).
    pub path: PathBuf,
    /// The entries in file order.
    pub entries: Vec<Property>,
}

impl Properties {
    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Properties> {
        let bytes = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let text = match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => e.into_bytes().iter().map(|&b| char::from(b)).collect(),
        };
        Properties::parse(&text, path)
    }

    /// Parses properties text (`path` is only used in messages).
    pub fn parse(text: &str, path: &Path) -> Result<Properties> {
        let mut entries: Vec<Property> = Vec::new();
        let mut lines = text.split_inclusive('\n').enumerate().peekable();
        while let Some((index, first)) = lines.next() {
            let start_line = index + 1;
            let mut logical = String::new();
            let mut natural = strip_eol(first).trim_start_matches([' ', '\t', '\x0c']);
            if natural.is_empty() || natural.starts_with('#') || natural.starts_with('!') {
                continue;
            }
            loop {
                if ends_with_odd_backslashes(natural) {
                    logical.push_str(&natural[..natural.len() - 1]);
                    match lines.next() {
                        Some((_, next)) => {
                            natural = strip_eol(next).trim_start_matches([' ', '\t', '\x0c']);
                        }
                        None => break,
                    }
                } else {
                    logical.push_str(natural);
                    break;
                }
            }
            let (key, value, separated) =
                split_entry(&logical).map_err(|message| Error::Properties {
                    path: path.to_path_buf(),
                    line: start_line,
                    message,
                })?;
            // A line with a name and nothing else (no `=`, `:` or value) is most often a value
            // on a line of its own, such as a password whose key line was lost. Java reads it
            // as a key; its name would then be echoed in the "ignoring settings" warning and in
            // errors, so it is replaced by a placeholder that only names the line.
            let key = if value.is_empty() && !separated {
                bare_line_key(start_line)
            } else {
                key
            };
            match entries.iter_mut().find(|p| p.key == key) {
                Some(p) => p.value = value,
                None => entries.push(Property {
                    key,
                    value,
                    line: start_line,
                }),
            }
        }
        Ok(Properties {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// A value by key.
    pub fn get(&self, key: &str) -> Option<&Property> {
        self.entries.iter().find(|p| p.key == key)
    }

    /// `file:line key` for messages, e.g. `mm2.properties:4 A->B.topics`.
    pub fn describe(&self, p: &Property) -> String {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string());
        format!("{name}:{} {}", p.line, p.key)
    }
}

fn strip_eol(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix('\r').unwrap_or(line)
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
}

/// Splits a logical line into an unescaped key and value.
/// The placeholder key of a line without a separator and value (see [`Properties::parse`]).
pub fn bare_line_key(line: usize) -> String {
    format!("<line {line}: a name without `=` or value, not shown as it may be a secret>")
}

/// `(key, value, whether a '=' or ':' separator was present)`.
fn split_entry(line: &str) -> Result<(String, String, bool), String> {
    let mut chars = line.chars().peekable();
    let mut key = String::new();
    // Key: up to the first unescaped '=', ':' or whitespace.
    while let Some(&c) = chars.peek() {
        match c {
            '=' | ':' | ' ' | '\t' | '\x0c' => break,
            '\\' => {
                chars.next();
                key.push(unescape(&mut chars)?);
            }
            _ => {
                chars.next();
                key.push(c);
            }
        }
    }
    // Separator: whitespace, at most one '=' or ':', whitespace.
    while chars
        .next_if(|c| matches!(c, ' ' | '\t' | '\x0c'))
        .is_some()
    {}
    let separated = chars.next_if(|c| matches!(c, '=' | ':')).is_some();
    if separated {
        while chars
            .next_if(|c| matches!(c, ' ' | '\t' | '\x0c'))
            .is_some()
        {}
    }
    let mut value = String::new();
    // Length of the value up to its last non-whitespace or escaped character.
    let mut keep = 0;
    while let Some(c) = chars.next() {
        if c == '\\' {
            value.push(unescape(&mut chars)?);
            keep = value.len();
        } else {
            value.push(c);
            if !c.is_whitespace() {
                keep = value.len();
            }
        }
    }
    value.truncate(keep);
    Ok((key, value, separated))
}

/// Reads the character(s) after a backslash.
fn unescape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Result<char, String> {
    Ok(match chars.next() {
        None => '\\',
        Some('t') => '\t',
        Some('n') => '\n',
        Some('r') => '\r',
        Some('f') => '\x0c',
        Some('u') => {
            let hex: String = (0..4).filter_map(|_| chars.next()).collect();
            let code = (hex.len() == 4)
                .then(|| u32::from_str_radix(&hex, 16).ok())
                .flatten()
                .ok_or_else(|| {
                    format!("malformed \\uXXXX escape \"\\u{hex}\"; write four hex digits")
                })?;
            // Surrogate halves (Java's UTF-16 pairs) have no char of their own.
            char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER)
        }
        Some(other) => other,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Vec<(String, String)> {
        Properties::parse(text, Path::new("t.properties"))
            .unwrap()
            .entries
            .into_iter()
            .map(|p| (p.key, p.value))
            .collect()
    }

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn separators_comments_and_whitespace() {
        let text = "# comment\n! also a comment\n\n  a=1\nb : 2\nc 3\nd\te\nf=\ng\n  h   =   spaced value   \n";
        assert_eq!(
            parse(text),
            kv(&[
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "e"),
                ("f", ""),
                (&bare_line_key(9), ""),
                ("h", "spaced value"),
            ])
        );
    }

    /// A line holding only a secret (its `key=` line lost) must not become a key that warnings
    /// and errors print.
    #[test]
    fn a_bare_line_is_not_kept_as_a_name() {
        let p = Properties::parse(
            "bootstrap.servers=a:9092\nS3cr3t-hunter2\n  eyJhbGciOi.eyJzdWIi.sig  \nempty=\nk v\n",
            Path::new("c.properties"),
        )
        .unwrap();
        let all = format!("{p:?}");
        assert!(!all.contains("S3cr3t") && !all.contains("eyJ"), "{all}");
        assert_eq!(p.entries[1].key, bare_line_key(2));
        assert_eq!(
            p.describe(&p.entries[2]),
            format!("c.properties:3 {}", bare_line_key(3))
        );
        // Lines with a separator or a value keep their names.
        assert_eq!(p.entries[3].key, "empty");
        assert_eq!(
            (p.entries[4].key.as_str(), p.entries[4].value.as_str()),
            ("k", "v")
        );
    }

    #[test]
    fn continuation_lines() {
        let text =
            "list = a,\\\n       b,\\\n   c\nnext=1\nescaped=ends with backslash\\\\\nafter=2\n";
        assert_eq!(
            parse(text),
            kv(&[
                ("list", "a,b,c"),
                ("next", "1"),
                ("escaped", "ends with backslash\\"),
                ("after", "2"),
            ])
        );
        // A trailing continuation at end of file just ends the entry.
        assert_eq!(parse("x=1\\"), kv(&[("x", "1")]));
        // A comment line is never continued.
        assert_eq!(parse("# c \\\ny=2"), kv(&[("y", "2")]));
    }

    #[test]
    fn escapes() {
        let text = "tab=a\\tb\nnl=a\\nb\nuni=\\u00e9t\\u00C9\nkey\\=with\\:seps\\ sp=v\nslash=C:\\\\dir\nkeep=v\\ \nhash=\\#x\n";
        assert_eq!(
            parse(text),
            kv(&[
                ("tab", "a\tb"),
                ("nl", "a\nb"),
                ("uni", "étÉ"),
                ("key=with:seps sp", "v"),
                ("slash", "C:\\dir"),
                ("keep", "v "),
                ("hash", "#x"),
            ])
        );
        let err = Properties::parse("ok=1\nbad=\\u12x\n", Path::new("f.properties"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("f.properties:2: malformed \\uXXXX escape"),
            "{err}"
        );
    }

    #[test]
    fn crlf_and_repeated_keys() {
        let p = Properties::parse("a=1\r\nb=2\r\na=3\r\n", Path::new("x/f.properties")).unwrap();
        assert_eq!(
            p.entries,
            vec![
                Property {
                    key: "a".into(),
                    value: "3".into(),
                    line: 1
                },
                Property {
                    key: "b".into(),
                    value: "2".into(),
                    line: 2
                },
            ]
        );
        assert_eq!(p.describe(&p.entries[1]), "f.properties:2 b");
    }

    #[test]
    fn mm2_reference_file_syntax() {
        let text = "clusters = A, B\nA->B.enabled = true\nA->B.topics = perf.*\n#A.security.protocol = SSL\n";
        assert_eq!(
            parse(text),
            kv(&[
                ("clusters", "A, B"),
                ("A->B.enabled", "true"),
                ("A->B.topics", "perf.*"),
            ])
        );
    }

    #[test]
    fn latin1_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l1.properties");
        std::fs::write(&path, b"name=caf\xe9\n").unwrap();
        let p = Properties::load(&path).unwrap();
        assert_eq!(p.entries[0].value, "café");
    }
}
