//! The handlers of `/api/v1/`: each turns its request into the service layer's
//! request with the caller's identity, and the answer into the API's JSON.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use tranche_model::policy_file;
use tranche_model::{JobId, JobRef, JobStatus, NodeName};
use tranche_proto::{ClientCommand, ClientRequest, JobFilter, Outcome, Query, Response as Answer};
use utoipa::{IntoParams, ToSchema};

use super::dto::*;
use super::error::{unexpected, ErrorBody, HttpError};
use super::extract::{job_id, Caller, JsonBody, OptionalJson, QueryArgs, Via};
use super::Api;
use tranche_controller::mailbox::wall_ms;

type Result<T> = std::result::Result<T, HttpError>;

/// The `/api/v1/` routes (the OpenAPI document's own route aside: see [`crate::router`]).
pub(crate) fn routes() -> Router<Arc<Api>> {
    Router::new()
        .route("/api/v1/health", get(health))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/jobs", get(list_jobs).post(submit))
        .route("/api/v1/jobs/{id}", get(get_job).patch(update_job))
        .route("/api/v1/jobs/{id}/cancel", post(cancel_job))
        .route("/api/v1/jobs/{id}/hold", post(hold_job))
        .route("/api/v1/jobs/{id}/release", post(release_job))
        .route("/api/v1/jobs/{id}/explain", get(explain_job))
        .route("/api/v1/jobs/{id}/logs", get(super::logs::logs))
        .route("/api/v1/history", get(super::history::history))
        .route("/api/v1/shares", get(shares))
        .route("/api/v1/groups", get(groups))
        .route("/api/v1/groups/{name}", delete(delete_group))
        .route("/api/v1/queue", get(queue))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/nodes/{name}/drain", post(drain))
        .route("/api/v1/nodes/{name}/resume", post(resume))
        .route("/api/v1/controllers", get(controllers))
        .route("/api/v1/policy", post(apply_policy))
        .route("/api/v1/events", get(super::stream::events))
}

/// What every answer carries: not to be sniffed as another type, and a policy that
/// lets nothing load from it (the dashboard's pages set their own).
const NOSNIFF: HeaderValue = HeaderValue::from_static("nosniff");
const API_CSP: HeaderValue =
    HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'; form-action 'none'");

/// Refuses, on `/api/v1/`, the requests that a page of another site could make a
/// browser send with the credentials it holds (a client certificate): any request
/// whose `Origin` is not this host, and a change (`POST`, `PUT`, `PATCH`, `DELETE`)
/// not sent as `Content-Type: application/json` (which a cross-site form or simple
/// request cannot set), even with an empty body. Marks every answer `nosniff` with a
/// restrictive content security policy.
pub(crate) async fn guard(req: axum::extract::Request, next: Next) -> Response {
    let refused = if req.uri().path().starts_with("/api/v1/") {
        same_site_json(&req).err()
    } else {
        None
    };
    let mut r = match refused {
        Some(e) => e.into_response(),
        None => next.run(req).await,
    };
    let h = r.headers_mut();
    h.entry(header::X_CONTENT_TYPE_OPTIONS).or_insert(NOSNIFF);
    h.entry(header::CONTENT_SECURITY_POLICY).or_insert(API_CSP);
    r
}

fn same_site_json(req: &axum::extract::Request) -> Result<()> {
    let h = req.headers();
    if let Some(origin) = h.get(header::ORIGIN) {
        let host = h
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()));
        let text = origin.to_str().unwrap_or("");
        let same = text
            .strip_prefix("https://")
            .zip(host)
            .is_some_and(|(o, h)| o.eq_ignore_ascii_case(h));
        if !same {
            return Err(HttpError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "a request from another site (Origin `{text}`) is refused; this API \
                     answers pages of https://{} only",
                    host.unwrap_or("this host")
                ),
            ));
        }
    }
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let json = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if changes && !json {
        let got = h
            .get(header::CONTENT_TYPE)
            .map(|v| format!("`{}`", v.to_str().unwrap_or("?")))
            .unwrap_or_else(|| "none".into());
        return Err(HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "a {} must be sent with Content-Type: application/json, even with an empty \
                 body (got {got})",
                req.method()
            ),
        )
        .with_field("Content-Type"));
    }
    Ok(())
}

pub(crate) async fn not_found() -> HttpError {
    HttpError::not_found("no such API path; see /api/v1/openapi.json")
}

