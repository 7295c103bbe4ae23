//! The reads the web dashboard needs beyond the rest of `/api/v1/`, each a summary
//! bounded in size however many jobs the state holds: the accounting report (as
//! `tranche report --json` has it), the ledger's hours for a chart, waiting jobs with
//! their positions and estimated starts, every GPU with what holds it, and the
//! preemptions (who took from whom).
//!
//! Each handler first makes the service layer's linearizable read with the caller's
//! identity (so the same authorization and the same read barrier apply), then, where
//! that read's answer does not carry what is needed, looks at this controller's
//! applied state, which the barrier has brought up to date.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tranche_model::{AttemptEnd, Estimate, Job, JobId, JobStatus, Millis, Standing, StopKind};
use tranche_proto::{GpuTimes, Query, Response as Answer};
use tranche_state::ledger::{Bucket, HOUR_MS};
use utoipa::{IntoParams, OpenApi, ToSchema};

use super::dto::JobSummaryView;
use super::error::{unexpected, ErrorBody, HttpError};
use super::extract::{job_id, Caller, QueryArgs};
use super::Api;
use tranche_controller::mailbox::wall_ms;

type Result<T> = std::result::Result<T, HttpError>;

/// The most hours one ledger read returns: 31 days.
pub const MAX_HOURS: u64 = 31 * 24;

pub fn router() -> Router<Arc<Api>> {
    Router::new()
        .route("/api/v1/report", get(report))
        .route("/api/v1/ledger/hours", get(ledger_hours))
        .route("/api/v1/queue/standing", get(queue_standing))
        .route("/api/v1/jobs/{id}/standing", get(job_standing))
        .route("/api/v1/gpus", get(gpus))
        .route("/api/v1/preemptions", get(preemptions))
}

#[derive(OpenApi)]
#[openapi(
    paths(report, ledger_hours, queue_standing, job_standing, gpus, preemptions),
    components(schemas(
        Figures,
        ReportRow,
        ReportView,
        HourShare,
        HourView,
        LedgerHoursView,
        StandingView,
        StandingJob,
        ShareStanding,
        QueueStandingView,
        GpuCell,
        NodeGpus,
        JobBrief,
        PreemptionView,
        PreemptionsView,
    ))
)]
pub struct DashDoc;

fn now_of(api: &Api) -> Millis {
    wall_ms().max(api.shared.read().unwrap().last_now)
}

/// A range of the ledger: `to` defaults to now and ends there at the latest (time to
/// come would be counted at today's rates, hour by hour, as far as it was asked);
/// `from` defaults to `default_from(to)` and must come before `to`.
fn range(
    api: &Api,
    from: Option<Millis>,
    to: Option<Millis>,
    default_from: impl Fn(Millis) -> Millis,
) -> Result<(Millis, Millis)> {
    let now = now_of(api);
    let to = to.unwrap_or(now).min(now);
    let from = from.unwrap_or_else(|| default_from(to));
    if to <= from {
        return Err(HttpError::invalid(
            "to",
            "must be after `from`, which must be before now",
        ));
    }
    Ok((from, to))
}

fn gpu_h(ms: u64) -> f64 {
    ms as f64 / HOUR_MS as f64
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The ledger's figures of one row.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Figures {
    /// GPU time within the share's max.
    pub used: f64,
    /// GPU time above the share's max.
    pub borrowed: f64,
    /// Of the share's idle max, what others used.
    pub lent: f64,
    /// A RESERVE share's max that it did not use.
    pub reserved_idle: f64,
    /// Run time of attempts stopped by a reclaim.
    pub lost_reclaim: f64,
    /// Run time of attempts preempted within their share.
    pub lost_in_share: f64,
    /// Run time of attempts stopped by a drain.
    pub lost_drain: f64,
    /// Of the three lost figures, the work since each attempt's last checkpoint.
    pub work_lost: f64,
}

