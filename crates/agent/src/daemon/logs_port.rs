//! The agent's log port (`tranche logs`, and the controllers' log proxy): jobs' output
//! over QUIC with mTLS, with its own reader authorization (owners, admins, operators
//! and controllers), and the hourly sweep of kept output past `output_keep_days`.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};
use tranche_client::ClientError;
use tranche_model::JobId;
use tranche_proto::{ApiError, Query, Response};

use super::{Agent, AttemptKey};
use crate::exec::{AttemptNo, OutputFile};

impl Agent {
    /// Once an hour, removes the kept output older than `output_keep_days`.
    pub(super) async fn sweep_output(self: Arc<Self>) {
        let days = self.cfg.output_keep_days;
        if days == 0 {
            return;
        }
        let mut tick = tokio::time::interval(Duration::from_secs(3600));
        loop {
            tick.tick().await;
            let keep = Duration::from_secs(u64::from(days) * 86_400);
            let Some(before) = std::time::SystemTime::now().checked_sub(keep) else {
                continue;
            };
            let spool = self.cfg.spool_dir.clone();
            let n =
                tokio::task::spawn_blocking(move || crate::exec::sweep_kept_logs(&spool, before))
                    .await
                    .unwrap_or(0);
            if n > 0 {
                info!(files = n, days, "removed job output past output_keep_days");
            }
        }
    }

    /// What a missing output's error adds: how long this agent keeps output.
    fn keep_note(&self) -> String {
        match self.cfg.output_keep_days {
            0 => String::new(),
            d => format!(
                " (this agent keeps an attempt's output for output_keep_days = {d} after it ended)"
            ),
        }
    }

