//! Job arrays and dependencies (design §8): Slurm's `--array` and `--dependency`
//! syntax, the task ids `42_7`, and what a job records about them.

use crate::error::{invalid, ValidationError};
use crate::ids::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Most tasks one array may have.
pub const MAX_ARRAY_TASKS: u32 = 10_000;
/// Highest task index.
pub const MAX_ARRAY_INDEX: u32 = 9_999_999;
/// Most jobs one dependency list may name.
pub const MAX_DEPENDENCIES: usize = 100;

/// A run of task indices, `start-end:step` in Slurm's syntax (`start` alone is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexRange {
    pub start: u32,
    pub end: u32,
    pub step: u32,
}

/// `--array 0-999%50`: the task indices and how many may run at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    pub ranges: Vec<IndexRange>,
    /// At most this many tasks hold GPUs at once (`%N`); `None`: no limit.
    pub max_running: Option<u32>,
}

impl ArraySpec {
    /// Reads Slurm's syntax: comma-separated indices and ranges with an optional step,
    /// then `%N`: `0-999%50`, `1,3,5-7`, `0-15:4`.
    pub fn parse(text: &str) -> Result<ArraySpec, ValidationError> {
        let field = "array";
        let text = text.trim();
        let (list, limit) = match text.split_once('%') {
            Some((l, n)) => (l, Some(n)),
            None => (text, None),
        };
        let max_running = match limit {
            None => None,
            Some(n) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    return Err(invalid(
                        field,
                        format!(
                            "the limit after % must be a whole number of at least 1, got {n:?}"
                        ),
                    ))
                }
            },
        };
        let num = |s: &str| -> Result<u32, ValidationError> {
            s.trim().parse::<u32>().map_err(|_| {
                invalid(
                    field,
                    format!("{s:?} is not a task index (indices are whole numbers, e.g. 0-999%50 or 1,3,5-7)"),
                )
            })
        };
        let mut ranges = vec![];
        for part in list.split(',') {
            let (span, step) = match part.split_once(':') {
                Some((a, s)) => (a, num(s)?),
                None => (part, 1),
            };
            let (start, end) = match span.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let n = num(span)?;
                    (n, n)
                }
            };
            ranges.push(IndexRange { start, end, step });
        }
        let a = ArraySpec {
            ranges,
            max_running,
        };
        a.validate()?;
        Ok(a)
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        let field = "array";
        if self.ranges.is_empty() {
            return Err(invalid(field, "must name at least one task index"));
        }
        let mut count: u64 = 0;
        for r in &self.ranges {
            if r.step == 0 {
                return Err(invalid(field, "a step (after :) must be at least 1"));
            }
            if r.start > r.end {
                return Err(invalid(
                    field,
                    format!("range {}-{} ends before it starts", r.start, r.end),
                ));
            }
            if r.end > MAX_ARRAY_INDEX {
                return Err(invalid(
                    field,
                    format!(
                        "task indices must be at most {MAX_ARRAY_INDEX}, got {}",
                        r.end
                    ),
                ));
            }
            count += ((r.end - r.start) / r.step) as u64 + 1;
            if count > MAX_ARRAY_TASKS as u64 * 4 {
                break;
            }
        }
        let n = self.indices().len();
        if n as u64 > MAX_ARRAY_TASKS as u64 {
            return Err(invalid(
                field,
                format!("an array may have at most {MAX_ARRAY_TASKS} tasks, got {n}"),
            ));
        }
        if self.max_running == Some(0) {
            return Err(invalid(field, "the limit after % must be at least 1"));
        }
        Ok(())
    }

    /// The task indices, sorted, each once. Bounded: stops past the task limit, which
    /// `validate` refuses.
    pub fn indices(&self) -> Vec<u32> {
        let mut v = vec![];
        for r in &self.ranges {
            if r.step == 0 || r.start > r.end {
                continue;
            }
            let mut i = r.start;
            loop {
                v.push(i);
                if v.len() > MAX_ARRAY_TASKS as usize * 4 {
                    break;
                }
                match i.checked_add(r.step) {
                    Some(n) if n <= r.end => i = n,
                    _ => break,
                }
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.start == r.end {
                write!(f, "{}", r.start)?;
            } else {
                write!(f, "{}-{}", r.start, r.end)?;
                if r.step != 1 {
                    write!(f, ":{}", r.step)?;
                }
            }
        }
        if let Some(n) = self.max_running {
            write!(f, "%{n}")?;
        }
        Ok(())
    }
}