impl Figures {
    fn of(t: &GpuTimes, f: impl Fn(u64) -> f64) -> Figures {
        Figures {
            used: f(t.used),
            borrowed: f(t.borrowed),
            lent: f(t.lent),
            reserved_idle: f(t.reserved_idle),
            lost_reclaim: f(t.lost_reclaim),
            lost_in_share: f(t.lost_in_share),
            lost_drain: f(t.lost_drain),
            work_lost: f(t.work_lost),
        }
    }
}

/// One row of the report: a share and unit, a user and unit, or a unit.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReportRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub unit: String,
    /// GPU-hours.
    pub gpu_hours: Figures,
    /// Percentages of the unit's capacity over the range.
    pub percent_of_capacity: Figures,
}

/// The accounting over a range, as `tranche report --json` prints it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReportView {
    /// The range, milliseconds since the epoch; whole hours that overlap it count.
    pub from: u64,
    pub to: u64,
    /// Since when the ledger counts (0: nothing counted yet).
    pub counting_since: u64,
    /// `share`, `user` or `unit`.
    pub by: String,
    /// GPU-hours of capacity per unit over the range.
    pub capacity_gpu_hours: BTreeMap<String, f64>,
    pub rows: Vec<ReportRow>,
}

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReportQuery {
    /// From, milliseconds since the epoch (default 0: since the ledger began).
    pub from: Option<u64>,
    /// Until, milliseconds since the epoch (default, and at most: now).
    pub to: Option<u64>,
    /// Rows per `share` (and unit; the default), per `user` (and unit), or per `unit`.
    pub by: Option<String>,
}

