//! The routes' constants and response builders, shared by both example servers.
//!
//! | route             | response                                                          |
//! |-------------------|-------------------------------------------------------------------|
//! | `GET /`           | [`INDEX_HTML`], `text/html; charset=utf-8`, pinned `u=0`          |
//! | `GET /critical`   | [`CRITICAL_LEN`] pattern bytes, pinned `u=0`                      |
//! | `GET /bg/{name}`  | [`BG_LEN`] pattern bytes in 16 KiB chunks, follows the client     |
//! | `GET /size/{n}`   | `n` pattern bytes, `n <= MAX_SIZE`, else 400 with a plain reason   |
//! | `GET /delay/{ms}` | [`CRITICAL_LEN`] pattern bytes after `ms` milliseconds (`ms <= MAX_DELAY_MS`, else 400 with a plain reason), follows the client |
//!
//! The pins are applied by each server with `tower_priority::PriorityLayer`; the builders
//! here only produce status, headers and body.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

use crate::body::PatternBody;

/// Length of `GET /critical`.
pub const CRITICAL_LEN: u64 = 4096;
/// Length of `GET /bg/{name}`.
pub const BG_LEN: u64 = 1 << 20;
/// Largest `n` accepted by `GET /size/{n}` (64 MiB).
pub const MAX_SIZE: u64 = 64 << 20;
/// Largest `ms` accepted by `GET /delay/{ms}` (10 s).
pub const MAX_DELAY_MS: u64 = 10_000;
/// Urgency pinned on `/` and `/critical`.
pub const CRITICAL_URGENCY: u8 = 0;

/// Path of the critical resource.
pub const CRITICAL_PATH: &str = "/critical";
/// Prefix of the background resources (`/bg/{name}`).
pub const BG_PREFIX: &str = "/bg/";
/// Prefix of the sized resources (`/size/{n}`).
pub const SIZE_PREFIX: &str = "/size/";
/// Prefix of the delayed critical-size resources (`/delay/{ms}`).
pub const DELAY_PREFIX: &str = "/delay/";
/// The two background downloads of the experiment the integration tests and the lab run
/// (two [`BG_LEN`] responses and a [`CRITICAL_LEN`] one at [`CRITICAL_PATH`], on one
/// HTTP/2 connection); the peer servers serve them as static files.
pub const FIXTURE_BG_PATHS: [&str; 2] = ["/bg/1", "/bg/2"];

/// Content type of every pattern body.
pub const OCTET_STREAM: &str = "application/octet-stream";
/// Content type of `/`.
pub const HTML: &str = "text/html; charset=utf-8";
/// Content type of error bodies.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// The page served at `/`: it fetches `/critical` and two background resources, the
/// browser workload of the seed experiment, and verifies them itself: each body must have
/// the expected length and every byte `i` must be `i % 251`. The outcome goes to
/// `document.title` and `#result`: `ok critical=4096 bg1=1048576 bg2=1048576`, or
/// `error: ...` (the headless Chromium test reads it from the dumped DOM).
pub const INDEX_HTML: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>RFC 9218 priorities demo</title>
</head>
<body>
<h1>RFC 9218 priorities demo</h1>
<p>This page loads one critical 4 KiB resource and two 1 MiB background resources over
the same connection. The server pins <code>/critical</code> to <code>u=0</code>.</p>
<ul id="results"></ul>
<p id="result">loading</p>
<script>
const started = performance.now();
async function load(path, priority, expected) {
  const r = await fetch(path, { priority, cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  const b = new Uint8Array(await r.arrayBuffer());
  if (b.length !== expected) throw new Error(`${path}: ${b.length} bytes, expected ${expected}`);
  for (let i = 0; i < b.length; i++) {
    if (b[i] !== i % 251) throw new Error(`${path}: byte ${i} is ${b[i]}, expected ${i % 251}`);
  }
  const li = document.createElement("li");
  li.textContent = `${path}: ${b.length} bytes in ${Math.round(performance.now() - started)} ms`;
  document.getElementById("results").appendChild(li);
  return b.length;
}
Promise.all([
  load("/bg/one", "low", 1048576),
  load("/bg/two", "low", 1048576),
  load("/critical", "high", 4096),
]).then(
  ([bg1, bg2, critical]) => `ok critical=${critical} bg1=${bg1} bg2=${bg2}`,
  (e) => `error: ${e.message}`,
).then((result) => {
  document.title = result;
  document.getElementById("result").textContent = result;
});
</script>
</body>
</html>
"#;

/// A 200 response with `len` pattern bytes, `application/octet-stream`, with
/// `content-length`, streamed lazily in 16 KiB chunks.
pub fn pattern_response(len: u64) -> Response<PatternBody> {
    let mut res = Response::new(PatternBody::new(len));
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(OCTET_STREAM));
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    res
}

/// The `/` page as a 200 `text/html; charset=utf-8` response.
pub fn index_response() -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from_static(INDEX_HTML.as_bytes())));
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(HTML));
    res
}

