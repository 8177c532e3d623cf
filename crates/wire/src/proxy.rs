//! `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` for the token and STS requests of [`crate::http`],
//! as curl and most HTTP clients read them (lower-case names win over upper-case ones).
//!
//! An `https://` URL goes through the proxy in a `CONNECT host:port` tunnel (TLS end to end, the
//! proxy sees only the host name); an `http://` URL is sent to the proxy in absolute form.
//! `NO_PROXY` lists hosts reached directly: `*` (all), a name (`example.com` matches it and its
//! subdomains, as does `.example.com`), or an IP address; an entry may carry `:port`.
//!
//! [`for_url`] and the CONNECT exchange's parsing are pure; [`tunnel`] is the I/O around them.

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// The proxy to use for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Proxy {
    /// `host:port` to connect to.
    pub(crate) addr: String,
    /// `Basic <base64>` from the proxy URL's `user:password@`, if any (never logged).
    pub(crate) authorization: Option<String>,
    /// The variable it came from, for error messages.
    pub(crate) var: &'static str,
}

/// The proxy `get` (an environment lookup) names for a request to `host:port` over `scheme`, or
/// `None` for a direct connection. A proxy URL that cannot be read is an error naming the
/// variable (without its value: it may hold a password).
pub(crate) fn for_url(
    get: impl Fn(&str) -> Option<String>,
    scheme: &str,
    host: &str,
    port: u16,
) -> Result<Option<Proxy>, String> {
    let vars: [&'static str; 2] = match scheme {
        "https" => ["https_proxy", "HTTPS_PROXY"],
        _ => ["http_proxy", "HTTP_PROXY"],
    };
    let Some((var, url)) = vars
        .into_iter()
        .find_map(|v| get(v).filter(|u| !u.trim().is_empty()).map(|u| (v, u)))
    else {
        return Ok(None);
    };
    let no_proxy = get("no_proxy")
        .or_else(|| get("NO_PROXY"))
        .unwrap_or_default();
    if bypass(&no_proxy, host, port) {
        return Ok(None);
    }
    parse(var, url.trim()).map(Some)
}

/// Whether `NO_PROXY` sends `host:port` directly.
fn bypass(no_proxy: &str, host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    no_proxy.split(',').map(str::trim).any(|entry| {
        if entry == "*" {
            return true;
        }
        let (name, entry_port) = match entry.rsplit_once(':') {
            Some((n, p)) if !n.contains(':') && p.parse::<u16>().is_ok() => {
                (n, p.parse::<u16>().ok())
            }
            _ => (entry, None),
        };
        let name = name
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        !name.is_empty()
            && entry_port.is_none_or(|p| p == port)
            && (host == name || host.ends_with(&format!(".{name}")))
    })
}

/// `http://[user:password@]host[:port][/]` -> [`Proxy`].
fn parse(var: &'static str, url: &str) -> Result<Proxy, String> {
    let bad = |why: &str| format!("{var}: {why}; expected http://[user:password@]host:port");
    let rest = match url.split_once("://") {
        Some(("http", rest)) => rest,
        Some((other, _)) => {
            return Err(bad(&format!(
                "a {other}:// proxy is not supported (only http://)"
            )));
        }
        None => url,
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    if hostport.is_empty() || hostport.contains('/') {
        return Err(bad("no host"));
    }
    let has_port = hostport
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && !h.ends_with(':') && p.parse::<u16>().is_ok());
    let addr = if has_port {
        hostport.to_owned()
    } else {
        format!("{hostport}:80")
    };
    let authorization = userinfo.map(|u| {
        let decoded = percent_decode(u);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(decoded)
        )
    });
    Ok(Proxy {
        addr,
        authorization,
        var,
    })
}

