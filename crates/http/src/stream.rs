//! `GET /api/v1/events`: server-sent events of job transitions and share usage.
//!
//! Each event's `data` is one JSON object; its `id` is the log index of the entry
//! that caused it, sent on the last event of that index only, so a client that
//! reconnects with `Last-Event-ID` (or `?after=`) gets every event after the last
//! index it saw whole, from this controller or any other. A client that asks for
//! events this controller no longer has (or never had: it started later) first gets a
//! `reset` event: read the state again, then carry on from its id.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::watch;
use tranche_tls::Role;
use utoipa::{IntoParams, ToSchema};

use super::dto::{JobEventView, ShareEventView, UnitUseView};
use super::error::{ErrorBody, HttpError};
use super::extract::{Caller, QueryArgs};
use super::Api;
use tranche_controller::events::{Event, EventKind};

/// A comment line goes out after this long without events, so proxies and clients
/// know the stream is alive.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// At most this many events in one read of the log.
const BATCH: usize = 1000;

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this log index (the `Last-Event-ID` header wins over it). Absent
    /// and no header: only events from now on.
    pub after: Option<u64>,
    /// Only this job's events.
    pub job: Option<u64>,
    /// Only this share's events.
    pub share: Option<String>,
    /// Only these kinds, comma-separated: `job`, `share`.
    pub types: Option<String>,
}

struct Filter {
    job: Option<u64>,
    share: Option<String>,
    jobs: bool,
    shares: bool,
}

impl Filter {
    fn keeps(&self, e: &Event) -> bool {
        match &e.kind {
            EventKind::Job(j) => {
                self.jobs
                    && self.job.is_none_or(|id| id == j.job.0)
                    && self.share.as_deref().is_none_or(|s| s == j.share.as_str())
            }
            EventKind::Share(s) => {
                self.shares
                    && self.job.is_none()
                    && self.share.as_deref().is_none_or(|x| x == s.share.as_str())
            }
        }
    }
}

fn encode(e: &Event) -> (&'static str, String) {
    match &e.kind {
        EventKind::Job(j) => (
            "job",
            serde_json::to_string(&JobEventView {
                index: e.index,
                job: j.job.0,
                share: j.share.to_string(),
                user: j.user.to_string(),
                from: j.from.map(Into::into),
                to: j.to.into(),
                at: j.at,
                reason: j.reason.clone(),
                nodes: j.nodes.iter().map(|n| n.to_string()).collect(),
            })
            .expect("event encodes"),
        ),
        EventKind::Share(s) => (
            "share",
            serde_json::to_string(&ShareEventView {
                index: e.index,
                share: s.share.to_string(),
                units: s
                    .units
                    .iter()
                    .map(|(u, max, used)| UnitUseView {
                        unit: u.to_string(),
                        max: *max,
                        used: *used,
                    })
                    .collect(),
            })
            .expect("event encodes"),
        ),
    }
}

struct Cursor {
    api: Arc<Api>,
    rx: watch::Receiver<u64>,
    after: u64,
    filter: Filter,
    first: bool,
}

impl Cursor {
    /// The next piece of the stream: the events after `after`, else a keep-alive
    /// comment once [`KEEP_ALIVE`] passes without any.
    async fn next(&mut self) -> Bytes {
        if self.first {
            self.first = false;
            // Reconnect after a second when the connection drops.
            return Bytes::from_static(b"retry: 1000\n\n");
        }
        loop {
            self.rx.borrow_and_update();
            let since = {
                let sh = self.api.shared.read().unwrap();
                sh.events.since(self.after, sh.applied, BATCH)
            };
            let mut out = String::new();
            if let Some(floor) = since.reset {
                out += &format!("event: reset\ndata: {{\"index\":{floor}}}\nid: {floor}\n\n");
            }
            let kept: Vec<&Event> = since
                .events
                .iter()
                .filter(|e| self.filter.keeps(e))
                .collect();
            for (i, e) in kept.iter().enumerate() {
                let (kind, data) = encode(e);
                out += &format!("event: {kind}\ndata: {data}\n");
                if kept.get(i + 1).is_none_or(|n| n.index != e.index) {
                    out += &format!("id: {}\n", e.index);
                }
                out += "\n";
            }
            self.after = since.upto;
            if !out.is_empty() {
                return Bytes::from(out);
            }
            tokio::select! {
                r = self.rx.changed() => {
                    if r.is_err() {
                        // The controller is stopping.
                        tokio::time::sleep(KEEP_ALIVE).await;
                    }
                }
                _ = tokio::time::sleep(KEEP_ALIVE) => return Bytes::from_static(b": keep-alive\n\n"),
            }
        }
    }
}

/// Server-sent events: `job` (a job's status changed), `share` (a share's usage
/// changed), `reset` (events were missed: read the state again), `end` (the token or
/// certificate the stream was opened with expired or was revoked: the stream ends).
#[utoipa::path(get, path = "/api/v1/events", tag = "events", params(EventsQuery,
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this log index")),
    responses(
        (status = 200, description = "An endless text/event-stream; each `data` is a JobEventView or ShareEventView", content_type = "text/event-stream", body = String),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody),
    ))]
pub async fn events(
    State(api): State<Arc<Api>>,
    caller: Caller,
    headers: HeaderMap,
    peer: Option<axum::Extension<super::Peer>>,
    QueryArgs(q): QueryArgs<EventsQuery>,
) -> Result<Response, HttpError> {
    let lease = super::Lease::of(&api, &headers, peer.as_deref());
    if !matches!(caller.who.role, Role::User | Role::Operator | Role::Admin) {
        return Err(HttpError::new(
            axum::http::StatusCode::FORBIDDEN,
            "forbidden",
            format!("{} may not read the event stream", caller.who),
        ));
    }
    let last = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    HttpError::invalid("Last-Event-ID", "must be a log index (an integer)")
                })?,
        ),
        None => None,
    };
    let (jobs, shares) = match &q.types {
        None => (true, true),
        Some(t) => {
            let mut j = false;
            let mut s = false;
            for kind in t.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                match kind {
                    "job" => j = true,
                    "share" => s = true,
                    other => {
                        return Err(HttpError::invalid(
                            "types",
                            format!("`{other}` is not an event kind; use job, share"),
                        ))
                    }
                }
            }
            (j, s)
        }
    };
    let (rx, applied) = {
        let sh = api.shared.read().unwrap();
        (sh.events.subscribe(), sh.applied)
    };
    let cursor = Cursor {
        api: api.clone(),
        rx,
        after: last.or(q.after).unwrap_or(applied),
        filter: Filter {
            job: q.job,
            share: q.share,
            jobs,
            shares,
        },
        first: true,
    };
    let stream = futures_util::stream::unfold(cursor, |mut c| async move {
        let b = c.next().await;
        Some((Ok::<Bytes, std::convert::Infallible>(b), c))
    });
    // The stream ends when the credential it was opened with lapses (the token's
    // expiry, a revocation), with a last `end` event that says why.
    let stream = lease.keep(Box::pin(stream), |why| {
        let data = serde_json::json!({ "reason": why });
        Some(Bytes::from(format!("event: end\ndata: {data}\n\n")))
    });
    let mut r = Body::from_stream(stream).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(r)
}