/// Path of the connection-counters route of the `axum_serve`, `axum_server` and `hyper_loop`
/// examples.
pub const STATS_PATH: &str = "/stats";

/// `GET /stats`: the requesting connection's `tls_flush` counters as they are now, one
/// `StatsSnapshot { name: value, ... }` line (its `Debug` form), `text/plain`.
///
/// ```
/// let res = examples::responses::stats_response(tls_flush::StatsSnapshot::default());
/// assert_eq!(res.status(), 200);
/// ```
pub fn stats_response(stats: tls_flush::StatsSnapshot) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(format!("{stats:?}\n"))));
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT));
    res
}

/// A plain-text error response with `status` and `reason` (a newline is appended).
pub fn text_response(status: StatusCode, reason: impl fmt::Display) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(format!("{reason}\n"))));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT));
    res
}

/// 404 with a plain-text reason.
pub fn not_found() -> Response<Full<Bytes>> {
    text_response(StatusCode::NOT_FOUND, "not found")
}

/// 405 with `allow: GET, HEAD` and a plain-text reason.
pub fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut res = text_response(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    res.headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    res
}

/// Why a `/size/{n}` segment was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SizeError {
    /// Not a decimal number of bytes (only ASCII digits are accepted).
    NotANumber(String),
    /// Larger than [`MAX_SIZE`].
    TooLarge(String),
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::NotANumber(s) => {
                write!(f, "size must be a decimal number of bytes, got {s:?}")
            }
            SizeError::TooLarge(s) => {
                write!(f, "size {s} exceeds the maximum of {MAX_SIZE} bytes")
            }
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses the `{n}` of `/size/{n}`: ASCII digits, at most [`MAX_SIZE`].
pub fn parse_size(segment: &str) -> Result<u64, SizeError> {
    if segment.is_empty() || !segment.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SizeError::NotANumber(segment.to_owned()));
    }
    match segment.parse::<u64>() {
        Ok(n) if n <= MAX_SIZE => Ok(n),
        _ => Err(SizeError::TooLarge(segment.to_owned())),
    }
}

/// A boxed response body, for responses whose body type depends on the outcome.
pub type BoxedBody = BoxBody<Bytes, Infallible>;

/// The response of `/size/{segment}`: the pattern body, or a 400 with the reason.
pub fn size_response(segment: &str) -> Response<BoxedBody> {
    match parse_size(segment) {
        Ok(n) => pattern_response(n).map(BodyExt::boxed),
        Err(e) => text_response(StatusCode::BAD_REQUEST, e).map(BodyExt::boxed),
    }
}

/// Why a `/delay/{ms}` segment was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelayError {
    /// Not a decimal number of milliseconds (only ASCII digits are accepted).
    NotANumber(String),
    /// Longer than [`MAX_DELAY_MS`].
    TooLong(String),
}

impl fmt::Display for DelayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DelayError::NotANumber(s) => {
                write!(
                    f,
                    "delay must be a decimal number of milliseconds, got {s:?}"
                )
            }
            DelayError::TooLong(s) => {
                write!(f, "delay {s} ms exceeds the maximum of {MAX_DELAY_MS} ms")
            }
        }
    }
}

impl std::error::Error for DelayError {}

