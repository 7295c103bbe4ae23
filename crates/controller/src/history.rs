//! The history store: ended jobs after they leave the replicated state.
//!
//! Every controller keeps its own, in `history.redb` in its data dir, apart from the
//! Raft log and state images. When a controller applies `ForgetEnded` it first writes
//! the final record of each job it is about to drop (the whole [`Job`]: spec,
//! attempts, transitions, reasons, exit codes) in one transaction, fsync'd unless the
//! controller runs without fsync, and only then drops them from memory. A crash in
//! between replays the entry on restart and writes the same records again (a record
//! is keyed by its end time and id, so writing it twice keeps one).
//!
//! Two tables: `ended` maps (end time, job id) to the record (in the stored format's
//! envelope, like every record a controller keeps), `ids` maps a job id to its end
//! time. Records older than `[retention] history_days` are dropped by each controller
//! on its own, a batch at a time.
//!
//! History is local: a controller that joins, or that installs a snapshot because it
//! fell far behind, holds no record of the jobs dropped before that snapshot. Reads go
//! to the controller the client talks to; the docs tell operators what follows.

use std::path::Path;

use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};
use tranche_model::{Job, JobId, JobRef, Millis};
use tranche_state::codec;

const ENDED: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("ended");
const IDS: TableDefinition<u64, u64> = TableDefinition::new("ids");

/// The store's page cache (see [`History::open`]).
const CACHE_BYTES: usize = 32 << 20;

/// The most records one prune removes (a prune runs again until none is left).
const PRUNE_BATCH: usize = 10_000;

/// A controller's history store.
pub struct History {
    db: Database,
    fsync: bool,
}

/// What the history holds, for metrics and the soak benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryStats {
    pub jobs: u64,
    pub bytes: u64,
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("history store: {what}: {e}")
}