/// `%XX` decoding of the user info (a password may hold `@` or `:` written as `%40`, `%3A`).
pub(crate) fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |at: usize| b.get(at).and_then(|c| (*c as char).to_digit(16));
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The CONNECT request for `target` (`host:port`).
fn connect_request(target: &str, authorization: Option<&str>) -> String {
    let auth = authorization
        .map(|a| format!("Proxy-Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n")
}

/// The proxy's answer to CONNECT: `Ok` for a 2xx status line, else what it said.
fn connect_answer(head: &str) -> Result<(), String> {
    let status_line = head.lines().next().unwrap_or_default();
    let code = status_line.split_whitespace().nth(1).unwrap_or_default();
    if code.starts_with('2') && code.len() == 3 {
        return Ok(());
    }
    let hint = match code {
        "407" => {
            "; the proxy wants credentials: put them in the proxy URL (http://user:password@host:port)"
        }
        "403" => {
            "; the proxy does not allow this destination: ask for it, or add the host to NO_PROXY"
        }
        _ => "",
    };
    Err(format!("the proxy refused the tunnel: {status_line}{hint}"))
}

/// The largest CONNECT answer header read.
const MAX_HEAD: usize = 16 * 1024;

/// Opens a CONNECT tunnel to `target` through `stream` (connected to the proxy); the stream then
/// carries the TLS connection to the target.
pub(crate) async fn tunnel<S>(stream: &mut S, target: &str, proxy: &Proxy) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let io = |e: std::io::Error| format!("proxy {} ({}): {e}", proxy.addr, proxy.var);
    stream
        .write_all(connect_request(target, proxy.authorization.as_deref()).as_bytes())
        .await
        .map_err(io)?;
    // Read byte by byte up to the blank line: nothing of the tunnel's own bytes may be consumed.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return Err(format!(
                "proxy {} ({}): answer to CONNECT longer than {MAX_HEAD} bytes",
                proxy.addr, proxy.var
            ));
        }
        let mut byte = [0u8; 1];
        let n = stream.read(&mut byte).await.map_err(io)?;
        if n == 0 {
            return Err(format!(
                "proxy {} ({}) closed the connection before answering CONNECT",
                proxy.addr, proxy.var
            ));
        }
        head.push(byte[0]);
    }
    connect_answer(&String::from_utf8_lossy(&head))
        .map_err(|e| format!("proxy {} ({}): {e}", proxy.addr, proxy.var))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    #[test]
    fn which_requests_use_which_proxy() {
        let e = env(&[
            ("HTTPS_PROXY", "http://user:p%40ss@proxy.corp:3128/"),
            (
                "NO_PROXY",
                "localhost,.internal, sts.amazonaws.com:8443,10.0.0.1",
            ),
        ]);
        let p = for_url(&e, "https", "idp.example.com", 443)
            .unwrap()
            .unwrap();
        assert_eq!(p.addr, "proxy.corp:3128");
        assert_eq!(p.var, "HTTPS_PROXY");
        // user:p@ss
        assert_eq!(p.authorization.as_deref(), Some("Basic dXNlcjpwQHNz"));
        for (host, port) in [
            ("localhost", 443),
            ("kafka.internal", 443),
            ("10.0.0.1", 443),
        ] {
            assert_eq!(for_url(&e, "https", host, port).unwrap(), None, "{host}");
        }
        // A NO_PROXY entry with a port only matches that port.
        assert!(
            for_url(&e, "https", "sts.amazonaws.com", 443)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            for_url(&e, "https", "sts.amazonaws.com", 8443).unwrap(),
            None
        );
        // http:// URLs use HTTP_PROXY, which is not set.
        assert_eq!(for_url(&e, "http", "idp.example.com", 80).unwrap(), None);
        // Lower case wins; no scheme means http; "*" bypasses everything.
        let e = env(&[
            ("https_proxy", "proxy:8080"),
            ("HTTPS_PROXY", "http://other:1"),
        ]);
        assert_eq!(
            for_url(&e, "https", "h", 443).unwrap().unwrap().addr,
            "proxy:8080"
        );
        let e = env(&[("HTTPS_PROXY", "http://proxy:8080"), ("no_proxy", "*")]);
        assert_eq!(for_url(&e, "https", "h", 443).unwrap(), None);
        // A proxy URL strait cannot use names the variable, not its value.
        let e = env(&[("HTTPS_PROXY", "socks5://user:secret@proxy:1080")]);
        let err = for_url(&e, "https", "h", 443).unwrap_err();
        assert!(
            err.starts_with("HTTPS_PROXY: a socks5:// proxy is not supported"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
    }

    #[tokio::test]
    async fn connect_opens_a_tunnel_or_says_why_not() {
        let proxy = parse("HTTPS_PROXY", "http://u:p@proxy:3128").unwrap();
        let (mut client, mut server) = tokio::io::duplex(4096);
        let answer = tokio::spawn(async move {
            let mut buf = vec![0u8; 1024];
            let n = server.read(&mut buf).await.unwrap();
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            server
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\ntunnel bytes")
                .await
                .unwrap();
            req
        });
        tunnel(&mut client, "idp.example.com:443", &proxy)
            .await
            .unwrap();
        let req = answer.await.unwrap();
        assert_eq!(
            req,
            "CONNECT idp.example.com:443 HTTP/1.1\r\nHost: idp.example.com:443\r\n\
             Proxy-Authorization: Basic dTpw\r\n\r\n"
        );
        // What follows the answer's head is the tunnel's, not consumed.
        let mut rest = [0u8; 12];
        client.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"tunnel bytes");

        let e = connect_answer("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n").unwrap_err();
        assert!(e.contains("407") && e.contains("wants credentials"), "{e}");
    }
}
