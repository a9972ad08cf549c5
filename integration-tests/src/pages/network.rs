//! The tabs' requests as Chromium reports them over the DevTools protocol's Network domain:
//! the URL, Chromium's own priority, the `priority` header actually sent, and the
//! response's protocol and connection.
//!
//! The events come over a DevTools connection of their own ([`NetworkLog`], on
//! [`DevTools`]), parsed here from their JSON with only the fields used: chromiumoxide's
//! typed events lag the browser (chromiumoxide 0.9.1 cannot parse Chromium 156's
//! `requestWillBeSentExtraInfo` for subresources, whose `clientSecurityState` gained
//! fields, and drops them with a log line), so its event listeners would miss exactly the
//! headers we want.
//!
//! Invariants: a tab is watched (attached, Network enabled) before it navigates, so no
//! request of the page is missed; events of one request are merged by request id whatever
//! their order; an event that does not parse is a problem reported with the load, never
//! silently dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::devtools::{DevTools, RawEvent};
use super::report::RequestSeen;
use crate::BoxError;

/// After the page reported done, how long the log may wait for the last events of its
/// requests (CDP delivers them asynchronously, a few milliseconds apart).
const EVENT_GRACE: Duration = Duration::from_secs(1);

/// How often [`NetworkLog::settle`] looks again.
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// The request header RFC 9218 defines, lowercase as HTTP/2 sends header names.
const PRIORITY_HEADER: &str = "priority";

/// `Network.requestWillBeSent`, the fields used.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestWillBeSent {
    request_id: String,
    request: SentRequest,
    #[serde(rename = "type")]
    resource_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SentRequest {
    url: String,
    initial_priority: String,
}

/// `Network.requestWillBeSentExtraInfo`: the headers as sent.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestExtraInfo {
    request_id: String,
    headers: serde_json::Map<String, Value>,
}

/// `Network.responseReceived`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseReceived {
    request_id: String,
    #[serde(default)]
    has_extra_info: bool,
    response: ReceivedResponse,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReceivedResponse {
    status: i64,
    protocol: Option<String>,
    /// A JSON number in CDP; 0 without a connection.
    #[serde(default)]
    connection_id: f64,
    from_disk_cache: Option<bool>,
}

/// `Network.requestServedFromCache` and `Network.loadingFinished`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestEvent {
    request_id: String,
}

/// `Network.loadingFailed`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LoadingFailed {
    request_id: String,
    error_text: String,
}

/// What is known of one request so far, from whichever of its events arrived.
#[derive(Debug, Default)]
struct Record {
    /// From `requestWillBeSent`: URL path, resource type, Chromium's initial priority.
    sent: Option<(String, String, String)>,
    /// From `requestWillBeSentExtraInfo`.
    priority: Option<String>,
    extra_info_seen: bool,
    /// From `responseReceived`.
    protocol: Option<String>,
    connection_id: Option<u64>,
    status: Option<u16>,
    awaits_extra_info: bool,
    from_cache: bool,
    /// From `loadingFinished` or `loadingFailed`.
    ended: bool,
    failure: Option<String>,
}

impl Record {
    /// Whether no more events are expected for this request.
    fn complete(&self) -> bool {
        self.ended && (!self.awaits_extra_info || self.extra_info_seen)
    }

    /// The request as reported, once `requestWillBeSent` arrived.
    fn seen(&self) -> Option<RequestSeen> {
        let (path, resource_type, initial_priority) = self.sent.clone()?;
        Some(RequestSeen {
            path,
            resource_type,
            initial_priority,
            priority: self.priority.clone(),
            protocol: self.protocol.clone(),
            connection_id: self.connection_id,
            status: self.status,
            from_cache: self.from_cache,
            failure: self.failure.clone(),
        })
    }
}

/// One tab's requests in issue order, each request id's index, and the events that did
/// not parse.
#[derive(Debug, Default)]
struct Requests {
    records: Vec<Record>,
    index: HashMap<String, usize>,
    problems: Vec<String>,
}

impl Requests {
    fn record(&mut self, request_id: &str) -> &mut Record {
        let next = self.records.len();
        let at = *self.index.entry(request_id.to_owned()).or_insert(next);
        if at == next {
            self.records.push(Record::default());
        }
        &mut self.records[at]
    }

