//! Reads of ended jobs across the replicated state and the history store.
//!
//! An ended job is in exactly one of the two: in the state until `ForgetEnded` drops
//! it, in this controller's history store after (the store is written first, under
//! the same lock). A history page merges both, newest end first.

use std::sync::Arc;

use tranche_model::{AttemptEnd, Job, JobId, JobRef, JobStatus, Millis};
use tranche_proto::{
    ApiError, EndedJob, HistoryCursor, HistoryFilter, HistoryPage, MAX_HISTORY_PAGE,
};
use tranche_state::retention::ended_at;

use crate::history::History;
use crate::mailbox::{wall_ms, SharedRef};

/// The jobs a page lists when the filter asks for no particular number.
pub const DEFAULT_PAGE: u32 = 100;

/// The most history records one page reads before it answers (with a cursor to go
/// on from): a filter that keeps few jobs costs a bounded amount per page.
pub const MAX_SCAN: usize = 100_000;

/// An ended job as the history lists it.
pub fn ended_job(job: &Job, at: Millis, archived: bool, now: Millis) -> EndedJob {
    let exit_code = job.attempts.last().and_then(|a| match &a.end {
        Some(AttemptEnd::Exited { code }) => Some(*code),
        Some(AttemptEnd::Stopped { code, .. }) => *code,
        _ => None,
    });
    // The summary leaves out where and when a job that no longer runs ran; the
    // history lists both, from its last attempt.
    let mut summary = crate::views::summary(job, now);
    if let Some(a) = job.attempts.last() {
        summary.started_at = a.ran_from();
        summary.nodes = a.allocation.iter().map(|n| n.node.clone()).collect();
    }
    EndedJob {
        job: summary,
        ended_at: at,
        exit_code,
        reason: job
            .transitions
            .last()
            .map(|t| t.reason.clone())
            .unwrap_or_default(),
        archived,
    }
}

fn keeps(f: &HistoryFilter, j: &Job) -> bool {
    j.status.is_terminal()
        && f.user.as_ref().is_none_or(|u| &j.spec.user == u)
        && f.share.as_ref().is_none_or(|s| &j.spec.share == s)
        && (f.status.is_empty() || f.status.contains(&j.status))
}

/// One page of ended jobs that `f` keeps, newest end first.
pub fn page(shared: &SharedRef, f: &HistoryFilter) -> Result<HistoryPage, ApiError> {
    if let Some(s) = f.status.iter().find(|s| !s.is_terminal()) {
        return Err(ApiError::BadRequest(format!(
            "the history lists ended jobs (SUCCEEDED, FAILED, CANCELLED); status {s} has not ended"
        )));
    }
    let limit = match f.limit {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_HISTORY_PAGE),
    } as usize;
    let since = f.since.unwrap_or(0);
    let before = f.before.map(|c| (c.ended_at, c.id));
    let key = |at: Millis, id: JobId| (at, id);
    // The state's ended jobs (bounded by `[retention]`), then the store's, outside the
    // state lock.
    let (now, history, mut all) = {
        let sh = shared.read().unwrap();
        let now = wall_ms().max(sh.last_now);
        // The newest `limit` keys first, then a summary of those only.
        let mut keys: Vec<(Millis, JobId)> = sh
            .state
            .jobs
            .values()
            .filter(|j| keeps(f, j))
            .map(|j| key(ended_at(j), j.id))
            .filter(|k| k.0 >= since && before.is_none_or(|b| *k < b))
            .collect();
        keys.sort_unstable_by(|a, b| b.cmp(a));
        keys.truncate(limit + 1);
        let hot: Vec<EndedJob> = keys
            .iter()
            .filter_map(|(at, id)| sh.state.job(*id).map(|j| ended_job(j, *at, false, now)))
            .collect();
        (now, sh.history.clone(), hot)
    };
    let mut stop = None;
    if let Some(h) = history {
        let (records, last) = h
            .page(since, before, limit, MAX_SCAN, |j| keeps(f, j))
            .map_err(ApiError::Unavailable)?;
        stop = last;
        all.extend(records.iter().map(|(at, j)| ended_job(j, *at, true, now)));
    }
    all.sort_by_key(|e| std::cmp::Reverse(key(e.ended_at, e.job.id)));
    all.dedup_by_key(|e| e.job.id);
    // What is older than where the store stopped reading comes with the next page.
    if let Some(s) = stop {
        all.retain(|e| key(e.ended_at, e.job.id) >= s);
    }
    let next = if all.len() > limit {
        all.truncate(limit);
        all.last().map(|e| HistoryCursor {
            ended_at: e.ended_at,
            id: e.job.id,
        })
    } else {
        stop.map(|(ended_at, id)| HistoryCursor { ended_at, id })
    };
    Ok(HistoryPage { jobs: all, next })
}