pub(crate) async fn method_not_allowed() -> HttpError {
    HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not take that method; see /api/v1/openapi.json",
    )
}

impl Api {
    /// A linearizable read as `who`.
    pub(super) async fn read(&self, who: &Caller, query: Query) -> Result<Answer> {
        let req = ClientRequest::Read {
            query,
            stale: false,
        };
        match self.service.handle(&who.who, req).await {
            Answer::Error(e) => Err(e.into()),
            a => Ok(a),
        }
    }

    /// A write as `who`: authorized by the service layer, then replicated (forwarded
    /// to the leader when this controller does not lead).
    pub(super) async fn write(&self, who: &Caller, command: ClientCommand) -> Result<Outcome> {
        let req = ClientRequest::Write {
            request: None,
            command,
        };
        match self.service.handle(&who.who, req).await {
            Answer::Applied(o) => Ok(o),
            Answer::Error(e) => Err(e.into()),
            other => Err(unexpected(&other)),
        }
    }
}

/// Whether this controller serves, and whether the cluster has a leader.
#[utoipa::path(get, path = "/api/v1/health", tag = "cluster", security(()),
    responses(
        (status = 200, description = "Serving, with a leader", body = Health),
        (status = 503, description = "No leader (an election is under way); retry after the Retry-After header's seconds", body = ErrorBody),
    ))]
pub async fn health(State(api): State<Arc<Api>>) -> Response {
    let (id, leader, applied) = {
        let sh = api.shared.read().unwrap();
        (sh.status.id, sh.status.leader, sh.applied)
    };
    match leader {
        Some(_) => Json(Health {
            status: "ok".into(),
            id,
            leader,
            applied,
        })
        .into_response(),
        None => HttpError::unavailable("no leader: an election is under way").into_response(),
    }
}

/// The caller's identity as the API sees it (certificate or token).
#[utoipa::path(get, path = "/api/v1/whoami", tag = "cluster",
    responses(
        (status = 200, body = WhoAmI),
        (status = 401, body = ErrorBody),
    ))]
pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    let (via, expires) = match caller.via {
        Via::Certificate => ("certificate", None),
        Via::Token { expires } => ("token", Some(expires)),
    };
    Json(WhoAmI {
        role: caller.who.role.to_string(),
        name: caller.who.name.clone(),
        via: via.into(),
        expires,
    })
}

/// Filters and paging of a job list.
#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct JobsQuery {
    /// Only this share's jobs.
    pub share: Option<String>,
    /// Only this user's jobs.
    pub user: Option<String>,
    /// Only jobs in these states, comma-separated (e.g. `RUNNING,RUNNABLE`).
    pub state: Option<String>,
    /// At most this many jobs (1 to 1000; default 100).
    pub limit: Option<u32>,
    /// Only jobs with a higher id (the previous page's `next_after`).
    pub after: Option<u64>,
    /// Only the tasks of this array (its id).
    pub array: Option<u64>,
}

