//! The job trace: CSV with a header, one job a row, read into [`TraceJob`]s.
//!
//! Fields (the header names them, in any order):
//!
//! | field | required | meaning |
//! |---|---|---|
//! | `submit_s` | yes | when the job is submitted, seconds from the trace's start (up to 3 decimals) |
//! | `share` | yes | the quota share it is submitted to |
//! | `gpus` | yes | GPUs in all (a gang's across all its nodes) |
//! | `name` | no | the job's name (default `j` and its line number) |
//! | `user` | no | who submits it (default `sim`) |
//! | `nodes` | no | nodes of a gang, `gpus / nodes` each; absent: one node when `gpus` fits one, else whole nodes |
//! | `unit` | no | GPU class (default: the cluster's only unit) |
//! | `duration_s` | unless `time_limit_s` | how long the job's work takes; a preempted job starts again from its last checkpoint (from the start without `checkpoint_every_s`) |
//! | `priority` | no | 0-9999 (default 0) |
//! | `time_limit_s` | no | whole seconds; an attempt that reaches it is killed and the job FAILS |
//! | `checkpoint_s` | no | how long the job takes to exit after its checkpoint signal (absent: at once); past the grace it is killed |
//! | `checkpoint_every_s` | no | whole seconds, 60 or more: the job saves its work this often (`--checkpoint-every`); a preempted attempt loses only the work since its last checkpoint |
//!
//! A file whose columns have other names is read through a column mapping
//! (`tenant=share,num_gpu=gpus`); a column mapped to `-` is ignored. Every other
//! column is an error, so that a misspelt field is not silently dropped.

use std::collections::BTreeMap;
use tranche_model::{Millis, MIN_CHECKPOINT_EVERY_S, SECOND};

/// The fields a trace may have, in the order the docs list them.
pub const FIELDS: [&str; 12] = [
    "submit_s",
    "share",
    "gpus",
    "name",
    "user",
    "nodes",
    "unit",
    "duration_s",
    "priority",
    "time_limit_s",
    "checkpoint_s",
    "checkpoint_every_s",
];

/// The largest time a trace may state (about 31 years), far from overflowing the clock.
pub const MAX_TRACE_SECONDS: u64 = crate::scenario::MAX_SECONDS;

/// One job of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// The line of the file it came from (the header is line 1).
    pub line: usize,
    pub name: String,
    pub submit: Millis,
    pub share: String,
    pub gpus: u32,
    pub user: Option<String>,
    pub nodes: Option<u32>,
    pub unit: Option<String>,
    pub duration: Option<Millis>,
    pub priority: u32,
    pub time_limit_s: Option<u64>,
    pub checkpoint: Option<Millis>,
    pub checkpoint_every_s: Option<u64>,
}

/// A trace that cannot be read: where (the line, and the column as the file spells
/// it when the error is about one), and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The file has no header line.
    #[error("line 1: the trace is empty: it needs a header line (submit_s,share,gpus,...)")]
    Empty,
    /// A line is not CSV.
    #[error("line {line}: {problem}")]
    Csv { line: usize, problem: &'static str },
    /// A header column that is no trace field and is not mapped.
    #[error(
        "line {line}, column {column}: not a trace field (fields: {fields}); map it with --columns {column}=FIELD, or {column}=- to ignore it",
        fields = FIELDS.join(", ")
    )]
    UnknownColumn { line: usize, column: String },
    /// Two header columns give the same field.
    #[error(
        "line {line}, column {column}: gives field {field}, which column {other} gives already"
    )]
    FieldTwice {
        line: usize,
        column: String,
        field: &'static str,
        other: String,
    },
    /// The header lacks a required field; `columns` are the header's.
    #[error(
        "line {line}: the header has no column for the required field {field} (columns: {}); map one with --columns COLUMN={field}",
        .columns.join(", ")
    )]
    MissingField {
        line: usize,
        field: &'static str,
        columns: Vec<String>,
    },
    /// The header has neither `duration_s` nor `time_limit_s`.
    #[error("line {line}: the header needs duration_s or time_limit_s, or no job would ever end")]
    NoEnd { line: usize },
    /// A header and no rows.
    #[error("line {line}: the trace has a header and no jobs")]
    NoJobs { line: usize },
    /// A row with another number of fields than the header.
    #[error("line {line}: has {found} fields, the header has {expected}")]
    FieldCount {
        line: usize,
        found: usize,
        expected: usize,
    },
    /// A row's value breaks its field's rule (`column`: absent when the file has no
    /// column for the field).
    #[error("{}", at(*.line, .column.as_deref(), .message))]
    Value {
        line: usize,
        column: Option<String>,
        message: String,
    },
    /// A row that does not fit the policy it is simulated under.
    #[error("line {line}, column {column}: {message}")]
    Policy {
        line: usize,
        column: &'static str,
        message: String,
    },
    /// The job a row describes is not a valid job.
    #[error("line {line}: {error}")]
    Job {
        line: usize,
        #[source]
        error: tranche_model::ValidationError,
    },
}

