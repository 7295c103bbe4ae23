//! CloudWatch Logs' `DescribeLogStreams` and `GetLogEvents` over training jobs'
//! output: log group `/aws/sagemaker/TrainingJobs`, one stream per training job (an
//! attempt of a service job) and node, named as SageMaker names them,
//! `<training job>/algo-<rank + 1>-<epoch second the attempt started>`.
//!
//! A stream's events are the lines the job wrote on that node, read from the node's
//! agent as `tranche logs` reads them: its standard output, then its standard error.
//! The agent keeps no time per line, so every event carries the time its attempt
//! started. Tokens are positions in the two outputs (`f/<stdout byte>/<stderr byte>`
//! forward, `b/…` backward); a forward token at the end answers no events and itself,
//! so a reader polls with it for the lines written since. A line still being written
//! (no newline yet) is an event once its attempt has ended.

use std::collections::VecDeque;

use super::training_jobs::LOG_GROUP;
use super::*;

/// The most bytes of messages one `GetLogEvents` answer carries (CloudWatch's 1 MB).
const MAX_PAGE_BYTES: usize = 1 << 20;

fn invalid_parameter(message: impl Into<String>) -> AwsError {
    AwsError::json_client("InvalidParameterException", message)
}

fn no_group(group: &str) -> AwsError {
    AwsError::json_client(
        "ResourceNotFoundException",
        format!(
            "The specified log group does not exist: {group} (this cluster's log group is {LOG_GROUP})"
        ),
    )
}

/// Checks that a request names the log group of training jobs (by name or ARN).
fn check_group(name: &Option<String>, identifier: &Option<String>) -> AwsResult<()> {
    let group = name
        .as_ref()
        .or(identifier.as_ref())
        .ok_or_else(|| invalid_parameter("logGroupName or logGroupIdentifier is required"))?;
    let by_arn = group
        .strip_prefix("arn:aws:logs:")
        .and_then(|rest| rest.split_once(":log-group:"))
        .map(|(_, g)| g);
    match by_arn.unwrap_or(group) == LOG_GROUP {
        true => Ok(()),
        false => Err(no_group(group)),
    }
}

fn no_stream(stream: &str) -> AwsError {
    AwsError::json_client(
        "ResourceNotFoundException",
        format!("The specified log stream does not exist: {stream}"),
    )
}

/// A log stream of training job `name`: rank `rank` of its attempt.
struct Stream {
    name: String,
    created: Millis,
    last: Millis,
}

/// One line of a job's output, from byte `start` of its stream.
struct Line {
    start: u64,
    text: String,
}

/// Which part of an output a read keeps, and at most how many lines and bytes of
/// messages.
#[derive(Clone, Copy)]
enum Keep {
    /// The first lines from the position on.
    Head(usize, usize),
    /// The last lines before the position.
    Tail(usize, usize),
}

/// Splits an output, read in chunks from byte `from`, into the lines a page keeps.
struct Lines {
    keep: Keep,
    /// Lines must end at or before this byte.
    to: Option<u64>,
    lines: VecDeque<Line>,
    bytes: usize,
    /// The bytes of the line being read, which starts at `pos`.
    partial: Vec<u8>,
    pos: u64,
    /// The page is full, or reached `to`: the rest is not read.
    full: bool,
}

impl Lines {
    fn new(from: u64, to: Option<u64>, keep: Keep) -> Lines {
        Lines {
            keep,
            to,
            lines: VecDeque::new(),
            bytes: 0,
            partial: Vec::new(),
            pos: from,
            full: false,
        }
    }

    /// Keeps one line; whether the page is full.
    fn take(&mut self, end: u64) -> bool {
        let raw = std::mem::take(&mut self.partial);
        let text = raw.strip_suffix(b"\n").unwrap_or(&raw);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let text = String::from_utf8_lossy(text).into_owned();
        self.bytes += text.len();
        self.lines.push_back(Line {
            start: self.pos,
            text,
        });
        self.pos = end;
        match self.keep {
            Keep::Head(n, max) => self.lines.len() >= n || self.bytes >= max,
            Keep::Tail(n, max) => {
                while self.lines.len() > n || (self.bytes > max && self.lines.len() > 1) {
                    let l = self.lines.pop_front().expect("more than one line");
                    self.bytes -= l.text.len();
                }
                false
            }
        }
    }