    /// Applies a Network event; other events are ignored.
    fn apply(&mut self, event: &RawEvent) {
        let applied = match event.method.as_str() {
            "Network.requestWillBeSent" => parse(event).map(|e| self.on_sent(e)),
            "Network.requestWillBeSentExtraInfo" => parse(event).map(|e| self.on_extra_info(e)),
            "Network.responseReceived" => parse(event).map(|e| self.on_response(e)),
            "Network.requestServedFromCache" => parse(event).map(|e: RequestEvent| {
                self.record(&e.request_id).from_cache = true;
            }),
            "Network.loadingFinished" => parse(event).map(|e: RequestEvent| {
                self.record(&e.request_id).ended = true;
            }),
            "Network.loadingFailed" => parse(event).map(|e: LoadingFailed| {
                let record = self.record(&e.request_id);
                record.ended = true;
                record.failure = Some(e.error_text);
            }),
            _ => Ok(()),
        };
        if let Err(err) = applied {
            self.problems.push(format!(
                "cannot parse DevTools event {}: {err}",
                event.method
            ));
        }
    }

    fn on_sent(&mut self, sent: RequestWillBeSent) {
        let record = self.record(&sent.request_id);
        // A redirect reuses the request id; the site has none: keep the first.
        record.sent.get_or_insert_with(|| {
            (
                url_path(&sent.request.url).to_owned(),
                sent.resource_type.unwrap_or_else(|| "Other".to_owned()),
                sent.request.initial_priority,
            )
        });
    }

    fn on_extra_info(&mut self, extra: RequestExtraInfo) {
        let record = self.record(&extra.request_id);
        record.priority = priority_header(&extra.headers);
        record.extra_info_seen = true;
    }

    fn on_response(&mut self, received: ResponseReceived) {
        let record = self.record(&received.request_id);
        let response = received.response;
        record.awaits_extra_info = received.has_extra_info;
        record.protocol = response.protocol;
        record.connection_id = connection_id(response.connection_id);
        record.status = u16::try_from(response.status).ok();
        record.from_cache |= response.from_disk_cache == Some(true);
    }
}

fn parse<T: DeserializeOwned>(event: &RawEvent) -> Result<T, serde_json::Error> {
    T::deserialize(&event.params)
}

/// The `priority` header among `headers` (names as sent, so lowercase over HTTP/2).
fn priority_header(headers: &serde_json::Map<String, Value>) -> Option<String> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(PRIORITY_HEADER))
        .and_then(|(_, value)| value.as_str())
        .map(str::to_owned)
}

/// CDP's connection id (a JSON number, `0` when there is no connection) as an integer.
fn connection_id(id: f64) -> Option<u64> {
    (id.is_finite() && id >= 1.0 && id.fract() == 0.0).then_some(id as u64)
}

/// The path of `url` without its query or fragment (`https://host:1/a/b?x` gives `/a/b`);
/// `url` itself when it has no authority (e.g. `data:`).
fn url_path(url: &str) -> &str {
    let Some((_, rest)) = url.split_once("://") else {
        return url;
    };
    let path = rest.find('/').map_or("/", |at| &rest[at..]);
    let end = path.find(['?', '#']).unwrap_or(path.len());
    &path[..end]
}

/// Each watched tab's requests, by DevTools session id.
type Tabs = Arc<Mutex<HashMap<String, Requests>>>;

/// A DevTools connection of its own to the browser, recording the requests of the tabs it
/// watches; closed when dropped.
#[derive(Debug)]
pub(crate) struct NetworkLog {
    devtools: DevTools,
    tabs: Tabs,
}

/// A tab a [`NetworkLog`] watches (its DevTools session on the log's connection).
#[derive(Debug, Clone)]
pub(crate) struct WatchedTab(String);

impl NetworkLog {
    /// Connects to the browser's DevTools endpoint `url` (`ws://...`).
    pub(crate) async fn connect(url: &str) -> Result<NetworkLog, BoxError> {
        let tabs = Tabs::default();
        let (recording, failing) = (tabs.clone(), tabs.clone());
        let on_event = move |event: RawEvent| {
            let mut tabs = lock(&recording);
            if let Some(requests) = event.session_id.as_ref().and_then(|s| tabs.get_mut(s)) {
                requests.apply(&event);
            }
        };
        // Requests after the failure go unrecorded: say so in every tab's problems.
        let on_failure = move |failure: String| {
            for requests in lock(&failing).values_mut() {
                requests.problems.push(format!("network log: {failure}"));
            }
        };
        let devtools = DevTools::connect(url, on_event, on_failure).await?;
        Ok(NetworkLog { devtools, tabs })
    }