fn at(line: usize, column: Option<&str>, message: &str) -> String {
    match column {
        Some(c) => format!("line {line}, column {c}: {message}"),
        None => format!("line {line}: {message}"),
    }
}

impl TraceError {
    /// The line of the file the error is on (the header is line 1).
    pub fn line(&self) -> usize {
        match self {
            TraceError::Empty => 1,
            TraceError::Csv { line, .. }
            | TraceError::UnknownColumn { line, .. }
            | TraceError::FieldTwice { line, .. }
            | TraceError::MissingField { line, .. }
            | TraceError::NoEnd { line }
            | TraceError::NoJobs { line }
            | TraceError::FieldCount { line, .. }
            | TraceError::Value { line, .. }
            | TraceError::Policy { line, .. }
            | TraceError::Job { line, .. } => *line,
        }
    }

    /// The column the error is about, as the file spells it.
    pub fn column(&self) -> Option<&str> {
        match self {
            TraceError::UnknownColumn { column, .. } | TraceError::FieldTwice { column, .. } => {
                Some(column)
            }
            TraceError::Value { column, .. } => column.as_deref(),
            TraceError::Policy { column, .. } => Some(column),
            _ => None,
        }
    }
}

/// A `--columns` mapping that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ColumnsError {
    #[error("column mapping {part:?} must be FILE_COLUMN=FIELD (or FILE_COLUMN=- to ignore it)")]
    NotAPair { part: String },
    #[error(
        "column mapping {part:?}: {field:?} is not a trace field (fields: {fields})",
        fields = FIELDS.join(", ")
    )]
    NotAField { part: String, field: String },
    #[error("column {column:?} is mapped twice")]
    MappedTwice { column: String },
}

/// How the file's columns map to trace fields: file column → field (`-`: ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Columns(pub BTreeMap<String, String>);

impl Columns {
    /// Parses `a=b,c=d` (the `--columns` flag).
    pub fn parse(s: &str) -> Result<Columns, ColumnsError> {
        let mut m = BTreeMap::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((from, to)) = part.split_once('=') else {
                return Err(ColumnsError::NotAPair { part: part.into() });
            };
            let (from, to) = (from.trim(), to.trim());
            if to != "-" && !FIELDS.contains(&to) {
                return Err(ColumnsError::NotAField {
                    part: part.into(),
                    field: to.into(),
                });
            }
            if m.insert(from.to_string(), to.to_string()).is_some() {
                return Err(ColumnsError::MappedTwice {
                    column: from.into(),
                });
            }
        }
        Ok(Columns(m))
    }
}

/// Splits one CSV line into fields: commas separate, double quotes enclose a field
/// that holds commas, `""` inside quotes is a quote.
fn split_csv(line: &str) -> Result<Vec<String>, &'static str> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cur.push(c),
            (false, '"') if cur.trim().is_empty() && !was_quoted => {
                cur.clear();
                quoted = true;
                was_quoted = true;
            }
            (false, '"') => return Err("a quote inside an unquoted field"),
            (false, ',') => {
                out.push(if was_quoted {
                    cur.clone()
                } else {
                    cur.trim().to_string()
                });
                cur.clear();
                was_quoted = false;
            }
            (false, c) => {
                if was_quoted && !c.is_whitespace() {
                    return Err("text after a closing quote");
                }
                cur.push(c);
            }
        }
    }
    if quoted {
        return Err("a quoted field is not closed");
    }
    out.push(if was_quoted {
        cur
    } else {
        cur.trim().to_string()
    });
    Ok(out)
}

