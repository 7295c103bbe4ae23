//! `GET /api/v1/history`: ended jobs, newest end first, from the replicated state and
//! this controller's history store (see [`tranche_controller::history_reads`]), a page at a time.
//!
//! A page ends with a cursor, `<ended_at>.<id>` (the end time in milliseconds since
//! the epoch and the id of its last job); passed back as `before`, it gives the jobs
//! that ended before that one. The same text is the CLI's `--before` and the AWS
//! endpoint's `nextToken` for ended jobs.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use tranche_proto::{EndedJob, HistoryCursor, HistoryFilter, Query, Response as Answer};
use utoipa::{IntoParams, ToSchema};

use super::dto::JobSummaryView;
use super::error::{unexpected, ErrorBody, HttpError};
use super::extract::{Caller, QueryArgs};
use super::Api;

/// Filters and paging of the history.
#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// Only jobs that ended at or after this time (milliseconds since the epoch);
    /// default: every job the history holds.
    pub since: Option<u64>,
    /// Only this user's jobs.
    pub user: Option<String>,
    /// Only this share's jobs.
    pub share: Option<String>,
    /// Only jobs that ended in these states, comma-separated: `SUCCEEDED`, `FAILED`,
    /// `CANCELLED`.
    pub state: Option<String>,
    /// At most this many jobs (1 to 1000; default 100).
    pub limit: Option<u32>,
    /// Only jobs that ended before this cursor (the previous page's `next`).
    pub before: Option<String>,
}

/// An ended job as the history lists it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndedJobView {
    /// The job (`nodes` and `started_at` are those of its last attempt).
    pub job: JobSummaryView,
    /// When it ended, milliseconds since the epoch.
    pub ended_at: u64,
    /// How long its last attempt ran, in milliseconds (absent if it never started).
    pub elapsed_ms: Option<u64>,
    /// The last attempt's exit code, when its process exited with one.
    pub exit_code: Option<i32>,
    /// Why it ended (its last transition's reason).
    pub reason: String,
    /// It has left the controllers' replicated state and is read from the history
    /// store of the controller that answered.
    pub archived: bool,
}

impl From<&EndedJob> for EndedJobView {
    fn from(e: &EndedJob) -> Self {
        EndedJobView {
            job: (&e.job).into(),
            ended_at: e.ended_at,
            elapsed_ms: e.job.started_at.map(|s| e.ended_at.saturating_sub(s)),
            exit_code: e.exit_code,
            reason: e.reason.clone(),
            archived: e.archived,
        }
    }
}

/// A page of ended jobs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HistoryPageView {
    /// Newest end first.
    pub jobs: Vec<EndedJobView>,
    /// Pass as `before` for the next page; `null` on the last page.
    pub next: Option<String>,
}

/// Ended jobs (SUCCEEDED, FAILED, CANCELLED), newest end first: those still in the
/// controllers' state and those that have left it for the history store. Every
/// caller sees every job's summary, as in `/api/v1/jobs`.
#[utoipa::path(get, path = "/api/v1/history", tag = "jobs", params(HistoryQuery),
    responses(
        (status = 200, body = HistoryPageView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn history(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<HistoryQuery>,
) -> Result<Json<HistoryPageView>, HttpError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=tranche_proto::MAX_HISTORY_PAGE).contains(&limit) {
        return Err(HttpError::invalid(
            "limit",
            format!("must be 1 to {}", tranche_proto::MAX_HISTORY_PAGE),
        ));
    }
    let status = match &q.state {
        Some(s) => {
            tranche_proto::parse_ended_states(s).map_err(|e| HttpError::invalid("state", e))?
        }
        None => vec![],
    };
    let before = match &q.before {
        Some(b) => Some(HistoryCursor::parse(b).map_err(|e| HttpError::invalid("before", e))?),
        None => None,
    };
    let filter = HistoryFilter {
        since: q.since,
        user: q.user.as_deref().map(Into::into),
        share: q.share.as_deref().map(Into::into),
        status,
        limit,
        before,
    };
    match api.read(&caller, Query::History(filter)).await? {
        Answer::History(p) => Ok(Json(HistoryPageView {
            jobs: p.jobs.iter().map(Into::into).collect(),
            next: p.next.as_ref().map(HistoryCursor::text),
        })),
        other => Err(unexpected(&other)),
    }
}