/// Sorted indices as ranges, `8-999` or `1,3,5-7`, as squeue folds them.
pub fn fold_indices(indices: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < indices.len() {
        let start = indices[i];
        let mut end = start;
        while i + 1 < indices.len() && indices[i + 1] == end + 1 {
            i += 1;
            end = indices[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// What a task of an array records about its array.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayTask {
    /// The array's id: its first task's job id.
    pub array: JobId,
    /// This task's index (`TRANCHE_ARRAY_TASK_ID`).
    pub index: u32,
    /// How many tasks the array has.
    pub count: u32,
    /// At most this many of the array's tasks hold GPUs at once.
    pub max_running: Option<u32>,
}

/// A job as users name it: `42`, or one task of an array, `42_7`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct JobRef {
    pub job: JobId,
    pub task: Option<u32>,
}

impl JobRef {
    pub fn job(id: JobId) -> JobRef {
        JobRef {
            job: id,
            task: None,
        }
    }

    /// How users name job `id`: `42`, or `42_7` when it is task 7 of array 42.
    pub fn of(id: JobId, array: Option<&ArrayTask>) -> JobRef {
        match array {
            Some(a) => JobRef {
                job: a.array,
                task: Some(a.index),
            },
            None => JobRef::job(id),
        }
    }

    /// Reads `42` or `42_7`.
    pub fn parse(s: &str) -> Result<JobRef, String> {
        let bad = || {
            format!("{s:?} is not a job id (a number such as 42, or 42_7 for task 7 of array 42)")
        };
        let (j, t) = match s.trim().split_once('_') {
            Some((j, t)) => (j, Some(t.parse::<u32>().map_err(|_| bad())?)),
            None => (s.trim(), None),
        };
        let job = j.parse::<u64>().map_err(|_| bad())?;
        Ok(JobRef {
            job: JobId(job),
            task: t,
        })
    }
}

impl From<JobId> for JobRef {
    fn from(id: JobId) -> JobRef {
        JobRef::job(id)
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.task {
            Some(t) => write!(f, "{}_{t}", self.job),
            None => write!(f, "{}", self.job),
        }
    }
}

impl std::str::FromStr for JobRef {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobRef::parse(s)
    }
}

/// Slurm's dependency types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DepKind {
    /// Start once the named jobs have SUCCEEDED.
    AfterOk,
    /// Start once the named jobs have ended, however.
    AfterAny,
    /// Start once the named jobs have FAILED or been CANCELLED.
    AfterNotOk,
}

impl DepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::AfterOk => "afterok",
            DepKind::AfterAny => "afterany",
            DepKind::AfterNotOk => "afternotok",
        }
    }
}

/// `--dependency afterok:41:42_3,afterany:40,singleton`: every clause must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub after: Vec<(DepKind, Vec<JobRef>)>,
    /// Start only once no earlier job of the same user and name is unfinished.
    pub singleton: bool,
}

impl Dependency {
    pub fn is_empty(&self) -> bool {
        self.after.is_empty() && !self.singleton
    }

    /// Reads Slurm's syntax. Only `,` (all of) joins clauses.
    pub fn parse(text: &str) -> Result<Dependency, ValidationError> {
        let field = "dependency";
        let mut d = Dependency::default();
        if text.contains('?') {
            return Err(invalid(
                field,
                "only ',' (all of) joins clauses; '?' (any of) is not supported",
            ));
        }
        for clause in text.split(',').map(str::trim) {
            if clause.eq_ignore_ascii_case("singleton") {
                d.singleton = true;
                continue;
            }
            let mut parts = clause.split(':');
            let kind = match parts.next().unwrap_or("").to_ascii_lowercase().as_str() {
                "afterok" => DepKind::AfterOk,
                "afterany" => DepKind::AfterAny,
                "afternotok" => DepKind::AfterNotOk,
                other => {
                    return Err(invalid(
                        field,
                        format!("unknown dependency type {other:?}: use afterok, afterany, afternotok or singleton"),
                    ))
                }
            };
            let jobs = parts
                .map(|p| JobRef::parse(p).map_err(|e| invalid(field, e)))
                .collect::<Result<Vec<_>, _>>()?;
            if jobs.is_empty() {
                return Err(invalid(
                    field,
                    format!(
                        "{} needs at least one job id ({}:ID[:ID...])",
                        kind.as_str(),
                        kind.as_str()
                    ),
                ));
            }
            d.after.push((kind, jobs));
        }
        d.validate()?;
        Ok(d)
    }

    pub fn validate(&self) -> Result<(), ValidationError> {
        let n: usize = self.after.iter().map(|(_, j)| j.len()).sum();
        if n > MAX_DEPENDENCIES {
            return Err(invalid(
                "dependency",
                format!("may name at most {MAX_DEPENDENCIES} jobs, got {n}"),
            ));
        }
        if self.after.iter().any(|(_, j)| j.is_empty()) {
            return Err(invalid(
                "dependency",
                "each clause needs at least one job id",
            ));
        }
        Ok(())
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, jobs) in &self.after {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            f.write_str(k.as_str())?;
            for j in jobs {
                write!(f, ":{j}")?;
            }
        }
        if self.singleton {
            if !first {
                f.write_str(",")?;
            }
            f.write_str("singleton")?;
        }
        Ok(())
    }
}