    /// Reads the next chunk.
    fn push(&mut self, chunk: &[u8]) {
        let mut chunk = chunk;
        while !self.full && !chunk.is_empty() {
            let Some(i) = chunk.iter().position(|b| *b == b'\n') else {
                self.partial.extend_from_slice(chunk);
                return;
            };
            self.partial.extend_from_slice(&chunk[..=i]);
            chunk = &chunk[i + 1..];
            let end = self.pos + self.partial.len() as u64;
            if self.to.is_some_and(|t| end > t) {
                self.full = true;
            } else {
                self.full = self.take(end);
            }
        }
    }

    /// The lines kept, and where the complete lines read end. A last line without a
    /// newline counts only where the output is `complete`.
    fn finish(mut self, complete: bool) -> (Vec<Line>, u64) {
        if !self.full && complete && !self.partial.is_empty() {
            let end = self.pos + self.partial.len() as u64;
            if self.to.is_none_or(|t| end <= t) {
                self.take(end);
            }
        }
        (self.lines.into(), self.pos)
    }
}

/// Where a stream's reading is: a byte of standard output and one of standard error.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pos {
    out: u64,
    err: u64,
}

fn token(dir: char, p: Pos) -> String {
    format!("{dir}/{}/{}", p.out, p.err)
}

fn open_token(t: &str) -> AwsResult<(char, Pos)> {
    let bad = || invalid_parameter(format!("The specified nextToken is invalid: `{t}`"));
    let mut parts = t.split('/');
    let dir = match parts.next() {
        Some("f") => 'f',
        Some("b") => 'b',
        _ => return Err(bad()),
    };
    let mut n = || -> AwsResult<u64> { parts.next().and_then(|x| x.parse().ok()).ok_or_else(bad) };
    let p = Pos {
        out: n()?,
        err: n()?,
    };
    match parts.next() {
        None => Ok((dir, p)),
        Some(_) => Err(bad()),
    }
}

/// The backward token of a page of `out` then `err` lines: what comes before its
/// first line (all of standard output comes before standard error); `end` where the
/// page has no line.
fn back_of(out: &[Line], err: &[Line], end: Pos) -> Pos {
    match (out.first(), err.first()) {
        (Some(l), _) => Pos {
            out: l.start,
            err: 0,
        },
        (None, Some(l)) => Pos {
            out: end.out,
            err: l.start,
        },
        (None, None) => end,
    }
}

/// The time every event of attempt `a` carries: when it started.
fn event_time(a: &Attempt) -> Millis {
    a.ran_from().unwrap_or(a.scheduled_at)
}

impl Endpoint {
    /// The streams of attempt `a` of `j`, training job `name`: one per node, once the
    /// attempt has run.
    fn streams_of(name: &str, a: &Attempt) -> Vec<Stream> {
        let Some(t) = a.ran_from() else {
            return vec![];
        };
        let last = a.ended_at.unwrap_or(t).max(t);
        (0..a.allocation.len())
            .map(|rank| Stream {
                name: format!("{name}/algo-{}-{}", rank + 1, t / 1000),
                created: t,
                last,
            })
            .collect()
    }

    /// The training jobs a stream-name prefix may be of: the one it names when it has
    /// a `/`; otherwise those of the jobs in the state the caller may read, newest
    /// first, at most [`MAX_JOBS_SCANNED`] jobs looked at.
    async fn streams_under(&self, cx: &Ctx<'_>, prefix: &str) -> AwsResult<Vec<Stream>> {
        if let Some((name, _)) = prefix.split_once('/') {
            return Ok(match self.training_job(cx, name).await? {
                Some((j, n)) => j
                    .attempts
                    .iter()
                    .filter(|a| a.number == n)
                    .flat_map(|a| Self::streams_of(name, a))
                    .collect(),
                None => vec![],
            });
        }
        let st = cx.state().await?;
        let mut out = Vec::new();
        for j in st.jobs.values().rev().take(MAX_JOBS_SCANNED) {
            let Some(sm) = &j.spec.sagemaker else {
                continue;
            };
            if tranche_controller::service::may_read_output(&cx.who, j).is_err() {
                continue;
            }
            for a in &j.attempts {
                let name = format!("{}-{}-{}", sm.training_job_name, j.id.0, a.number);
                if name.starts_with(prefix) || prefix.starts_with(&name) {
                    out.extend(Self::streams_of(&name, a));
                }
            }
        }
        Ok(out)
    }

