//! Client sessions: each client request is applied at most once, however often it is
//! retried and whichever copy commits first.
//!
//! A client numbers its requests (`seq`) and sends each retry of a request with the same
//! number, together with the lowest number it still waits for (`first_incomplete`).
//! Without this, a request sent to a controller that did not answer in time, then
//! retried elsewhere, can commit twice, the second copy after later requests of the same
//! client: an acknowledged "priority 97" undone by a late copy of the earlier
//! "priority 68". With it, the state machine remembers the answer to each request the
//! client may still retry, applies a request only the first time, and answers its copies
//! with the first answer. Answers below `first_incomplete` are forgotten: the client has
//! them. A session unused for [`SESSION_IDLE_MS`] (entry time) is forgotten whole.
//!
//! A session is the pair (identity, client id): the identity is the caller's
//! certificate identity, which the controller writes into the request id itself, so a
//! client id learnt by someone else reaches neither the answers nor the
//! `first_incomplete` of its holder's session.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tranche_model::Millis;

use crate::{ApplyError, Command, Outcome, State};

/// How long a session is kept after its last request (entry time), in ms: far beyond
/// any client's retry time.
pub const SESSION_IDLE_MS: Millis = 10 * 60 * 1000;
/// At most this many answers are kept per session; a client with more requests in
/// flight loses the protection for the oldest.
pub const MAX_ANSWERS_PER_SESSION: usize = 1024;

/// Which request of which client a command is (part of the object model, as the
/// client protocol carries it too).
pub use tranche_model::RequestId;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub last_used: Millis,
    /// Answers below this were received by the client.
    pub first_incomplete: u64,
    pub answers: BTreeMap<u64, Result<Outcome, ApplyError>>,
}

/// What [`State::apply_request`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub result: Result<Outcome, ApplyError>,
    /// False when the request had been applied before (the state did not change).
    pub fresh: bool,
}

impl State {
    /// Applies a client's command at most once per request id (see the module docs);
    /// without an id, as [`State::apply`].
    pub fn apply_request(
        &mut self,
        req: Option<&RequestId>,
        cmd: &Command,
        now: Millis,
    ) -> Applied {
        let Some(req) = req else {
            return Applied {
                result: self.apply(cmd, now),
                fresh: true,
            };
        };
        self.expire_sessions(now);
        let key = (req.identity.clone(), req.client);
        let s = self.sessions.entry(key.clone()).or_default();
        s.last_used = now;
        s.first_incomplete = s.first_incomplete.max(req.first_incomplete);
        let keep = s.first_incomplete;
        s.answers.retain(|seq, _| *seq >= keep);
        if let Some(answer) = s.answers.get(&req.seq) {
            return Applied {
                result: answer.clone(),
                fresh: false,
            };
        }
        if req.seq < s.first_incomplete {
            return Applied {
                result: Err(ApplyError::Conflict(format!(
                    "request {} of this client was answered already; this copy of it is ignored",
                    req.seq
                ))),
                fresh: false,
            };
        }
        let result = self.apply(cmd, now);
        let s = self.sessions.get_mut(&key).expect("session exists");
        s.answers.insert(req.seq, result.clone());
        while s.answers.len() > MAX_ANSWERS_PER_SESSION {
            s.answers.pop_first();
        }
        Applied {
            result,
            fresh: true,
        }
    }

    /// Forgets sessions idle for [`SESSION_IDLE_MS`]; looks at most once a minute.
    fn expire_sessions(&mut self, now: Millis) {
        if now < self.sessions_swept_at + 60_000 {
            return;
        }
        self.sessions_swept_at = now;
        self.sessions
            .retain(|_, s| now.saturating_sub(s.last_used) < SESSION_IDLE_MS);
    }
}