/// One dependency a waiting job still has, resolved to a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dep {
    pub kind: DepKind,
    pub job: JobId,
}

/// Where a dependency stands, given the status of the job it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepState {
    Waiting,
    Satisfied,
    /// It can never be satisfied.
    Never,
}

impl Dep {
    pub fn state(&self, status: crate::JobStatus) -> DepState {
        use crate::JobStatus as S;
        match (self.kind, status) {
            (_, s) if !s.is_terminal() => DepState::Waiting,
            (DepKind::AfterAny, _) => DepState::Satisfied,
            (DepKind::AfterOk, S::Succeeded) => DepState::Satisfied,
            (DepKind::AfterOk, _) => DepState::Never,
            (DepKind::AfterNotOk, S::Succeeded) => DepState::Never,
            (DepKind::AfterNotOk, _) => DepState::Satisfied,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_read_slurms_syntax() {
        let a = ArraySpec::parse("0-999%50").unwrap();
        assert_eq!(a.indices().len(), 1000);
        assert_eq!(a.max_running, Some(50));
        assert_eq!(a.to_string(), "0-999%50");
        assert_eq!(
            ArraySpec::parse("1,3,5-7").unwrap().indices(),
            vec![1, 3, 5, 6, 7]
        );
        assert_eq!(
            ArraySpec::parse("0-15:4").unwrap().indices(),
            vec![0, 4, 8, 12]
        );
        assert_eq!(ArraySpec::parse("3,1-3").unwrap().indices(), vec![1, 2, 3]);
        for (bad, rule) in [
            ("5-1", "ends before it starts"),
            ("0-10%0", "at least 1"),
            ("a-b", "not a task index"),
            ("0-10:0", "step"),
            ("0-20000", "at most 10000 tasks"),
            ("", "not a task index"),
        ] {
            let e = ArraySpec::parse(bad).unwrap_err();
            assert_eq!(e.field, "array");
            assert!(e.rule.contains(rule), "{bad}: {e}");
        }
    }

    #[test]
    fn indices_fold_as_squeue_shows_them() {
        assert_eq!(fold_indices(&[8, 9, 10, 12, 20, 21]), "8-10,12,20-21");
        assert_eq!(fold_indices(&[5]), "5");
        assert_eq!(fold_indices(&[]), "");
    }

    #[test]
    fn job_refs_name_jobs_and_tasks() {
        assert_eq!(JobRef::parse("42").unwrap(), JobRef::job(JobId(42)));
        let t = JobRef::parse("42_7").unwrap();
        assert_eq!((t.job, t.task), (JobId(42), Some(7)));
        assert_eq!(t.to_string(), "42_7");
        assert!(JobRef::parse("42_").is_err());
        assert!(JobRef::parse("x").is_err());
    }

    #[test]
    fn dependencies_read_slurms_syntax() {
        let d = Dependency::parse("afterok:41:42_3,afterany:40,singleton").unwrap();
        assert_eq!(d.after.len(), 2);
        assert!(d.singleton);
        assert_eq!(d.to_string(), "afterok:41:42_3,afterany:40,singleton");
        for (bad, rule) in [
            ("afterok", "at least one job id"),
            ("before:3", "unknown dependency type"),
            ("afterok:x", "not a job id"),
            ("afterok:1?afterany:2", "not supported"),
        ] {
            let e = Dependency::parse(bad).unwrap_err();
            assert_eq!(e.field, "dependency");
            assert!(e.rule.contains(rule), "{bad}: {e}");
        }
    }

    #[test]
    fn a_dependency_is_judged_by_the_status_it_names() {
        use crate::JobStatus as S;
        let ok = Dep {
            kind: DepKind::AfterOk,
            job: JobId(1),
        };
        let any = Dep {
            kind: DepKind::AfterAny,
            ..ok
        };
        let notok = Dep {
            kind: DepKind::AfterNotOk,
            ..ok
        };
        assert_eq!(ok.state(S::Running), DepState::Waiting);
        assert_eq!(ok.state(S::Succeeded), DepState::Satisfied);
        assert_eq!(ok.state(S::Failed), DepState::Never);
        assert_eq!(ok.state(S::Cancelled), DepState::Never);
        assert_eq!(any.state(S::Failed), DepState::Satisfied);
        assert_eq!(notok.state(S::Failed), DepState::Satisfied);
        assert_eq!(notok.state(S::Succeeded), DepState::Never);
        assert_eq!(notok.state(S::Pending), DepState::Waiting);
    }
}