    /// Starts recording the requests of the tab with target id `target`: attaches to it
    /// and enables its Network domain; its requests are recorded from the return on.
    pub(crate) async fn watch(&self, target: &str) -> Result<WatchedTab, BoxError> {
        let attach = json!({ "targetId": target, "flatten": true });
        let attached = self
            .devtools
            .call("Target.attachToTarget", None, attach)
            .await?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| format!("Target.attachToTarget answered {attached}"))?
            .to_owned();
        // Registered before Network.enable, so that the tab's first events are recorded.
        lock(&self.tabs).entry(session.clone()).or_default();
        let enable = self
            .devtools
            .call("Network.enable", Some(session.clone()), json!({}));
        enable.await?;
        Ok(WatchedTab(session))
    }

    /// Waits until every request of `tab` recorded so far has ended and its extra
    /// information arrived, for at most [`EVENT_GRACE`] and never past `deadline`.
    pub(crate) async fn settle(&self, tab: &WatchedTab, deadline: Instant) {
        let until = deadline.min(Instant::now() + EVENT_GRACE);
        while Instant::now() < until && !self.settled(tab) {
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    fn settled(&self, tab: &WatchedTab) -> bool {
        lock(&self.tabs)
            .get(&tab.0)
            .is_none_or(|requests| requests.records.iter().all(Record::complete))
    }

    /// `tab`'s requests recorded so far, in issue order, and the problems recording them
    /// (events that did not parse, a failed connection).
    pub(crate) fn requests(&self, tab: &WatchedTab) -> (Vec<RequestSeen>, Vec<String>) {
        let tabs = lock(&self.tabs);
        let Some(requests) = tabs.get(&tab.0) else {
            return (Vec::new(), Vec::new());
        };
        let seen = requests.records.iter().filter_map(Record::seen).collect();
        (seen, requests.problems.clone())
    }
}

/// The lock of `tabs`; a poisoned one still holds what was recorded.
fn lock(tabs: &Mutex<HashMap<String, Requests>>) -> MutexGuard<'_, HashMap<String, Requests>> {
    tabs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: &str) -> RawEvent {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn url_paths() {
        assert_eq!(
            url_path("https://127.0.0.1:4433/article/a.png?x=1"),
            "/article/a.png"
        );
        assert_eq!(url_path("https://h/app/#top"), "/app/");
        assert_eq!(url_path("https://h"), "/");
        assert_eq!(url_path("data:,"), "data:,");
    }

    #[test]
    fn connection_ids() {
        assert_eq!(connection_id(0.0), None);
        assert_eq!(connection_id(42.0), Some(42));
        assert_eq!(connection_id(f64::NAN), None);
    }

    /// Chromium 156's events (trimmed), in an order CDP allows: the extra info first.
    #[test]
    fn merges_a_request_from_its_events_in_any_order() {
        let mut requests = Requests::default();
        requests.apply(&event(
            r#"{"method":"Network.requestWillBeSentExtraInfo","params":{"requestId":"1.2",
            "associatedCookies":[],"headers":{":path":"/article/style.css","priority":"u=0"},
            "connectTiming":{"requestTime":1.5},"clientSecurityState":{"initiatorIsSecureContext":true,
            "initiatorIPAddressSpace":"Loopback","localNetworkAccessRequestPolicy":"PermissionBlock"}},
            "sessionId":"S"}"#,
        ));
        requests.apply(&event(
            r#"{"method":"Network.requestWillBeSent","params":{"requestId":"1.2",
            "request":{"url":"https://127.0.0.1:1/article/style.css","initialPriority":"VeryHigh"},
            "type":"Stylesheet"}}"#,
        ));
        requests.apply(&event(
            r#"{"method":"Network.responseReceived","params":{"requestId":"1.2","hasExtraInfo":true,
            "response":{"status":200,"protocol":"h2","connectionId":17}}}"#,
        ));
        assert!(!requests.records[0].complete());
        requests.apply(&event(
            r#"{"method":"Network.loadingFinished","params":{"requestId":"1.2"}}"#,
        ));
        assert!(requests.records[0].complete());
        assert!(requests.problems.is_empty(), "{:?}", requests.problems);
        let seen = requests.records[0].seen().unwrap();
        assert_eq!(seen.path, "/article/style.css");
        assert_eq!(seen.resource_type, "Stylesheet");
        assert_eq!(seen.initial_priority, "VeryHigh");
        assert_eq!(seen.priority.as_deref(), Some("u=0"));
        assert_eq!(seen.protocol.as_deref(), Some("h2"));
        assert_eq!((seen.connection_id, seen.status), (Some(17), Some(200)));
    }

    #[test]
    fn an_unparsable_event_is_a_problem() {
        let mut requests = Requests::default();
        requests.apply(&event(
            r#"{"method":"Network.loadingFailed","params":{"requestId":"1"}}"#,
        ));
        assert_eq!(requests.problems.len(), 1, "{:?}", requests.problems);
    }
}