    /// Serves jobs' output: one `LogRequest` per bidirectional stream, answered with
    /// chunks and an end frame. Admins, operators and controllers may read any job; a
    /// user only its own (asked of the controllers); no other role. The output is read
    /// from wherever it went: the attempt's spool files, kept in `<spool>/logs` once it
    /// has ended, or the job's `--output`/`--error` files, found through the record the
    /// shim made of them (`outputs.json`, kept beside those logs) and read only while
    /// each path still leads to the file the job was given.
    pub(super) async fn serve_logs(self: Arc<Self>) {
        while let Some(incoming) = self.logs.accept().await {
            let me = self.clone();
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                if tranche_tls::peer_identity(&conn).is_err() {
                    conn.close(2u32.into(), b"no usable client certificate");
                    return;
                }
                let admitted = match me.logs_gate.admit(&conn) {
                    Ok(a) => Arc::new(a),
                    Err(why) => {
                        warn!(client = %conn.remote_address(), "log port refused a connection: {why}");
                        conn.close(tranche_tls::CLOSE_TOO_MANY.into(), why.as_bytes());
                        return;
                    }
                };
                while let Ok((send, recv)) = conn.accept_bi().await {
                    let me = me.clone();
                    let admitted = admitted.clone();
                    tokio::spawn(async move { me.log_stream(&admitted, send, recv).await });
                }
            });
        }
    }

    async fn log_stream(
        &self,
        admitted: &tranche_tls::Admitted,
        mut send: quinn::SendStream,
        mut recv: quinn::RecvStream,
    ) {
        use tranche_proto::{frame, LogFrame, LogRequest, MAX_LOG_REQUEST};
        let who = admitted.who.clone();
        // A request is a few bytes: its frame is capped, and reserved from the port's
        // budgets while it is read and decoded.
        let req = frame::read_payload_within(
            &mut recv,
            MAX_LOG_REQUEST,
            admitted.frame_timeout(),
            |len| admitted.reserve(len),
        )
        .await
        .and_then(|p| match p {
            Some((p, _reserved)) => frame::decode_payload::<LogRequest>(&p),
            None => Err(frame::FrameError::Truncated),
        });
        let req: LogRequest = match req {
            Ok(r) => r,
            Err(e) => {
                let _ = frame::write(
                    &mut send,
                    &LogFrame::Error(ApiError::BadRequest(e.to_string())),
                )
                .await;
                let _ = send.finish();
                return;
            }
        };
        let r = self.stream_log(&who, &req, &mut send).await;
        if let Err(e) = r {
            let _ = frame::write(&mut send, &LogFrame::Error(e)).await;
        }
        let _ = send.finish();
    }

    async fn may_read(&self, who: &tranche_tls::Identity, job: JobId) -> Result<(), ApiError> {
        use tranche_tls::Role;
        match who.role {
            // A controller fetches output for its HTTP API's callers, whom it has
            // checked by this same rule.
            Role::Admin | Role::Operator | Role::Controller => Ok(()),
            Role::User => match self
                .client
                .read(Query::Job(tranche_model::JobRef::job(job)), true)
                .await
            {
                Ok(Response::Job(j)) if j.spec.user.as_str() == who.name => Ok(()),
                Ok(Response::Job(j)) => Err(ApiError::Unauthorized(format!(
                    "{who} may read only its own jobs' output; job {job} belongs to {}",
                    j.spec.user
                ))),
                Ok(other) => Err(ApiError::Unavailable(format!(
                    "unexpected answer to a job query: {}",
                    Response::kind(&other)
                ))),
                Err(ClientError::Api(e)) => Err(e),
                Err(e) => Err(ApiError::Unavailable(format!(
                    "cannot check the job's owner with the controllers: {e}"
                ))),
            },
            _ => Err(ApiError::Unauthorized(format!(
                "{who} may not read jobs' output"
            ))),
        }
    }

    async fn stream_log(
        &self,
        who: &tranche_tls::Identity,
        req: &tranche_proto::LogRequest,
        send: &mut quinn::SendStream,
    ) -> Result<(), ApiError> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        use tranche_proto::{frame, LogFrame};
        self.may_read(who, req.job).await?;
        let job = req.job;
        // An attempt that has just ended is being filed: its output is in neither place
        // for a moment.
        for _ in 0..200 {
            if !self.filing.lock().unwrap().iter().any(|k| k.job == job) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The attempt: the one asked for, else the latest running here, else the
        // latest kept.
        let running: Vec<AttemptNo> = {
            let l = self.attempts.lock().unwrap();
            l.keys()
                .filter(|k| k.job == job)
                .map(|k| k.attempt)
                .collect()
        };
        let attempt = match req.attempt {
            Some(a) => AttemptNo(a),
            None => match running.iter().max() {
                Some(a) => *a,
                None => (1..=64)
                    .rev()
                    .map(AttemptNo)
                    .find(|a| {
                        crate::exec::kept_output(&self.cfg.spool_dir, job, *a, false).is_some()
                    })
                    .ok_or_else(|| {
                        ApiError::NotFound(format!(
                            "no output of job {job} on this node{}",
                            self.keep_note()
                        ))
                    })?,
            },
        };
        let file_now = || -> Option<(OutputFile, bool)> {
            let l = self.attempts.lock().unwrap();
            if let Some(e) = l.get(&AttemptKey { job, attempt }) {
                let running = e.exit().is_none();
                return e.attempt.output(req.stderr).map(|f| (f, running));
            }
            drop(l);
            crate::exec::kept_output(&self.cfg.spool_dir, job, attempt, req.stderr)
                .map(|f| (f, false))
        };
        let mut offset = req.offset;
        let mut buf = vec![0u8; 64 * 1024];
        // An attempt that ends while it is read has its output moved to the kept
        // logs: a file gone between finding and opening it is looked for again.
        let mut moved_retries = 100;
        loop {
            let Some((file, running)) = file_now() else {
                if self
                    .filing
                    .lock()
                    .unwrap()
                    .contains(&AttemptKey { job, attempt })
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                return Err(ApiError::NotFound(format!(
                    "no output of job {job} attempt {attempt} on this node{}",
                    self.keep_note()
                )));
            };
            // A file outside the spool is read only while it is still the one the job
            // was given (see `OutputFile::open`).
            let opened = tokio::task::spawn_blocking(move || {
                file.open().map_err(|e| {
                    let gone = e.kind() == std::io::ErrorKind::NotFound;
                    (
                        gone,
                        ApiError::NotFound(format!("{}: {e}", file.path().display())),
                    )
                })
            })
            .await
            .map_err(|e| ApiError::Unavailable(e.to_string()))?;
            let opened = match opened {
                Ok(f) => f,
                Err((true, _)) if moved_retries > 0 => {
                    moved_retries -= 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Err((_, e)) => return Err(e),
            };
            let mut f = tokio::fs::File::from_std(opened);
            f.seek(std::io::SeekFrom::Start(offset))
                .await
                .map_err(|e| ApiError::Unavailable(e.to_string()))?;
            loop {
                let n = f
                    .read(&mut buf)
                    .await
                    .map_err(|e| ApiError::Unavailable(e.to_string()))?;
                if n == 0 {
                    break;
                }
                offset += n as u64;
                if frame::write(send, &LogFrame::Chunk(buf[..n].to_vec()))
                    .await
                    .is_err()
                {
                    return Ok(());
                }
            }
            if !req.follow || !running {
                let _ = frame::write(
                    send,
                    &LogFrame::End {
                        attempt: attempt.0,
                        running,
                    },
                )
                .await;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