    pub(crate) async fn describe_log_streams(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Req {
            log_group_name: Option<String>,
            log_group_identifier: Option<String>,
            log_stream_name_prefix: Option<String>,
            order_by: Option<String>,
            descending: Option<bool>,
            next_token: Option<String>,
            limit: Option<i64>,
        }
        let r: Req = parse(body)?;
        check_group(&r.log_group_name, &r.log_group_identifier)?;
        let by_time = match r.order_by.as_deref() {
            None | Some("LogStreamName") => false,
            Some("LastEventTime") => true,
            Some(o) => {
                return Err(AwsError::bad_enum(
                    "orderBy",
                    o,
                    &["LogStreamName", "LastEventTime"],
                ))
            }
        };
        let prefix = r.log_stream_name_prefix.unwrap_or_default();
        if by_time && !prefix.is_empty() {
            return Err(invalid_parameter(
                "Cannot order by LastEventTime with a logStreamNamePrefix.",
            ));
        }
        let limit = r.limit.unwrap_or(50);
        if !(1..=50).contains(&limit) {
            return Err(invalid_parameter(format!(
                "limit must be 1 to 50, got {limit}"
            )));
        }
        let start = match &r.next_token {
            None => 0,
            Some(t) => t.parse::<usize>().map_err(|_| {
                invalid_parameter(format!("The specified nextToken is invalid: `{t}`"))
            })?,
        };
        let mut streams: Vec<Stream> = self
            .streams_under(cx, &prefix)
            .await?
            .into_iter()
            .filter(|s| s.name.starts_with(&prefix))
            .collect();
        if by_time {
            streams.sort_by(|a, b| (a.last, &a.name).cmp(&(b.last, &b.name)));
        } else {
            streams.sort_by(|a, b| a.name.cmp(&b.name));
        }
        if r.descending.unwrap_or(false) {
            streams.reverse();
        }
        let end = start.saturating_add(limit as usize).min(streams.len());
        let page: Vec<Value> = streams
            .get(start..end)
            .unwrap_or(&[])
            .iter()
            .map(|s| {
                json!({
                    "logStreamName": s.name,
                    "creationTime": s.created,
                    "firstEventTimestamp": s.created,
                    "lastEventTimestamp": s.created,
                    "lastIngestionTime": s.last,
                    "arn": format!(
                        "arn:aws:logs:{}:{}:log-group:{LOG_GROUP}:log-stream:{}",
                        self.arns.region, self.arns.account, s.name
                    ),
                    "storedBytes": 0,
                })
            })
            .collect();
        let mut v = json!({ "logStreams": page });
        if end < streams.len() {
            v["nextToken"] = json!(end.to_string());
        }
        Ok(v)
    }

    /// Lines of one output (`stderr` or not) of rank `rank` of attempt `a` of `j`: from
    /// byte `from` on (`Keep::Head`), or before byte `to` (`Keep::Tail`; `None`: the
    /// end). Also where its complete lines read end.
    #[allow(clippy::too_many_arguments)]
    async fn read_lines(
        &self,
        cx: &Ctx<'_>,
        j: &Job,
        a: &Attempt,
        rank: usize,
        stderr: bool,
        from: u64,
        to: Option<u64>,
        keep: Keep,
    ) -> AwsResult<(Vec<Line>, u64)> {
        let (client, addr, node) =
            tranche_http::output_source(cx.api, j, a, Some(a.allocation[rank].node.as_str()))
                .await
                .map_err(|e| AwsError::server(e.body.error.message))?;
        let req = tranche_proto::LogRequest {
            job: j.id,
            attempt: Some(a.number),
            stderr,
            follow: false,
            offset: from,
        };
        let mut lines = Lines::new(from, to, keep);
        let r = client
            .logs_paced(addr, node.as_str(), &req, |chunk| {
                lines.push(&chunk);
                std::future::ready(!lines.full)
            })
            .await;
        let running = match r {
            Ok((_, running)) => running,
            Err(e) => {
                return Err(AwsError::server(format!(
                    "node {node}'s agent did not give the output of training job attempt {}: {e}",
                    a.number
                )))
            }
        };
        Ok(lines.finish(!running || a.end.is_some()))
    }