impl History {
    /// Opens (or creates) the store at `path`. `fsync`: commit durably.
    pub fn open(path: &Path, fsync: bool) -> Result<History, String> {
        // redb caches up to 1 GiB by default: the store is read a record or a page at
        // a time, and a cache that follows its size would grow the controller with
        // every job it ever ran.
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| err(&path.display().to_string(), e))?;
        let txn = db.begin_write().map_err(|e| err("open", e))?;
        txn.open_table(ENDED).map_err(|e| err("open", e))?;
        txn.open_table(IDS).map_err(|e| err("open", e))?;
        txn.commit().map_err(|e| err("open", e))?;
        Ok(History { db, fsync })
    }

    /// Writes the final records of `jobs`, with the time each ended, in one
    /// transaction; durable when it returns (unless opened without fsync).
    pub fn append<'a>(
        &self,
        jobs: impl IntoIterator<Item = (Millis, &'a Job)>,
    ) -> Result<(), String> {
        let mut txn = self.db.begin_write().map_err(|e| err("write", e))?;
        txn.set_durability(if self.fsync {
            Durability::Immediate
        } else {
            Durability::None
        });
        {
            let mut ended = txn.open_table(ENDED).map_err(|e| err("write", e))?;
            let mut ids = txn.open_table(IDS).map_err(|e| err("write", e))?;
            for (at, job) in jobs {
                let rec = codec::seal(job);
                ended
                    .insert((at, job.id.0), rec.as_slice())
                    .map_err(|e| err("write", e))?;
                ids.insert(job.id.0, at).map_err(|e| err("write", e))?;
            }
        }
        txn.commit().map_err(|e| err("commit", e))
    }

    /// A record of this build's format or of format 8 (whose jobs are today's), or of
    /// format 7 or 6 (the formats before checkpoints and loan terms), migrated.
    fn decode(bytes: &[u8]) -> Result<Job, String> {
        let (version, body) = codec::open(bytes).map_err(|e| err("record", e))?;
        let bad = |e| err(&format!("record of format {version}"), e);
        if version == codec::FORMAT || version == 8 {
            codec::decode(body).map_err(bad)
        } else {
            codec::decode::<tranche_state::format::v7::Job>(body)
                .map(Into::into)
                .map_err(bad)
        }
    }

    /// The record of job `id`, with the time it ended.
    pub fn get(&self, id: JobId) -> Result<Option<(Millis, Job)>, String> {
        let txn = self.db.begin_read().map_err(|e| err("read", e))?;
        let ids = txn.open_table(IDS).map_err(|e| err("read", e))?;
        let Some(at) = ids
            .get(id.0)
            .map_err(|e| err("read", e))?
            .map(|v| v.value())
        else {
            return Ok(None);
        };
        let ended = txn.open_table(ENDED).map_err(|e| err("read", e))?;
        match ended.get((at, id.0)).map_err(|e| err("read", e))? {
            Some(v) => Ok(Some((at, Self::decode(v.value())?))),
            None => Ok(None),
        }
    }

    /// The job `r` names (`42`, `42_7`; an array's id names its first task), as
    /// [`tranche_state::State::resolve`] would have found it.
    pub fn find(&self, r: &JobRef) -> Result<Option<Job>, String> {
        let Some((_, job)) = self.get(r.job)? else {
            return Ok(None);
        };
        let array = job.array.clone().filter(|a| a.array == r.job);
        match (r.task, array) {
            (None, _) => Ok(Some(job)),
            (Some(t), Some(a)) => {
                for id in r.job.0..r.job.0 + u64::from(a.count) {
                    if let Some((_, j)) = self.get(JobId(id))? {
                        if j.array
                            .as_ref()
                            .is_some_and(|x| x.array == r.job && x.index == t)
                        {
                            return Ok(Some(j));
                        }
                    }
                }
                Ok(None)
            }
            (Some(_), None) => Ok(None),
        }
    }

    /// Records newest first, from just before `before` (end time, id) down to `since`,
    /// that `keep` keeps: at most `limit` of them, after reading at most `scan`
    /// records. Returns them and the key of the last record read (where the next page
    /// starts), `None` once nothing older is left.
    #[allow(clippy::type_complexity)]
    pub fn page(
        &self,
        since: Millis,
        before: Option<(Millis, JobId)>,
        limit: usize,
        scan: usize,
        mut keep: impl FnMut(&Job) -> bool,
    ) -> Result<(Vec<(Millis, Job)>, Option<(Millis, JobId)>), String> {
        let txn = self.db.begin_read().map_err(|e| err("read", e))?;
        let ended = txn.open_table(ENDED).map_err(|e| err("read", e))?;
        let lo = (since, 0u64);
        let range = match before {
            Some((t, id)) => ended.range(lo..(t, id.0)),
            None => ended.range(lo..),
        }
        .map_err(|e| err("read", e))?;
        let mut out = Vec::new();
        let mut last = None;
        for (n, item) in range.rev().enumerate() {
            if out.len() >= limit || n >= scan {
                return Ok((out, last));
            }
            let (k, v) = item.map_err(|e| err("read", e))?;
            let (at, id) = k.value();
            last = Some((at, JobId(id)));
            let job = Self::decode(v.value())?;
            if keep(&job) {
                out.push((at, job));
            }
        }
        Ok((out, None))
    }

    /// Drops up to one batch of records that ended before `before`; how many it
    /// dropped.
    pub fn prune(&self, before: Millis) -> Result<usize, String> {
        let mut txn = self.db.begin_write().map_err(|e| err("prune", e))?;
        if !self.fsync {
            txn.set_durability(Durability::None);
        }
        let n;
        {
            let mut ended = txn.open_table(ENDED).map_err(|e| err("prune", e))?;
            let mut ids = txn.open_table(IDS).map_err(|e| err("prune", e))?;
            let old: Vec<(u64, u64)> = ended
                .range(..(before, 0u64))
                .map_err(|e| err("prune", e))?
                .take(PRUNE_BATCH)
                .map(|r| r.map(|(k, _)| k.value()))
                .collect::<Result<_, _>>()
                .map_err(|e| err("prune", e))?;
            n = old.len();
            for (at, id) in old {
                ended.remove((at, id)).map_err(|e| err("prune", e))?;
                ids.remove(id).map_err(|e| err("prune", e))?;
            }
        }
        txn.commit().map_err(|e| err("commit", e))?;
        Ok(n)
    }

    /// How many records the store holds, and the size of its file.
    pub fn stats(&self, path: &Path) -> HistoryStats {
        let jobs = self
            .db
            .begin_read()
            .ok()
            .and_then(|t| t.open_table(IDS).ok())
            .and_then(|t| t.len().ok())
            .unwrap_or(0);
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        HistoryStats { jobs, bytes }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;
    use tranche_model::{JobSpec, JobStatus};

    /// A SUCCEEDED job of `user`, with no attempts or transitions.
    pub(crate) fn job(id: u64, user: &str) -> Job {
        let spec = JobSpec::new("j", "q", "s", user, "h100", 1, 1);
        Job {
            id: JobId(id),
            spec: Arc::new(spec),
            status: JobStatus::Succeeded,
            submitted_at: 1,
            attempts: vec![],
            transitions: vec![],
            stop: None,
            hold: None,
            pending_reason: None,
            preemptions: 0,
            failures: 0,
            array: None,
            deps: vec![],
            held: false,
        }
    }

    #[test]
    fn a_record_of_format_7_reads_as_todays_job() {
        use tranche_state::format::v7;
        let today = job(7, "carol");
        let spec = &today.spec;
        let old = v7::Job {
            id: today.id,
            spec: v7::JobSpec {
                name: spec.name.clone(),
                queue: spec.queue.clone(),
                share: spec.share.clone(),
                user: spec.user.clone(),
                priority: spec.priority,
                request: spec.request.clone(),
                cpus_per_node: 0,
                memory_mb_per_node: 0,
                image: spec.image.clone(),
                command: vec![],
                env: Default::default(),
                time_limit_s: None,
                checkpoint: v7::Checkpoint {
                    signal: "SIGTERM".into(),
                    grace_s: None,
                },
                retry_attempts: 1,
                preemption_retries: None,
                client_token: None,
                tags: Default::default(),
                cwd: None,
                array: None,
                dependency: Default::default(),
                hold: false,
                output: None,
                error: None,
                sagemaker: None,
            },
            status: JobStatus::Succeeded,
            submitted_at: 1,
            attempts: vec![],
            transitions: vec![],
            stop: None,
            hold: None,
            pending_reason: None,
            preemptions: 0,
            failures: 0,
            array: None,
            deps: vec![],
            held: false,
        };
        let mut bytes = codec::MAGIC.to_vec();
        bytes.extend(7u16.to_be_bytes());
        bytes.extend(codec::encode(&old));
        assert_eq!(History::decode(&bytes).unwrap(), today);
        // Today's records read as they were written.
        assert_eq!(History::decode(&codec::seal(&today)).unwrap(), today);
    }

    #[test]
    fn records_are_read_back_by_id_and_by_page_newest_first_and_pruned_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.redb");
        let h = History::open(&path, false).unwrap();
        let jobs: Vec<Job> = (1..=5)
            .map(|i| job(i, if i % 2 == 0 { "bob" } else { "alice" }))
            .collect();
        h.append(jobs.iter().map(|j| (j.id.0 * 100, j))).unwrap();
        // Written twice (a replayed entry): still one record each.
        h.append(jobs.iter().map(|j| (j.id.0 * 100, j))).unwrap();
        assert_eq!(h.stats(&path).jobs, 5);
        assert_eq!(h.get(JobId(3)).unwrap().unwrap(), (300, jobs[2].clone()));
        assert_eq!(h.get(JobId(9)).unwrap(), None);
        drop(h);
        // Durable across a reopen.
        let h = History::open(&path, false).unwrap();
        let (page, next) = h.page(0, None, 2, usize::MAX, |_| true).unwrap();
        let ids: Vec<u64> = page.iter().map(|(_, j)| j.id.0).collect();
        assert_eq!(ids, vec![5, 4]);
        let (page, next) = h
            .page(0, next, 10, usize::MAX, |j| j.spec.user.as_str() == "alice")
            .unwrap();
        let ids: Vec<u64> = page.iter().map(|(_, j)| j.id.0).collect();
        assert_eq!((ids, next), (vec![3, 1], None));
        // `since` bounds the page.
        let (page, _) = h.page(250, None, 10, usize::MAX, |_| true).unwrap();
        assert_eq!(page.len(), 3);
        assert_eq!(h.prune(300).unwrap(), 2);
        assert_eq!(h.get(JobId(2)).unwrap(), None);
        assert_eq!(h.stats(&path).jobs, 3);
    }
}