/// Parses the `{ms}` of `/delay/{ms}`: ASCII digits, at most [`MAX_DELAY_MS`].
pub fn parse_delay(segment: &str) -> Result<Duration, DelayError> {
    if segment.is_empty() || !segment.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DelayError::NotANumber(segment.to_owned()));
    }
    match segment.parse::<u64>() {
        Ok(ms) if ms <= MAX_DELAY_MS => Ok(Duration::from_millis(ms)),
        _ => Err(DelayError::TooLong(segment.to_owned())),
    }
}

/// The response of `/delay/{segment}`: after sleeping `segment` milliseconds, the same
/// [`CRITICAL_LEN`] pattern bytes as `/critical` (not pinned: the route follows the
/// client's priority); a 400 with the reason at once if the segment is rejected.
pub async fn delay_response(segment: &str) -> Response<BoxedBody> {
    match parse_delay(segment) {
        Ok(delay) => {
            tokio::time::sleep(delay).await;
            pattern_response(CRITICAL_LEN).map(BodyExt::boxed)
        }
        Err(e) => text_response(StatusCode::BAD_REQUEST, e).map(BodyExt::boxed),
    }
}

/// The `{name}` of a path `prefix{name}` when it is one non-empty path segment
/// (the same paths axum's `/prefix/{name}` matches).
pub fn path_param<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("67108864"), Ok(MAX_SIZE));
        assert!(matches!(
            parse_size("67108865"),
            Err(SizeError::TooLarge(_))
        ));
        assert!(matches!(
            parse_size("99999999999999999999999"),
            Err(SizeError::TooLarge(_))
        ));
        for bad in ["", "abc", "-1", "+1", "1.5", " 1", "0x10"] {
            assert!(
                matches!(parse_size(bad), Err(SizeError::NotANumber(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn delays() {
        assert_eq!(parse_delay("0"), Ok(Duration::ZERO));
        assert_eq!(parse_delay("50"), Ok(Duration::from_millis(50)));
        assert_eq!(
            parse_delay("10000"),
            Ok(Duration::from_millis(MAX_DELAY_MS))
        );
        assert!(matches!(parse_delay("10001"), Err(DelayError::TooLong(_))));
        assert!(matches!(
            parse_delay("99999999999999999999999"),
            Err(DelayError::TooLong(_))
        ));
        for bad in ["", "abc", "-1", "+1", "1.5", " 1", "0x10"] {
            assert!(
                matches!(parse_delay(bad), Err(DelayError::NotANumber(_))),
                "{bad}"
            );
        }
        assert!(DelayError::TooLong("10001".into())
            .to_string()
            .contains("10000"));
    }

    #[tokio::test]
    async fn delay_responses() {
        let r = delay_response("0").await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_LENGTH], "4096");
        assert_eq!(r.headers()[CONTENT_TYPE], OCTET_STREAM);
        for bad in ["10001", "abc"] {
            let r = delay_response(bad).await;
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{bad}");
            assert_eq!(r.headers()[CONTENT_TYPE], TEXT, "{bad}");
        }
    }

    #[test]
    fn responses() {
        let r = pattern_response(CRITICAL_LEN);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_TYPE], OCTET_STREAM);
        assert_eq!(r.headers()[CONTENT_LENGTH], "4096");
        let r = index_response();
        assert_eq!(r.headers()[CONTENT_TYPE], HTML);
        let r = size_response("67108865");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[CONTENT_TYPE], TEXT);
        assert_eq!(method_not_allowed().headers()[ALLOW], "GET, HEAD");
    }

    #[test]
    fn params() {
        assert_eq!(path_param("/bg/x", BG_PREFIX), Some("x"));
        assert_eq!(path_param("/bg/", BG_PREFIX), None);
        assert_eq!(path_param("/bg/x/y", BG_PREFIX), None);
        assert_eq!(path_param("/bgx", BG_PREFIX), None);
    }

    #[test]
    fn index_loads_the_workload() {
        assert!(INDEX_HTML.contains(CRITICAL_PATH));
        assert_eq!(INDEX_HTML.matches("\"/bg/").count(), 2);
    }
}