    pub(crate) async fn get_log_events(&self, cx: &Ctx<'_>, body: &[u8]) -> AwsResult<Value> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Req {
            log_group_name: Option<String>,
            log_group_identifier: Option<String>,
            log_stream_name: Option<String>,
            start_time: Option<i64>,
            end_time: Option<i64>,
            next_token: Option<String>,
            limit: Option<i64>,
            start_from_head: Option<bool>,
            #[allow(dead_code)]
            unmask: Option<bool>,
        }
        let r: Req = parse(body)?;
        check_group(&r.log_group_name, &r.log_group_identifier)?;
        let stream = r
            .log_stream_name
            .ok_or_else(|| invalid_parameter("logStreamName is required"))?;
        let limit = r.limit.unwrap_or(10_000);
        if !(1..=10_000).contains(&limit) {
            return Err(invalid_parameter(format!(
                "limit must be 1 to 10000, got {limit}"
            )));
        }
        let limit = limit as usize;
        let (name, _) = stream.split_once('/').ok_or_else(|| no_stream(&stream))?;
        let (j, n) = self
            .training_job(cx, name)
            .await?
            .ok_or_else(|| no_stream(&stream))?;
        let a = j
            .attempts
            .iter()
            .find(|a| a.number == n)
            .expect("training_job found the attempt");
        let rank = Self::streams_of(name, a)
            .iter()
            .position(|s| s.name == stream)
            .ok_or_else(|| no_stream(&stream))?;
        let (dir, at) = match &r.next_token {
            Some(t) => open_token(t)?,
            None if r.start_from_head.unwrap_or(false) => ('f', Pos { out: 0, err: 0 }),
            None => (
                'b',
                Pos {
                    out: u64::MAX,
                    err: u64::MAX,
                },
            ),
        };
        let t = event_time(a) as i64;
        let in_window = r.start_time.is_none_or(|s| t >= s) && r.end_time.is_none_or(|e| t < e);
        let bytes = |l: &[Line]| l.iter().map(|l| l.text.len()).sum::<usize>();
        // What is left of the page for the second output read: none, or lines and bytes.
        let left = |first: &[Line]| {
            let (n, b) = (
                limit - first.len(),
                MAX_PAGE_BYTES.saturating_sub(bytes(first)),
            );
            (n > 0 && b > 0).then_some((n, b))
        };
        let (lines, fwd, back) = if dir == 'f' {
            let head = Keep::Head(limit, MAX_PAGE_BYTES);
            let (out, out_end) = self
                .read_lines(cx, &j, a, rank, false, at.out, None, head)
                .await?;
            let (err, err_end) = match left(&out) {
                None => (vec![], at.err),
                Some((n, b)) => {
                    self.read_lines(cx, &j, a, rank, true, at.err, None, Keep::Head(n, b))
                        .await?
                }
            };
            let fwd = Pos {
                out: out_end,
                err: err_end,
            };
            let back = back_of(&out, &err, fwd);
            (out.into_iter().chain(err).collect::<Vec<_>>(), fwd, back)
        } else {
            let to = |x: u64| (x != u64::MAX).then_some(x);
            let tail = Keep::Tail(limit, MAX_PAGE_BYTES);
            let (err, err_end) = self
                .read_lines(cx, &j, a, rank, true, 0, to(at.err), tail)
                .await?;
            let (out, out_end) = match left(&err) {
                None => (vec![], at.out),
                Some((n, b)) => {
                    self.read_lines(cx, &j, a, rank, false, 0, to(at.out), Keep::Tail(n, b))
                        .await?
                }
            };
            let fwd = Pos {
                out: to(at.out).unwrap_or(out_end),
                err: to(at.err).unwrap_or(err_end),
            };
            let back = back_of(&out, &err, fwd);
            (out.into_iter().chain(err).collect(), fwd, back)
        };
        // Every event carries the attempt's start: the window keeps all of the page or
        // none of it (the tokens go on from the page either way).
        let lines = if in_window { lines } else { vec![] };
        let ingested = a.ended_at.unwrap_or_else(|| cx.now()).max(t as Millis);
        let events: Vec<Value> = lines
            .iter()
            .map(|l| json!({"timestamp": t, "message": l.text, "ingestionTime": ingested}))
            .collect();
        Ok(json!({
            "events": events,
            "nextForwardToken": token('f', fwd),
            "nextBackwardToken": token('b', back),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(l: &[Line]) -> Vec<&str> {
        l.iter().map(|l| l.text.as_str()).collect()
    }

    fn read(
        chunks: &[&str],
        from: u64,
        to: Option<u64>,
        keep: Keep,
        complete: bool,
    ) -> (Vec<Line>, u64) {
        let mut l = Lines::new(from, to, keep);
        for c in chunks {
            l.push(c.as_bytes());
        }
        l.finish(complete)
    }

    #[test]
    fn lines_split_across_chunks_with_their_places() {
        let (l, end) = read(
            &["ab", "c\nde\r\nf", "g\nhalf"],
            0,
            None,
            Keep::Head(10, MAX_PAGE_BYTES),
            false,
        );
        assert_eq!(texts(&l), ["abc", "de", "fg"]);
        assert_eq!(l.iter().map(|l| l.start).collect::<Vec<_>>(), [0, 4, 8]);
        // The line still being written is not an event until the output is complete.
        assert_eq!(end, 11);
        let (l, end) = read(
            &["ab", "c\nde\r\nf", "g\nhalf"],
            0,
            None,
            Keep::Head(10, MAX_PAGE_BYTES),
            true,
        );
        assert_eq!(texts(&l), ["abc", "de", "fg", "half"]);
        assert_eq!(end, 15);
        // A page of two stops after its second line; the next goes on from there.
        let (l, end) = read(&["a\nb\nc\n"], 0, None, Keep::Head(2, MAX_PAGE_BYTES), true);
        assert_eq!((texts(&l), end), (vec!["a", "b"], 4));
    }

    #[test]
    fn a_tail_keeps_the_last_lines_before_its_end() {
        let (l, end) = read(
            &["a\nb\nc\nd\n"],
            0,
            Some(6),
            Keep::Tail(2, MAX_PAGE_BYTES),
            true,
        );
        assert_eq!((texts(&l), end), (vec!["b", "c"], 6));
        let (l, _) = read(
            &["a\nb\nc\nd"],
            0,
            None,
            Keep::Tail(3, MAX_PAGE_BYTES),
            true,
        );
        assert_eq!(texts(&l), ["b", "c", "d"]);
        // Bytes bound a page as lines do: a tail keeps at least its last line.
        let (l, _) = read(&["aaaa\nbb\ncc\n"], 0, None, Keep::Tail(9, 4), true);
        assert_eq!(texts(&l), ["bb", "cc"]);
        let (l, end) = read(&["aaaa\nbb\ncc\n"], 0, None, Keep::Head(9, 5), true);
        assert_eq!((texts(&l), end), (vec!["aaaa", "bb"], 8));
    }

    #[test]
    fn tokens_round_trip_and_others_are_refused() {
        let p = Pos { out: 12, err: 3 };
        assert_eq!(open_token(&token('f', p)).unwrap(), ('f', p));
        assert_eq!(open_token("b/0/0").unwrap(), ('b', Pos { out: 0, err: 0 }));
        for bad in ["", "x/1/2", "f/1", "f/1/2/3", "f/a/2"] {
            let e = open_token(bad).unwrap_err();
            assert_eq!(e.code, "InvalidParameterException");
            assert!(e.message.contains("nextToken"), "{}", e.message);
        }
    }
}