fn parse_states(text: &str) -> Result<Vec<JobStatus>> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            JobStatus::parse(s.trim()).ok_or_else(|| {
                HttpError::invalid(
                    "state",
                    format!(
                        "`{}` is not a job state; use {}",
                        s.trim(),
                        JobStatus::ALL.map(|s| s.as_str()).join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// Jobs, lowest ids first, filtered and paged.
#[utoipa::path(get, path = "/api/v1/jobs", tag = "jobs", params(JobsQuery),
    responses(
        (status = 200, body = JobPage),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn list_jobs(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<JobsQuery>,
) -> Result<Json<JobPage>> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(HttpError::invalid("limit", "must be 1 to 1000"));
    }
    let filter = JobFilter {
        share: q.share.as_deref().map(Into::into),
        user: q.user.as_deref().map(Into::into),
        status: match &q.state {
            Some(s) => parse_states(s)?,
            None => vec![],
        },
        // One more than the page, to know whether another follows.
        limit: Some(limit + 1),
        array: q.array.map(JobId),
        standing: false,
    };
    let after = JobId(q.after.unwrap_or(0));
    let mut found = api.service.jobs_after(&caller.who, filter, after).await?;
    let more = found.len() > limit as usize;
    found.truncate(limit as usize);
    let jobs: Vec<JobSummaryView> = found.iter().map(Into::into).collect();
    let next_after = if more {
        jobs.last().map(|j| j.id)
    } else {
        None
    };
    Ok(Json(JobPage { jobs, next_after }))
}

/// Submits a job. With a `client_token` a retry returns the same job.
#[utoipa::path(post, path = "/api/v1/jobs", tag = "jobs", request_body = SubmitJob,
    responses(
        (status = 201, description = "Submitted", body = Submitted),
        (status = 200, description = "The client token was seen: the first submit's job", body = Submitted),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn submit(
    State(api): State<Arc<Api>>,
    caller: Caller,
    JsonBody(body): JsonBody<SubmitJob>,
) -> Result<Response> {
    // The share's defaults (queue, unit) from this controller's applied state; the
    // state machine checks the submit against the current share whatever was read.
    let mut share = {
        let sh = api.shared.read().unwrap();
        sh.state.shares.get(&body.share.as_str().into()).cloned()
    };
    if share.is_none() {
        // This controller may not have applied the share's creation yet: ask again,
        // linearizably, before calling it missing.
        if let Answer::Objects(o) = api.read(&caller, Query::Objects).await? {
            share = o.shares.into_iter().find(|s| s.name.as_str() == body.share);
        }
    }
    let spec = body.into_spec(&caller.who.name, share.as_ref())?;
    match api.write(&caller, ClientCommand::Submit(spec)).await? {
        Outcome::Submitted { job, existing } => {
            let status = if existing {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            Ok((
                status,
                Json(Submitted {
                    id: job.0,
                    existing,
                }),
            )
                .into_response())
        }
        _ => Err(HttpError::unavailable(
            "the submit's answer was not a job id; retry with the same client_token",
        )),
    }
}

async fn job_view(api: &Api, caller: &Caller, id: JobRef) -> Result<JobView> {
    match api.read(caller, Query::Job(id)).await? {
        Answer::Job(j) => {
            let sh = api.shared.read().unwrap();
            let now = wall_ms().max(sh.last_now);
            let mut v = JobView::of(&j, now);
            // A job the state no longer holds was read from the history store.
            v.archived = !sh.state.jobs.contains_key(&j.id);
            Ok(v)
        }
        other => Err(unexpected(&other)),
    }
}

/// Everything about one job: its spec, attempts and transitions with reasons.
#[utoipa::path(get, path = "/api/v1/jobs/{id}", tag = "jobs",
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42 (for a change, `42` is every task of array 42)")),
    responses(
        (status = 200, body = JobView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn get_job(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>> {
    Ok(Json(job_view(&api, &caller, job_id(&id)?).await?))
}

/// Changes a waiting or running job's priority.
#[utoipa::path(patch, path = "/api/v1/jobs/{id}", tag = "jobs", request_body = JobUpdate,
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42 (for a change, `42` is every task of array 42)")),
    responses(
        (status = 200, description = "The job after the change", body = JobView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn update_job(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<JobUpdate>,
) -> Result<Json<JobView>> {
    let job = job_id(&id)?;
    if body.priority > tranche_model::MAX_JOB_PRIORITY {
        return Err(HttpError::invalid(
            "priority",
            format!("must be 0 to {}", tranche_model::MAX_JOB_PRIORITY),
        ));
    }
    api.write(
        &caller,
        ClientCommand::UpdatePriority {
            job,
            priority: body.priority,
        },
    )
    .await?;
    Ok(Json(job_view(&api, &caller, job).await?))
}

/// Cancels a job; a running one gets its checkpoint signal and grace first.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/cancel", tag = "jobs", request_body(content = Option<CancelJob>),
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42 (for a change, `42` is every task of array 42)")),
    responses(
        (status = 200, description = "The job after the cancel", body = JobView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn cancel_job(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<CancelJob>,
) -> Result<Json<JobView>> {
    let job = job_id(&id)?;
    let reason = body
        .reason
        .unwrap_or_else(|| format!("cancelled by {}", caller.who));
    api.write(&caller, ClientCommand::Cancel { job, reason })
        .await?;
    Ok(Json(job_view(&api, &caller, job).await?))
}

/// Holds a waiting job (or every waiting task of an array): it stays PENDING until
/// released.
#[utoipa::path(post, path = "/api/v1/jobs/{id}/hold", tag = "jobs",
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42 (for a change, `42` is every task of array 42)")),
    responses(
        (status = 200, description = "The job after the hold", body = JobView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn hold_job(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>> {
    let job = job_id(&id)?;
    api.write(&caller, ClientCommand::Hold { job }).await?;
    Ok(Json(job_view(&api, &caller, job).await?))
}

/// Releases a held job (or every held task of an array).
#[utoipa::path(post, path = "/api/v1/jobs/{id}/release", tag = "jobs",
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42 (for a change, `42` is every task of array 42)")),
    responses(
        (status = 200, description = "The job after the release", body = JobView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn release_job(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobView>> {
    let job = job_id(&id)?;
    api.write(&caller, ClientCommand::Release { job }).await?;
    Ok(Json(job_view(&api, &caller, job).await?))
}

/// Why a job is where it is, with numbers.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/explain", tag = "jobs",
    params(("id" = String, Path, description = "The job: `42`, or `42_7` for task 7 of array 42 (for a change, `42` is every task of array 42)")),
    responses(
        (status = 200, body = ExplanationView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn explain_job(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ExplanationView>> {
    match api.read(&caller, Query::Explain(job_id(&id)?)).await? {
        Answer::Explain(e) => Ok(Json((&e).into())),
        other => Err(unexpected(&other)),
    }
}

/// Per quota share: strategy, max, used, lent, borrowed, running, waiting.
#[utoipa::path(get, path = "/api/v1/shares", tag = "cluster",
    responses(
        (status = 200, body = Vec<ShareView>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn shares(State(api): State<Arc<Api>>, caller: Caller) -> Result<Json<Vec<ShareView>>> {
    match api.read(&caller, Query::Shares).await? {
        Answer::Shares(s) => Ok(Json(s.iter().map(Into::into).collect())),
        other => Err(unexpected(&other)),
    }
}

/// The groups of quota shares (nested quotas): each one's queue, members, strategy and
/// limits (see the design's "Nested shares").
#[utoipa::path(get, path = "/api/v1/groups", tag = "cluster",
    responses(
        (status = 200, body = Vec<GroupView>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn groups(State(api): State<Arc<Api>>, caller: Caller) -> Result<Json<Vec<GroupView>>> {
    match api.read(&caller, Query::Groups).await? {
        Answer::Groups(g) => Ok(Json(g.iter().map(Into::into).collect())),
        other => Err(unexpected(&other)),
    }
}

/// Deletes a group of shares (admins); its members are then in no group. A group
/// another group lists is refused (409) until taken out of it.
#[utoipa::path(delete, path = "/api/v1/groups/{name}", tag = "cluster",
    params(("name" = String, Path, description = "The group's name")),
    responses(
        (status = 200, body = Done),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn delete_group(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Done>> {
    let group = tranche_model::ShareName::from(name.as_str());
    group
        .validate("name")
        .map_err(|v| HttpError::invalid(v.field, v.rule))?;
    api.write(&caller, ClientCommand::DeleteGroup(group))
        .await?;
    Ok(Json(Done { done: true }))
}

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QueueQuery {
    /// At most this many jobs in the front and per share (1 to 1000; default 20).
    pub limit: Option<u32>,
}

/// The front of the queue and of every share, in the order the scheduler considers them.
#[utoipa::path(get, path = "/api/v1/queue", tag = "cluster", params(QueueQuery),
    responses(
        (status = 200, body = QueueView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn queue(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<QueueQuery>,
) -> Result<Json<QueueView>> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=1000).contains(&limit) {
        return Err(HttpError::invalid("limit", "must be 1 to 1000"));
    }
    match api.read(&caller, Query::Queue { limit }).await? {
        Answer::Queue(q) => Ok(Json((&q).into())),
        other => Err(unexpected(&other)),
    }
}

/// Nodes, their state and GPUs.
#[utoipa::path(get, path = "/api/v1/nodes", tag = "nodes",
    responses(
        (status = 200, body = Vec<NodeView>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn nodes(State(api): State<Arc<Api>>, caller: Caller) -> Result<Json<Vec<NodeView>>> {
    match api.read(&caller, Query::Nodes).await? {
        Answer::Nodes(n) => Ok(Json(n.iter().map(Into::into).collect())),
        other => Err(unexpected(&other)),
    }
}

/// The answer to a drain or resume.
#[derive(Debug, Clone, serde::Serialize, ToSchema)]
pub struct Done {
    pub done: bool,
}

fn node_name(text: &str) -> Result<NodeName> {
    let n = NodeName::from(text);
    n.validate("name")
        .map_err(|v| HttpError::invalid(v.field, v.rule))?;
    Ok(n)
}

/// Drains a node: nothing new is placed there; with `now`, its jobs are stopped too.
#[utoipa::path(post, path = "/api/v1/nodes/{name}/drain", tag = "nodes", request_body = DrainNode,
    params(("name" = String, Path, description = "The node's name")),
    responses(
        (status = 200, body = Done),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn drain(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<DrainNode>,
) -> Result<Json<Done>> {
    let node = node_name(&name)?;
    if body.reason.trim().is_empty() {
        return Err(HttpError::invalid("reason", "a drain needs a reason"));
    }
    api.write(
        &caller,
        ClientCommand::DrainNode {
            node,
            reason: body.reason,
            now: body.now,
        },
    )
    .await?;
    Ok(Json(Done { done: true }))
}

/// Puts a drained node back in service.
#[utoipa::path(post, path = "/api/v1/nodes/{name}/resume", tag = "nodes",
    params(("name" = String, Path, description = "The node's name")),
    responses(
        (status = 200, body = Done),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn resume(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Done>> {
    let node = node_name(&name)?;
    api.write(&caller, ClientCommand::ResumeNode { node })
        .await?;
    Ok(Json(Done { done: true }))
}

/// The controllers: members, leader, term, commit and applied index, lag.
#[utoipa::path(get, path = "/api/v1/controllers", tag = "cluster",
    responses(
        (status = 200, body = ControllersView),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn controllers(
    State(api): State<Arc<Api>>,
    caller: Caller,
) -> Result<Json<ControllersView>> {
    match api.read(&caller, Query::Controllers).await? {
        Answer::Controllers(c) => Ok(Json((&c).into())),
        other => Err(unexpected(&other)),
    }
}

/// Creates or updates environments, policies, queues, shares and groups from a policy
/// file, in that order, idempotently; with `dry_run`, only says what would change.
#[utoipa::path(post, path = "/api/v1/policy", tag = "cluster", request_body = ApplyPolicy,
    responses(
        (status = 200, body = PolicyResult),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn apply_policy(
    State(api): State<Arc<Api>>,
    caller: Caller,
    JsonBody(body): JsonBody<ApplyPolicy>,
) -> Result<Json<PolicyResult>> {
    if caller.who.role != tranche_tls::Role::Admin {
        return Err(HttpError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "{}: only an admin certificate may manage environments, policies, queues, shares and groups",
                caller.who
            ),
        ));
    }
    let file = policy_file::parse(&body.toml).map_err(|e| HttpError::invalid("toml", e))?;
    let cmds = tranche_proto::policy::commands(file);
    let objects = match api.read(&caller, Query::Objects).await? {
        Answer::Objects(o) => o,
        other => return Err(unexpected(&other)),
    };
    let groups = if tranche_proto::policy::has_groups(&cmds) {
        match api.read(&caller, Query::Groups).await? {
            Answer::Groups(g) => g,
            other => return Err(unexpected(&other)),
        }
    } else {
        vec![]
    };
    // Rules the state machine would refuse half-way are checked first, so that a file
    // that breaks them changes nothing.
    for (_, name, cmd) in &cmds {
        if let ClientCommand::PutShare(s) = cmd {
            if let Some(old) = objects.shares.iter().find(|x| x.name == s.name) {
                if old.queue != s.queue {
                    return Err(HttpError::new(
                        StatusCode::CONFLICT,
                        "conflict",
                        format!(
                            "share {name}: field `queue`: it belongs to queue {}; a share cannot move to another queue (nothing was changed)",
                            old.queue
                        ),
                    )
                    .with_field("toml"));
                }
            }
        }
    }
    let mut changes = Vec::new();
    let mut done: Vec<String> = Vec::new();
    for (kind, name, cmd) in cmds {
        let action = match tranche_proto::policy::compare(&cmd, &objects, &groups) {
            Some(true) => "unchanged",
            Some(false) => "update",
            None => "create",
        };
        if action != "unchanged" && !body.dry_run {
            if let Err(mut e) = api.write(&caller, cmd).await {
                let before = if done.is_empty() {
                    "nothing was changed".to_string()
                } else {
                    format!("already applied: {}", done.join(", "))
                };
                e.body.error.message = format!(
                    "{kind} {name}: {} (stopped here; {before})",
                    e.body.error.message
                );
                return Err(e);
            }
            done.push(format!("{kind} {name}"));
        }
        changes.push(PolicyChange {
            kind: kind.into(),
            name,
            action: action.into(),
        });
    }
    Ok(Json(PolicyResult {
        dry_run: body.dry_run,
        changes,
    }))
}
