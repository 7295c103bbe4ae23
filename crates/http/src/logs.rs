//! `GET /api/v1/jobs/{id}/logs`: a job's output, fetched by this controller from the
//! agent of the node it ran on (over the agents' log port, with the controller's
//! certificate) and streamed back; with `?follow=1`, until the attempt ends.
//!
//! The caller is checked here as the agent checks a direct reader: admins and
//! operators read any job's output, a user only its own.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};

/// How many chunks of a job's output wait, at most, for a slow HTTP reader.
const RELAY_CHUNKS: usize = 16;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tokio::sync::mpsc;
use tranche_client::ClientError;
use tranche_model::{Attempt, Job, NodeName};
use tranche_proto::{ApiError, LogRequest, Query, Response as Answer, LOGS_LABEL};
use utoipa::{IntoParams, ToSchema};

use super::error::{unexpected, ErrorBody, HttpError};
use super::extract::{job_id, Caller, QueryArgs};
use super::Api;

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// `1` (or `true`): keep streaming until the attempt ends.
    pub follow: Option<String>,
    /// `1` (or `true`): stderr instead of stdout.
    pub stderr: Option<String>,
    /// Which attempt (default: the latest).
    pub attempt: Option<u32>,
    /// For a job on several nodes: which member's output, by node name or rank
    /// (default: rank 0).
    pub node: Option<String>,
}

fn flag(name: &str, v: &Option<String>) -> Result<bool, HttpError> {
    match v.as_deref().map(str::trim) {
        None => Ok(false),
        Some("1" | "true" | "yes" | "") => Ok(true),
        Some("0" | "false" | "no") => Ok(false),
        Some(other) => Err(HttpError::invalid(
            name,
            format!("`{other}` is not a flag; use 1 or 0"),
        )),
    }
}

/// A job's output as it was written: bytes, not JSON.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/logs", tag = "jobs",
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42"), LogsQuery),
    responses(
        (status = 200, description = "The output; chunked and open until the attempt ends with follow", content_type = "application/octet-stream", body = String),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn logs(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
    QueryArgs(q): QueryArgs<LogsQuery>,
    headers: axum::http::HeaderMap,
    peer: Option<axum::Extension<super::Peer>>,
) -> Result<Response, HttpError> {
    let lease = super::Lease::of(&api, &headers, peer.as_deref());
    let id = job_id(&id)?;
    let follow = flag("follow", &q.follow)?;
    let stderr = flag("stderr", &q.stderr)?;
    let job = match api.read(&caller, Query::Job(id)).await? {
        Answer::Job(j) => j,
        other => return Err(unexpected(&other)),
    };
    tranche_controller::service::may_read_output(&caller.who, &job)?;
    let attempt = match q.attempt {
        Some(n) => job.attempts.iter().find(|a| a.number == n).ok_or_else(|| {
            HttpError::not_found(format!("job {id} has no attempt {n}")).with_field("attempt")
        })?,
        None => job.attempts.last().ok_or_else(|| {
            HttpError::not_found(format!("job {id} has not run yet: {}", job.status.as_str()))
        })?,
    };
    let (client, addr, node) = output_source(&api, &job, attempt, q.node.as_deref()).await?;
    let req = LogRequest {
        job: job.id,
        attempt: Some(attempt.number),
        stderr,
        follow,
        offset: 0,
    };
    // A bounded channel: when the HTTP client reads slower than the job writes, the
    // relay stops reading from the agent (QUIC flow control holds the agent back), so
    // at most RELAY_CHUNKS chunks wait here per reader.
    let (tx, mut rx) = mpsc::channel::<Result<Bytes, ApiError>>(RELAY_CHUNKS);
    tokio::spawn(async move {
        let sink_tx = tx.clone();
        let r = client
            .logs_paced(addr, node.as_str(), &req, |b| {
                let sink_tx = sink_tx.clone();
                async move { sink_tx.send(Ok(Bytes::from(b))).await.is_ok() }
            })
            .await;
        if let Err(e) = r {
            let e = match e {
                ClientError::Api(e) => e,
                other => ApiError::Unavailable(format!("node {node}'s agent: {other}")),
            };
            let _ = tx.send(Err(e)).await;
        }
    });
    // The first piece decides the status: an error before any output is an error
    // answer; after output has gone out, the stream just ends.
    let first = match rx.recv().await {
        None => Bytes::new(),
        Some(Err(e)) => return Err(e.into()),
        Some(Ok(b)) => b,
    };
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Some(Ok(b)) => Some((Ok::<Bytes, std::io::Error>(b), rx)),
            _ => None,
        }
    });
    let stream = futures_util::StreamExt::chain(
        futures_util::stream::iter([Ok::<Bytes, std::io::Error>(first)]),
        rest,
    );
    // A followed log ends when the token it was opened with expires or is revoked.
    let stream = lease.keep(Box::pin(stream), |_| None);
    let mut r = (StatusCode::OK, Body::from_stream(stream)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(r)
}

/// Where the output of `attempt` of `job` is read from: the client of the agents' log
/// ports, the address of the log port of the node it ran on, and that node. `node`
/// picks a member of a job on several nodes by node name or rank (default: rank 0).
/// The caller must have checked that it may read the job's output.
pub async fn output_source(
    api: &Api,
    job: &Job,
    attempt: &Attempt,
    node: Option<&str>,
) -> Result<(Arc<tranche_client::Client>, std::net::SocketAddr, NodeName), HttpError> {
    let members: Vec<_> = attempt.allocation.iter().map(|a| a.node.clone()).collect();
    let node = match node {
        None => members.first().cloned(),
        Some(n) => members
            .iter()
            .find(|m| m.as_str() == n)
            .cloned()
            .or_else(|| {
                n.parse::<usize>()
                    .ok()
                    .and_then(|r| members.get(r).cloned())
            }),
    }
    .ok_or_else(|| {
        HttpError::not_found(format!(
            "attempt {} of job {} did not run on {}",
            attempt.number,
            job.job_ref(),
            node.unwrap_or("any node")
        ))
        .with_field("node")
    })?;
    let addr = {
        let sh = api.shared.read().unwrap();
        sh.state
            .nodes
            .get(&node)
            .and_then(|n| n.inventory.labels.get(LOGS_LABEL))
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
    }
    .ok_or_else(|| {
        HttpError::unavailable(format!(
            "node {node} publishes no log port (label {LOGS_LABEL})"
        ))
    })?;
    let client = api
        .logs_client
        .get_or_try_init(|| async {
            tranche_client::Client::new(vec![api.client_addr], &api.tls)
                .map(Arc::new)
                .map_err(|e| {
                    HttpError::unavailable(format!("cannot reach the agents' log ports: {e}"))
                })
        })
        .await?
        .clone();
    Ok((client, addr, node))
}