/// The jobs `r` names in the history store, with how each ended: one job, one task,
/// or every task of an array; `None` when the store holds none of them.
pub fn ended_jobs_of(
    history: &Arc<History>,
    r: &JobRef,
) -> Result<Option<Vec<(JobId, JobStatus)>>, ApiError> {
    let Some(first) = history.find(r).map_err(ApiError::Unavailable)? else {
        return Ok(None);
    };
    let array = first
        .array
        .clone()
        .filter(|a| a.array == r.job && r.task.is_none());
    let Some(a) = array else {
        return Ok(Some(vec![(first.id, first.status)]));
    };
    let mut out = vec![];
    for id in r.job.0..r.job.0 + u64::from(a.count) {
        if let Some((_, j)) = history.get(JobId(id)).map_err(ApiError::Unavailable)? {
            if j.array.as_ref().is_some_and(|x| x.array == r.job) {
                out.push((j.id, j.status));
            }
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::Shared;
    use std::sync::RwLock;
    use tranche_model::Transition;

    fn ended(id: u64, at: Millis, user: &str, status: JobStatus) -> Job {
        let mut j = crate::history::tests::job(id, user);
        j.status = status;
        j.transitions.push(Transition {
            at,
            from: JobStatus::Runnable,
            to: status,
            reason: "done".into(),
            nodes: vec![],
        });
        j
    }

    /// Jobs 1..=10 ended at 100 × id; the odd ones are archived, the even ones still in
    /// the state, and job 11 waits. Pages of 3 walk through all ten newest first, each
    /// once, however the two sources interleave.
    #[test]
    fn pages_merge_the_state_and_the_store_newest_first_without_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.redb"), false).unwrap();
        let mut sh = Shared::new(1);
        let jobs: Vec<Job> = (1..=10)
            .map(|i| {
                ended(
                    i,
                    i * 100,
                    if i % 3 == 0 { "bob" } else { "alice" },
                    JobStatus::Succeeded,
                )
            })
            .collect();
        history
            .append(
                jobs.iter()
                    .filter(|j| j.id.0 % 2 == 1)
                    .map(|j| (ended_at(j), j)),
            )
            .unwrap();
        for j in jobs.iter().filter(|j| j.id.0 % 2 == 0) {
            sh.state.jobs.insert(j.id, j.clone());
        }
        let mut waiting = ended(11, 5_000, "alice", JobStatus::Runnable);
        waiting.transitions.clear();
        sh.state.jobs.insert(JobId(11), waiting);
        sh.history = Some(Arc::new(history));
        let shared: SharedRef = Arc::new(RwLock::new(sh));
        let mut f = HistoryFilter {
            limit: 3,
            ..Default::default()
        };
        let mut seen = vec![];
        loop {
            let p = page(&shared, &f).unwrap();
            assert!(p.jobs.len() <= 3);
            for e in &p.jobs {
                assert_eq!(e.archived, e.job.id.0 % 2 == 1, "job {}", e.job.id);
                seen.push(e.job.id.0);
            }
            match p.next {
                Some(c) => f.before = Some(c),
                None => break,
            }
        }
        assert_eq!(seen, (1..=10).rev().collect::<Vec<_>>());
        // Filters apply to both sources; `since` bounds the page.
        let f = HistoryFilter {
            user: Some("bob".into()),
            since: Some(400),
            ..Default::default()
        };
        let ids: Vec<u64> = page(&shared, &f)
            .unwrap()
            .jobs
            .iter()
            .map(|e| e.job.id.0)
            .collect();
        assert_eq!(ids, vec![9, 6]);
        // A status that has not ended is refused, naming it.
        let f = HistoryFilter {
            status: vec![JobStatus::Running],
            ..Default::default()
        };
        let e = page(&shared, &f).unwrap_err().to_string();
        assert!(e.contains("status RUNNING has not ended"), "{e}");
    }
}