/// The accounting ledger over a range, in GPU-hours with percentages of capacity.
#[utoipa::path(get, path = "/api/v1/report", tag = "cluster", params(ReportQuery),
    responses(
        (status = 200, body = ReportView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn report(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<ReportQuery>,
) -> Result<Json<ReportView>> {
    let by = q.by.as_deref().unwrap_or("share");
    if !matches!(by, "share" | "user" | "unit") {
        return Err(HttpError::invalid(
            "by",
            format!("`{by}` is not a grouping; use share, user or unit"),
        ));
    }
    let (from, to) = range(&api, q.from, q.to, |_| 0)?;
    let r = match api
        .read(&caller, Query::Report { from, to: Some(to) })
        .await?
    {
        Answer::Report(r) => r,
        other => return Err(unexpected(&other)),
    };
    let b = &r.totals;
    let cap = |u: &str| {
        b.capacity
            .get(&tranche_model::Unit::from(u))
            .copied()
            .unwrap_or(0)
    };
    let row = |share: Option<String>, user: Option<String>, unit: String, t: &GpuTimes| {
        let c = cap(&unit);
        ReportRow {
            share,
            user,
            unit,
            gpu_hours: Figures::of(t, gpu_h),
            percent_of_capacity: Figures::of(t, |v| percent(v, c)),
        }
    };
    let rows = match by {
        "share" => b
            .shares
            .iter()
            .map(|((s, u), t)| row(Some(s.to_string()), None, u.to_string(), t))
            .collect(),
        "user" => b
            .users
            .iter()
            .map(|((s, u), t)| row(None, Some(s.to_string()), u.to_string(), t))
            .collect(),
        _ => b
            .by_unit()
            .iter()
            .map(|(u, t)| row(None, None, u.to_string(), t))
            .collect(),
    };
    Ok(Json(ReportView {
        from: r.from,
        to: r.to,
        counting_since: r.counting_since,
        by: by.into(),
        capacity_gpu_hours: b
            .capacity
            .iter()
            .map(|(u, v)| (u.to_string(), gpu_h(*v)))
            .collect(),
        rows,
    }))
}

/// A share's figures in one hour, as average GPUs over the hour (over the part of it
/// that was counted, for the first hour and the one under way).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HourShare {
    pub share: String,
    pub unit: String,
    pub used: f64,
    pub borrowed: f64,
    pub lent: f64,
    pub reserved_idle: f64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HourView {
    /// The hour's start, milliseconds since the epoch.
    pub start: u64,
    /// Average GPUs of capacity per unit over the hour.
    pub capacity: BTreeMap<String, f64>,
    pub shares: Vec<HourShare>,
}

/// The ledger hour by hour.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LedgerHoursView {
    pub from: u64,
    pub to: u64,
    pub counting_since: u64,
    /// The hours in the range that have figures, oldest first.
    pub hours: Vec<HourView>,
}

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HoursQuery {
    /// From, milliseconds since the epoch (default: 24 hours before `to`).
    pub from: Option<u64>,
    /// Until, milliseconds since the epoch (default, and at most: now).
    pub to: Option<u64>,
}

/// The ledger's hourly figures per share and unit over at most 31 days, as average
/// GPUs held in each hour (the hour under way counted up to now).
#[utoipa::path(get, path = "/api/v1/ledger/hours", tag = "cluster", params(HoursQuery),
    responses(
        (status = 200, body = LedgerHoursView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn ledger_hours(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<HoursQuery>,
) -> Result<Json<LedgerHoursView>> {
    let (from, to) = range(&api, q.from, q.to, |to| to.saturating_sub(24 * HOUR_MS))?;
    if to.div_ceil(HOUR_MS) - from / HOUR_MS > MAX_HOURS {
        return Err(HttpError::invalid(
            "from",
            format!("at most {MAX_HOURS} hours (31 days) in one read"),
        ));
    }
    // The report read is the barrier and the authorization; the hours come from the
    // applied state it waited for.
    let r = match api
        .read(&caller, Query::Report { from, to: Some(to) })
        .await?
    {
        Answer::Report(r) => r,
        other => return Err(unexpected(&other)),
    };
    let sh = api.shared.read().unwrap();
    let st = &sh.state;
    let counted = st.ledger.counted_to / HOUR_MS;
    let first = (from / HOUR_MS).max(st.ledger.since / HOUR_MS);
    let mut hours = Vec::new();
    if st.ledger.since > 0 {
        for h in first..to.div_ceil(HOUR_MS) {
            // Hours the ledger has closed are read as they are; the one under way
            // (and any after it) with the time since the last entry added.
            let b: Bucket = if h < counted {
                match st.ledger.hours.get(&h) {
                    Some(b) => b.clone(),
                    None => continue,
                }
            } else {
                st.ledger_between(
                    h * HOUR_MS,
                    ((h + 1) * HOUR_MS).min(to.max(h * HOUR_MS + 1)),
                )
            };
            // Average GPUs over the part of the hour that was counted: the first hour
            // starts when counting began, the one under way ends now.
            let span =
                (((h + 1) * HOUR_MS).min(to)).saturating_sub((h * HOUR_MS).max(st.ledger.since));
            if span == 0 {
                continue;
            }
            let avg = |v: u64| v as f64 / span as f64;
            hours.push(HourView {
                start: h * HOUR_MS,
                capacity: b
                    .capacity
                    .iter()
                    .map(|(u, v)| (u.to_string(), avg(*v)))
                    .collect(),
                shares: b
                    .shares
                    .iter()
                    .map(|((s, u), t)| HourShare {
                        share: s.to_string(),
                        unit: u.to_string(),
                        used: avg(t.used),
                        borrowed: avg(t.borrowed),
                        lent: avg(t.lent),
                        reserved_idle: avg(t.reserved_idle),
                    })
                    .collect(),
            });
        }
    }
    Ok(Json(LedgerHoursView {
        from,
        to: r.to,
        counting_since: r.counting_since,
        hours,
    }))
}

/// A waiting job's place in line and when it may start.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StandingView {
    /// 1-based, among the RUNNABLE jobs of its share.
    pub in_share: u32,
    pub share_waiting: u32,
    /// 1-based, among the RUNNABLE jobs of its queue.
    pub in_queue: u32,
    pub queue_waiting: u32,
    /// `now` (enough GPUs are free), `at` (see `start_at`), or `unknown` (a running
    /// job that would have to end first has no time limit).
    pub start: String,
    /// The estimated start, milliseconds since the epoch, when `start` is `at`.
    pub start_at: Option<u64>,
}

impl From<&Standing> for StandingView {
    fn from(s: &Standing) -> Self {
        let (start, start_at) = match s.start {
            Estimate::Now => ("now", None),
            Estimate::At(t) => ("at", Some(t)),
            Estimate::Unknown => ("unknown", None),
        };
        StandingView {
            in_share: s.in_share,
            share_waiting: s.share_waiting,
            in_queue: s.in_queue,
            queue_waiting: s.queue_waiting,
            start: start.into(),
            start_at,
        }
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StandingJob {
    pub job: JobSummaryView,
    /// Absent unless the job is RUNNABLE.
    pub standing: Option<StandingView>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ShareStanding {
    pub share: String,
    pub jobs: Vec<StandingJob>,
}

/// The front of the queue and of each share, with positions and estimated starts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueStandingView {
    pub front: Vec<StandingJob>,
    pub shares: Vec<ShareStanding>,
    /// Jobs waiting in all (SUBMITTED, PENDING, RUNNABLE).
    pub waiting: u32,
}

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StandingQuery {
    /// At most this many jobs in the front and per share (1 to 1000; default 20).
    pub limit: Option<u32>,
}

/// The front of the queue and of every share, as `/api/v1/queue`, with each job's
/// position in its share and queue and its estimated start.
#[utoipa::path(get, path = "/api/v1/queue/standing", tag = "cluster", params(StandingQuery),
    responses(
        (status = 200, body = QueueStandingView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn queue_standing(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<StandingQuery>,
) -> Result<Json<QueueStandingView>> {
    let limit = q.limit.unwrap_or(20);
    if !(1..=1000).contains(&limit) {
        return Err(HttpError::invalid("limit", "must be 1 to 1000"));
    }
    let queue = match api.read(&caller, Query::Queue { limit }).await? {
        Answer::Queue(q) => q,
        other => return Err(unexpected(&other)),
    };
    let (standings, waiting) = {
        let sh = api.shared.read().unwrap();
        let now = wall_ms().max(sh.last_now);
        let waiting = sh
            .state
            .jobs
            .values()
            .filter(|j| {
                matches!(
                    j.status,
                    JobStatus::Submitted | JobStatus::Pending | JobStatus::Runnable
                )
            })
            .count() as u32;
        (api.service.standings(&sh, now), waiting)
    };
    let with = |jobs: &[tranche_proto::JobSummary]| -> Vec<StandingJob> {
        jobs.iter()
            .map(|j| StandingJob {
                job: j.into(),
                standing: standings.get(&j.id).map(Into::into),
            })
            .collect()
    };
    Ok(Json(QueueStandingView {
        front: with(&queue.front),
        shares: queue
            .shares
            .iter()
            .map(|(s, jobs)| ShareStanding {
                share: s.to_string(),
                jobs: with(jobs),
            })
            .collect(),
        waiting,
    }))
}

/// A job's position and estimated start; `null` unless it is RUNNABLE.
#[utoipa::path(get, path = "/api/v1/jobs/{id}/standing", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    responses(
        (status = 200, body = Option<StandingView>),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn job_standing(
    State(api): State<Arc<Api>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Option<StandingView>>> {
    match api.read(&caller, Query::Explain(job_id(&id)?)).await? {
        Answer::Explain(e) => Ok(Json(e.standing.as_ref().map(Into::into))),
        other => Err(unexpected(&other)),
    }
}

/// One GPU and what holds it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GpuCell {
    pub index: u32,
    pub unit: String,
    /// `free`, `used` (by `job` of `share`), `held` (by a job being stopped so that
    /// `for_job` can start), `draining` (free on a drained node), `unhealthy`, or
    /// `down` (free on a node that is down or unreachable).
    pub state: String,
    pub job: Option<u64>,
    pub share: Option<String>,
    pub user: Option<String>,
    /// For a held GPU: the job it is being freed for.
    pub for_job: Option<u64>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeGpus {
    pub name: String,
    /// `IDLE`, `MIXED`, `ALLOCATED`, `DRAINING`, `DRAINED`, `UNREACHABLE` or `DOWN`.
    pub state: String,
    /// Why it is drained or down.
    pub reason: Option<String>,
    pub gpus: Vec<GpuCell>,
}

/// Every node's GPUs, each with its state and the job and share that hold it.
#[utoipa::path(get, path = "/api/v1/gpus", tag = "nodes",
    responses(
        (status = 200, body = Vec<NodeGpus>),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 503, body = ErrorBody),
    ))]
pub async fn gpus(State(api): State<Arc<Api>>, caller: Caller) -> Result<Json<Vec<NodeGpus>>> {
    let nodes = match api.read(&caller, Query::Nodes).await? {
        Answer::Nodes(n) => n,
        other => return Err(unexpected(&other)),
    };
    let sh = api.shared.read().unwrap();
    let out = nodes
        .iter()
        .map(|n| {
            let gpus = n
                .inventory
                .gpus
                .iter()
                .zip(&n.allocated)
                .map(|(g, a)| {
                    let job = a.and_then(|id| sh.state.jobs.get(&id));
                    let for_job = job.and_then(|j| match j.stop.as_ref().map(|s| &s.kind) {
                        Some(StopKind::Reclaim { for_job } | StopKind::InShare { for_job }) => {
                            Some(for_job.0)
                        }
                        _ => None,
                    });
                    let state = if !g.healthy {
                        "unhealthy"
                    } else if a.is_some() {
                        if for_job.is_some() {
                            "held"
                        } else {
                            "used"
                        }
                    } else if n.down.is_some() || n.unreachable {
                        "down"
                    } else if n.drain.is_some() {
                        "draining"
                    } else {
                        "free"
                    };
                    GpuCell {
                        index: g.index.0,
                        unit: g.unit.to_string(),
                        state: state.into(),
                        job: a.map(|j| j.0),
                        share: job.map(|j| j.spec.share.to_string()),
                        user: job.map(|j| j.spec.user.to_string()),
                        for_job,
                    }
                })
                .collect();
            NodeGpus {
                name: n.inventory.name.to_string(),
                state: n.state().to_string(),
                reason: n.reason().map(str::to_string),
                gpus,
            }
        })
        .collect();
    Ok(Json(out))
}

/// A job as the preemption timeline names it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobBrief {
    pub id: u64,
    pub name: String,
    pub share: String,
    pub user: String,
    pub priority: u32,
}

impl JobBrief {
    fn of(j: &Job) -> JobBrief {
        JobBrief {
            id: j.id.0,
            name: j.spec.name.to_string(),
            share: j.spec.share.to_string(),
            user: j.spec.user.to_string(),
            priority: j.spec.priority,
        }
    }
}

/// One preemption: `victim` was stopped so that `for_job` could start.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PreemptionView {
    /// When the attempt ended (or, while it is being stopped, when it was signalled),
    /// milliseconds since the epoch.
    pub at: u64,
    /// `reclaim` (across shares: the victim's share was above its max) or `in_share`
    /// (a higher-priority job of the same share).
    pub kind: String,
    pub victim: JobBrief,
    /// The victim's attempt that was stopped.
    pub attempt: u32,
    pub gpus: u32,
    /// How long the attempt had run, in milliseconds (lost to the preemption).
    pub ran_ms: u64,
    pub for_job: Option<JobBrief>,
    /// The victim is still being stopped (its checkpoint grace runs).
    pub ongoing: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PreemptionsView {
    /// Newest first.
    pub preemptions: Vec<PreemptionView>,
    /// How many there are in all (with the filters, before the limit).
    pub total: u32,
}

#[derive(Debug, Default, Deserialize, IntoParams, ToSchema)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PreemptionsQuery {
    /// At most this many, newest first (1 to 1000; default 200).
    pub limit: Option<u32>,
    /// Only those at or after this time (milliseconds since the epoch).
    pub since: Option<u64>,
    /// Only those where this job was the victim or the preemptor.
    pub job: Option<u64>,
}

/// Reclaims and in-share preemptions, from the jobs' attempts that ended stopped by
/// one and the stops under way: who took GPUs from whom.
#[utoipa::path(get, path = "/api/v1/preemptions", tag = "jobs", params(PreemptionsQuery),
    responses(
        (status = 200, body = PreemptionsView),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
pub async fn preemptions(
    State(api): State<Arc<Api>>,
    caller: Caller,
    QueryArgs(q): QueryArgs<PreemptionsQuery>,
) -> Result<Json<PreemptionsView>> {
    let limit = q.limit.unwrap_or(200);
    if !(1..=1000).contains(&limit) {
        return Err(HttpError::invalid("limit", "must be 1 to 1000"));
    }
    // The barrier and the authorization; the attempts come from the applied state.
    match api.read(&caller, Query::Shares).await? {
        Answer::Shares(_) => {}
        other => return Err(unexpected(&other)),
    }
    // A job asked for that has left the state is read from the history store: its own
    // stops are still listed (those it caused were stops of jobs in the state).
    let archived = match q.job.map(JobId) {
        Some(id) if !api.shared.read().unwrap().state.jobs.contains_key(&id) => {
            let history = api.shared.read().unwrap().history.clone();
            match history {
                Some(h) => h.get(id).map_err(HttpError::unavailable)?.map(|(_, j)| j),
                None => None,
            }
        }
        _ => None,
    };
    let sh = api.shared.read().unwrap();
    let st = &sh.state;
    let now = wall_ms().max(sh.last_now);
    let brief = |id: JobId| st.jobs.get(&id).map(JobBrief::of);
    let mut all = Vec::new();
    for j in st.jobs.values().chain(archived.as_ref()) {
        for a in &j.attempts {
            let (kind, ongoing, at) = match (&a.end, &j.stop) {
                (Some(AttemptEnd::Stopped { kind, .. }), _) => {
                    (kind, false, a.ended_at.unwrap_or(a.scheduled_at))
                }
                // The attempt under way, being stopped.
                (None, Some(stop)) => (&stop.kind, true, stop.signalled_at),
                _ => continue,
            };
            let (name, by) = match kind {
                StopKind::Reclaim { for_job } => ("reclaim", *for_job),
                StopKind::InShare { for_job } => ("in_share", *for_job),
                _ => continue,
            };
            if q.since.is_some_and(|s| at < s) || q.job.is_some_and(|id| id != j.id.0 && id != by.0)
            {
                continue;
            }
            let started = a.started_at.unwrap_or(a.scheduled_at);
            let ended = if ongoing { now } else { at };
            all.push(PreemptionView {
                at,
                kind: name.into(),
                victim: JobBrief::of(j),
                attempt: a.number,
                gpus: a.allocation.iter().map(|n| n.gpus.len() as u32).sum(),
                ran_ms: ended.saturating_sub(started),
                for_job: brief(by),
                ongoing,
            });
        }
    }
    all.sort_by(|a, b| b.at.cmp(&a.at).then(b.victim.id.cmp(&a.victim.id)));
    let total = all.len() as u32;
    all.truncate(limit as usize);
    Ok(Json(PreemptionsView {
        preemptions: all,
        total,
    }))
}