/// A time that is not seconds with at most three decimals, or past the clock's range;
/// it holds the text as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecondsError {
    #[error("must be seconds, at least 0, with at most 3 decimals; got {0:?}")]
    NotSeconds(String),
    #[error("at most {max} seconds, got {0}", max = MAX_TRACE_SECONDS)]
    TooLarge(String),
}

/// Parses seconds with at most three decimals into milliseconds.
pub fn parse_seconds(s: &str) -> Result<Millis, SecondsError> {
    let rule = || SecondsError::NotSeconds(s.to_string());
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if whole.is_empty() && frac.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 3
    {
        return Err(rule());
    }
    let w: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| rule())?
    };
    if w > MAX_TRACE_SECONDS {
        return Err(SecondsError::TooLarge(s.to_string()));
    }
    let f: u64 = format!("{frac:0<3}").parse().map_err(|_| rule())?;
    Ok(w * SECOND + f)
}

fn parse_u32(s: &str, min: u32, max: u32) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!("must be a whole number {min}-{max}, got {s:?}")),
    }
}

/// Reads a trace. Rows may come in any order; jobs are returned by submit time (rows
/// with the same time keep their file order).
pub fn parse(text: &str, columns: &Columns) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((_, header)) = lines.find(|(_, l)| !l.trim().is_empty()) else {
        return Err(TraceError::Empty);
    };
    let header_line = text.lines().position(|l| l == header).unwrap_or(0) + 1;
    let names =
        split_csv(header.trim_start_matches('\u{feff}')).map_err(|problem| TraceError::Csv {
            line: header_line,
            problem,
        })?;
    // field → (column index, the column's name in the file)
    let mut field_at: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    for (i, col) in names.iter().enumerate() {
        let field = columns
            .0
            .get(col)
            .map(String::as_str)
            .unwrap_or(col.as_str());
        if field == "-" {
            continue;
        }
        let Some(&f) = FIELDS.iter().find(|f| **f == field) else {
            return Err(TraceError::UnknownColumn {
                line: header_line,
                column: col.clone(),
            });
        };
        if let Some((_, other)) = field_at.insert(f, (i, col.clone())) {
            return Err(TraceError::FieldTwice {
                line: header_line,
                column: col.clone(),
                field: f,
                other,
            });
        }
    }
    for f in ["submit_s", "share", "gpus"] {
        if !field_at.contains_key(f) {
            return Err(TraceError::MissingField {
                line: header_line,
                field: f,
                columns: names.clone(),
            });
        }
    }
    if !field_at.contains_key("duration_s") && !field_at.contains_key("time_limit_s") {
        return Err(TraceError::NoEnd { line: header_line });
    }
    let mut jobs = vec![];
    for (line, l) in lines {
        if l.trim().is_empty() {
            continue;
        }
        let cells = split_csv(l).map_err(|problem| TraceError::Csv { line, problem })?;
        if cells.len() != names.len() {
            return Err(TraceError::FieldCount {
                line,
                found: cells.len(),
                expected: names.len(),
            });
        }
        let bad = |f: &str, m: String| TraceError::Value {
            line,
            column: field_at.get(f).map(|(_, c)| c.clone()),
            message: m,
        };
        let get = |f: &str| -> Option<&str> {
            field_at
                .get(f)
                .map(|(i, _)| cells[*i].as_str())
                .filter(|v| !v.is_empty())
        };
        let need = |f: &str| get(f).ok_or_else(|| bad(f, "is required and empty".into()));
        let time = |f: &str| -> Result<Option<Millis>, TraceError> {
            get(f)
                .map(parse_seconds)
                .transpose()
                .map_err(|m| bad(f, m.to_string()))
        };
        let submit =
            parse_seconds(need("submit_s")?).map_err(|m| bad("submit_s", m.to_string()))?;
        let share = need("share")?.to_string();
        let gpus = parse_u32(need("gpus")?, 1, 65_536).map_err(|m| bad("gpus", m))?;
        let nodes = get("nodes")
            .map(|v| parse_u32(v, 1, 10_000))
            .transpose()
            .map_err(|m| bad("nodes", m))?;
        if let Some(n) = nodes {
            if gpus % n != 0 {
                return Err(bad(
                    "nodes",
                    format!("{gpus} GPUs do not split evenly over {n} nodes"),
                ));
            }
        }
        let duration = time("duration_s")?;
        let time_limit_s = get("time_limit_s")
            .map(|v| match v.parse::<u64>() {
                Ok(t) if (1..=MAX_TRACE_SECONDS).contains(&t) => Ok(t),
                _ => Err(format!(
                    "must be whole seconds, 1-{MAX_TRACE_SECONDS}, got {v:?}"
                )),
            })
            .transpose()
            .map_err(|m| bad("time_limit_s", m))?;
        let checkpoint_every_s = get("checkpoint_every_s")
            .map(|v| match v.parse::<u64>() {
                Ok(t) if (MIN_CHECKPOINT_EVERY_S..=MAX_TRACE_SECONDS).contains(&t) => Ok(t),
                _ => Err(format!(
                    "must be whole seconds, {MIN_CHECKPOINT_EVERY_S}-{MAX_TRACE_SECONDS}, got {v:?}"
                )),
            })
            .transpose()
            .map_err(|m| bad("checkpoint_every_s", m))?;
        if duration.is_none() && time_limit_s.is_none() {
            return Err(bad(
                "duration_s",
                "is empty and so is time_limit_s: the job would never end".into(),
            ));
        }
        if duration == Some(0) {
            return Err(bad("duration_s", "must be more than 0".into()));
        }
        let priority = get("priority")
            .map(|v| parse_u32(v, 0, 9999))
            .transpose()
            .map_err(|m| bad("priority", m))?
            .unwrap_or(0);
        jobs.push(TraceJob {
            line,
            name: get("name").map_or_else(|| format!("j{line}"), str::to_string),
            submit,
            share,
            gpus,
            user: get("user").map(str::to_string),
            nodes,
            unit: get("unit").map(str::to_string),
            duration,
            priority,
            time_limit_s,
            checkpoint: time("checkpoint_s")?,
            checkpoint_every_s,
        });
    }
    if jobs.is_empty() {
        return Err(TraceError::NoJobs { line: header_line });
    }
    jobs.sort_by_key(|j| j.submit);
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> TraceError {
        parse(text, &Columns::default()).expect_err("a bad trace")
    }

    #[test]
    fn reads_fields_in_any_order_with_decimals() {
        let t = "gpus,share,submit_s,duration_s,priority\n2,a,1.5,0.2,50\n1,b,0,10,\n";
        let jobs = parse(t, &Columns::default()).unwrap();
        assert_eq!(jobs.len(), 2);
        // Sorted by submit time: line 3 first.
        assert_eq!((jobs[0].line, jobs[0].submit, jobs[0].priority), (3, 0, 0));
        assert_eq!(jobs[1].submit, 1500);
        assert_eq!(jobs[1].duration, Some(200));
        assert_eq!((jobs[1].gpus, jobs[1].priority), (2, 50));
        assert_eq!(jobs[1].name, "j2");
    }

    #[test]
    fn bad_rows_name_the_line_and_the_column() {
        let head = "submit_s,share,gpus,duration_s\n";
        let e = err(&format!("{head}0,a,1,5\n3,a,zero,5\n"));
        assert_eq!((e.line(), e.column()), (3, Some("gpus")));
        assert!(e
            .to_string()
            .starts_with("line 3, column gpus: must be a whole number"));
        let e = err(&format!("{head}-1,a,1,5\n"));
        assert_eq!((e.line(), e.column()), (2, Some("submit_s")));
        let e = err(&format!("{head}1.2345,a,1,5\n"));
        assert!(e.to_string().contains("at most 3 decimals"), "{e}");
        let e = err(&format!("{head}1,,1,5\n"));
        assert_eq!(e.to_string(), "line 2, column share: is required and empty");
        let e = err(&format!("{head}1,a,1\n"));
        assert_eq!(e.to_string(), "line 2: has 3 fields, the header has 4");
        let e = err("submit_s,share,gpus,nodes,duration_s\n\n0,a,6,4,1\n");
        assert_eq!((e.line(), e.column()), (3, Some("nodes")));
        assert!(e.to_string().contains("do not split evenly"));
        let e = err("submit_s,share,gpus,duration_s,priority\n0,a,1,1,10000\n");
        assert_eq!(e.column(), Some("priority"));
    }

    #[test]
    fn the_header_is_checked() {
        let e = err("submit_s,share,gpu,duration_s\n0,a,1,1\n");
        assert_eq!((e.line(), e.column()), (1, Some("gpu")));
        assert!(e.to_string().contains("--columns gpu=FIELD"), "{e}");
        let e = err("submit_s,share,duration_s\n0,a,1\n");
        assert!(e.to_string().contains("required field gpus"), "{e}");
        let e = err("submit_s,share,gpus\n0,a,1\n");
        assert!(e.to_string().contains("duration_s or time_limit_s"), "{e}");
        assert!(err("").to_string().contains("empty"));
    }

    #[test]
    fn a_column_mapping_reads_a_foreign_file() {
        let itp = "job_id,tenant,submit_s,duration_s,num_gpu\nx-1,cluster07,1999,13423,8\n";
        let cols = Columns::parse("job_id=name,tenant=share,num_gpu=gpus").unwrap();
        let jobs = parse(itp, &cols).unwrap();
        assert_eq!(jobs[0].name, "x-1");
        assert_eq!(jobs[0].share, "cluster07");
        assert_eq!((jobs[0].gpus, jobs[0].submit), (8, 1_999_000));
        let cols = Columns::parse("job_id=-,tenant=share,num_gpu=gpus").unwrap();
        assert_eq!(parse(itp, &cols).unwrap()[0].name, "j2");
        assert!(Columns::parse("tenant=shares")
            .unwrap_err()
            .to_string()
            .contains("not a trace field"));
        assert!(Columns::parse("tenant")
            .unwrap_err()
            .to_string()
            .contains("FILE_COLUMN=FIELD"));
    }

    #[test]
    fn each_error_has_its_kind() {
        let e = err("submit_s,share,gpu,duration_s\n0,a,1,1\n");
        assert_eq!(
            e,
            TraceError::UnknownColumn {
                line: 1,
                column: "gpu".into()
            }
        );
        let e = err("submit_s,share,gpus,size\n0,a,1,1\n");
        assert!(
            matches!(&e, TraceError::UnknownColumn { column, .. } if column == "size"),
            "{e:?}"
        );
        let e = err("submit_s,share,gpus,gpus,duration_s\n0,a,1,1,1\n");
        assert!(
            matches!(&e, TraceError::FieldTwice { field: "gpus", other, .. } if other == "gpus"),
            "{e:?}"
        );
        let e = err("submit_s,share,duration_s\n0,a,1\n");
        assert!(
            matches!(e, TraceError::MissingField { field: "gpus", .. }),
            "{e:?}"
        );
        assert_eq!(err(""), TraceError::Empty);
        assert_eq!(
            err("submit_s,share,gpus\n0,a,1\n"),
            TraceError::NoEnd { line: 1 }
        );
        assert_eq!(
            err("submit_s,share,gpus,duration_s\n"),
            TraceError::NoJobs { line: 1 }
        );
        let e = err("submit_s,share,gpus,duration_s\n0,a,\"1\n");
        assert_eq!(
            e,
            TraceError::Csv {
                line: 2,
                problem: "a quoted field is not closed"
            }
        );
        let e = err("submit_s,share,gpus,duration_s\n0,a,1\n");
        assert!(
            matches!(
                e,
                TraceError::FieldCount {
                    line: 2,
                    found: 3,
                    expected: 4
                }
            ),
            "{e:?}"
        );
        let e = err("submit_s,share,gpus,duration_s\n0,a,zero,1\n");
        assert!(matches!(e, TraceError::Value { line: 2, .. }), "{e:?}");
        assert_eq!(
            Columns::parse("a=b=c,"),
            Err(ColumnsError::NotAField {
                part: "a=b=c".into(),
                field: "b=c".into()
            })
        );
        assert_eq!(parse_seconds("1.5"), Ok(1_500));
        assert_eq!(
            parse_seconds("1.2345"),
            Err(SecondsError::NotSeconds("1.2345".into()))
        );
        let e = parse_seconds("1000000001").unwrap_err();
        assert_eq!(e, SecondsError::TooLarge("1000000001".into()));
        assert_eq!(e.to_string(), "at most 1000000000 seconds, got 1000000001");
        assert_eq!(
            Columns::parse("a=-,a=share"),
            Err(ColumnsError::MappedTwice { column: "a".into() })
        );
    }

    #[test]
    fn quoted_fields() {
        assert_eq!(
            split_csv(r#"a,"b,c","d""e""#).unwrap(),
            ["a", "b,c", "d\"e"]
        );
        assert!(split_csv(r#"a,"b"#).is_err());
        assert!(split_csv(r#"a,b"c"#).is_err());
    }
}
