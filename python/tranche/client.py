"""The cluster client: one object per cluster, talking HTTPS to any of its controllers.

It speaks HTTPS with the standard library alone (``http.client`` over ``ssl``, kept-alive
connections pooled per controller, safe to share between threads). Every controller
answers every call (writes are forwarded to the leader), so the client tries the
controllers in turn: a refused connection or a 503 (an election)
moves it to the next one. Submits always carry a client token, so a retried submit
never makes a second job.
"""

from __future__ import annotations

import http.client
import json as _jsonlib
import os
import re
import socket
import ssl
import threading
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Mapping, Sequence
from urllib.parse import quote, urlencode, urlsplit

from .errors import ConnectionFailed, NotFound, TrancheError, from_response

#: The TLS name every controller's certificate carries, whatever address it is dialled at.
CONTROLLER_NAME = "controller.tranche"

#: Job states after which nothing more happens.
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})

_DURATION = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")


def parse_duration(value: int | float | str | None) -> int | None:
    """Seconds from ``3600``, ``"4h"``, ``"90m"``, ``"30s"``, ``"2d"`` or ``"HH:MM:SS"``."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a text such as '4h'")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return int(value)
    m = _DURATION.match(value)
    if m:
        return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    parts = value.strip().split(":")
    if 1 <= len(parts) <= 3 and all(p.isdigit() for p in parts):
        secs = 0
        for p in parts:
            secs = secs * 60 + int(p)
        return secs
    raise ValueError(f"duration {value!r}: use seconds, 4h, 90m, 30s, 2d or HH:MM:SS")


@dataclass(frozen=True)
class Event:
    """One server-sent event: ``kind`` is ``job``, ``share`` or ``reset``; ``index`` is
    the log index of the entry that caused it."""

    kind: str
    data: dict[str, Any]
    index: int


class _Conn(http.client.HTTPSConnection):
    """An HTTPS connection to a controller's address that verifies the controller's
    certificate under its TLS name, whatever the address."""

    def __init__(self, host: str, port: int, *, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(host, port, context=context, timeout=timeout)
        self._tls = context

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._tls.wrap_socket(sock, server_hostname=CONTROLLER_NAME)


#: Failures of a connection that was idle in the pool: the controller closed it, so
#: the request never reached it and may be sent again on a new one.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ssl.SSLEOFError)


@dataclass
class _Controller:
    url: str
    host: str
    port: int
    idle: list[_Conn] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, ctx: ssl.SSLContext, timeout: float) -> tuple[_Conn, bool]:
        """A kept-alive connection (True) or a new one (False)."""
        with self.lock:
            if self.idle:
                return self.idle.pop(), True
        return _Conn(self.host, self.port, context=ctx, timeout=timeout), False

    def give(self, conn: _Conn) -> None:
        with self.lock:
            if len(self.idle) < 64:
                self.idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self.lock:
            for c in self.idle:
                c.close()
            self.idle.clear()


class _Answer:
    """A complete answer: status, headers and body."""

    def __init__(self, status: int, body: bytes):
        self.status = status
        self.body = body

    def json(self) -> Any:
        try:
            return _jsonlib.loads(self.body) if self.body else None
        except ValueError:
            raise TrancheError(
                self.status, "bad_answer",
                f"the controller answered with non-JSON text: {self.body[:200]!r}",
            ) from None


class Cluster:
    """A Tranche cluster, reached over its controllers' HTTPS API.

    Args:
        urls: the controllers' API URLs, e.g. ``["https://10.0.0.11:7443"]``.
        ca: the cluster CA's certificate (``ca.pem``), the only root trusted.
        cert, key: a client certificate of the cluster and its key (mutual TLS).
        token: a bearer token from ``tranche token issue`` (instead of a certificate).
        timeout: seconds for one request; calls retry other controllers within it.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        ca: str | os.PathLike[str],
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        token: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        if isinstance(urls, str):
            urls = [u for u in urls.split(",") if u.strip()]
        if not urls:
            raise ValueError("a cluster needs at least one controller URL")
        for u in urls:
            if not u.startswith("https://"):
                raise ValueError(f"{u!r}: a controller URL starts with https://")
        if cert is None and token is None:
            raise ValueError("give a client certificate (cert, key) or a bearer token")
        ctx = ssl.create_default_context(cafile=os.fspath(ca))
        if cert is not None:
            ctx.load_cert_chain(os.fspath(cert), os.fspath(key) if key is not None else None)
        self._ctx = ctx
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self._controllers = []
        for u in urls:
            parts = urlsplit(u.rstrip("/"))
            if not parts.hostname or not parts.port:
                raise ValueError(f"{u!r}: a controller URL is https://HOST:PORT")
            self._controllers.append(_Controller(u.rstrip("/"), parts.hostname, parts.port))
        self._current = 0
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------

    @classmethod
    def from_config(cls, path: str | os.PathLike[str] | None = None, **kw: Any) -> "Cluster":
        """The cluster of a CLI config file (``TRANCHE_CONFIG`` by default): its
        ``http`` URLs and ``[tls]`` certificate. Without a config, ``TRANCHE_URL``,
        ``TRANCHE_CA`` and ``TRANCHE_TOKEN`` (as ``tranche dev`` prints them)."""
        path = path or os.environ.get("TRANCHE_CONFIG")
        if not path:
            url = os.environ.get("TRANCHE_URL")
            token = os.environ.get("TRANCHE_TOKEN")
            ca = os.environ.get("TRANCHE_CA")
            if url and token and ca:
                return cls(url, ca=ca, token=token, **kw)
            raise ValueError(
                "no cluster config: set TRANCHE_CONFIG (the line `tranche dev` prints), "
                "or TRANCHE_URL, TRANCHE_CA and TRANCHE_TOKEN"
            )
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
        urls = cfg.get("http") or []
        if not urls:
            raise ValueError(
                f"{path}: field `http` lists no controller URLs "
                '(e.g. http = ["https://10.0.0.11:7443"])'
            )
        tls = cfg.get("tls") or {}
        for k in ("ca", "cert", "key"):
            if k not in tls:
                raise ValueError(f"{path}: field `tls.{k}` is missing")
        return cls(urls, ca=tls["ca"], cert=tls["cert"], key=tls["key"], **kw)

    def close(self) -> None:
        """Closes the connections."""
        for c in self._controllers:
            c.close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ----------------------------------------------------------------

    def _order(self) -> list[_Controller]:
        with self._lock:
            i = self._current
        return self._controllers[i:] + self._controllers[:i]

    def _prefer(self, c: _Controller) -> None:
        with self._lock:
            self._current = self._controllers.index(c)

    @staticmethod
    def _target(path: str, params: Mapping[str, Any] | None) -> str:
        q = {k: v for k, v in (params or {}).items() if v is not None}
        return path + ("?" + urlencode(q) if q else "")

    def _once(self, c: _Controller, method: str, target: str, body: bytes | None) -> _Answer:
        """One request on a pooled connection to `c`; a stale pooled connection is
        replaced once. Raises OSError or HTTPException when `c` cannot be reached."""
        headers = dict(self._headers)
        # Every change is JSON, even without a body: the API refuses a change a browser
        # could send across sites (a form, a no-cors fetch), which has another type.
        if body is not None or method != "GET":
            headers["Content-Type"] = "application/json"
        for _ in range(2):
            conn, reused = c.take(self._ctx, self.timeout)
            try:
                conn.request(method, target, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
            except _STALE:
                conn.close()
                if reused:
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            if r.will_close:
                conn.close()
            else:
                c.give(conn)
            return _Answer(r.status, data)
        raise ConnectionResetError("the connection was closed")  # pragma: no cover

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """One API call; returns the decoded JSON answer or raises :class:`TrancheError`."""
        deadline = time.monotonic() + self.timeout
        target = self._target(path, params)
        body = None if json is None else _jsonlib.dumps(json).encode()
        last: TrancheError | None = None
        while True:
            for c in self._order():
                try:
                    r = self._once(c, method, target, body)
                except (OSError, http.client.HTTPException) as e:
                    last = ConnectionFailed(0, "unreachable", f"{c.url}: {e}")
                    continue
                if r.status == 503:
                    last = from_response(r.status, r.json())
                    continue
                self._prefer(c)
                answer = r.json()
                if r.status >= 400:
                    raise from_response(r.status, answer)
                return answer
            if time.monotonic() >= deadline:
                raise last or ConnectionFailed(0, "unreachable", "no controller answered")
            time.sleep(0.2)

    def _stream(self, c: _Controller, target: str, headers: Mapping[str, str],
                read_timeout: float | None) -> tuple[_Conn, http.client.HTTPResponse]:
        """Opens a streamed GET on a connection of its own; an error answer is raised."""
        conn = _Conn(c.host, c.port, context=self._ctx, timeout=5.0)
        try:
            conn.connect()
            conn.sock.settimeout(read_timeout)
            conn.request("GET", target, headers={**self._headers, **headers})
            r = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        if r.status != 200:
            data = r.read()
            conn.close()
            raise from_response(r.status, _Answer(r.status, data).json())
        return conn, r

    def _applied(self) -> int:
        """An applied index of the cluster, from which events are complete."""
        return int(self.request("GET", "/api/v1/health")["applied"])

    # -- jobs -----------------------------------------------------------------------

    def submit(
        self,
        *,
        share: str,
        command: Sequence[str],
        gpus: int | None = None,
        gpus_per_node: int | None = None,
        image: str = "host",
        env: Mapping[str, str] | None = None,
        nodes: int = 1,
        priority: int = 0,
        time_limit: int | float | str | None = None,
        checkpoint: tuple[str, int | float | str | None] | str | None = None,
        checkpoint_every: int | float | str | None = None,
        name: str = "job",
        unit: str | None = None,
        queue: str | None = None,
        retry_attempts: int = 1,
        preemption_retries: int | None = None,
        tags: Mapping[str, str] | None = None,
        cwd: str | None = None,
        client_token: str | None = None,
        array: str | None = None,
        dependency: str | None = None,
        hold: bool = False,
        output: str | None = None,
        error: str | None = None,
        **extra: Any,
    ) -> "Job":
        """Submits a job and returns it.

        ``gpus`` is the job's GPUs in all, as Slurm's ``--gpus``: split evenly over
        ``nodes``; ``gpus_per_node`` gives each node's instead (give one of the two).
        ``time_limit`` is seconds or a text such as ``"4h"``; ``checkpoint`` is a signal
        name or ``(signal, grace)``, e.g. ``("SIGUSR1", 120)``; ``checkpoint_every``
        (``"30m"``) says how often the job saves a checkpoint, so that a preemption
        loses only the work since the last (a job may instead call
        :func:`tranche.inside.checkpointed` after each save). ``array`` (``"0-99%10"``)
        and ``dependency`` (``"afterok:41:42_3"``) take Slurm's syntax; an array's submit
        returns its first task, whose id is the array's (see :meth:`array_tasks`).
        ``hold`` submits it PENDING until :meth:`Job.release`; ``output`` and ``error``
        name files on the node (``%j``, ``%A``, ``%a``...). Any other keyword is sent as
        a field of the same name.
        """
        if isinstance(command, str):
            raise TypeError("command is a list of arguments, e.g. ['python', 'train.py']")
        body: dict[str, Any] = {
            "share": share,
            "command": list(command),
            "name": name,
            "nodes": nodes,
            "priority": priority,
            "image": image,
            "env": dict(env or {}),
            "retry_attempts": retry_attempts,
            "tags": dict(tags or {}),
            "client_token": client_token or uuid.uuid4().hex,
        }
        if time_limit is not None:
            body["time_limit_s"] = parse_duration(time_limit)
        if checkpoint is not None:
            sig, grace = (checkpoint, None) if isinstance(checkpoint, str) else checkpoint
            body["checkpoint"] = {"signal": sig, "grace_s": parse_duration(grace)}
        if checkpoint_every is not None:
            body.setdefault("checkpoint", {"signal": "SIGTERM"})
            body["checkpoint"]["every_s"] = parse_duration(checkpoint_every)
        if hold:
            body["hold"] = True
        for k, v in (("gpus", gpus), ("gpus_per_node", gpus_per_node),
                     ("unit", unit), ("queue", queue), ("cwd", cwd),
                     ("preemption_retries", preemption_retries),
                     ("array", array), ("dependency", dependency),
                     ("output", output), ("error", error)):
            if v is not None:
                body[k] = v
        body.update(extra)
        r = self.request("POST", "/api/v1/jobs", json=body)
        return Job(self, int(r["id"]))

    def job(self, job_id: int) -> "Job":
        """The job with this id (its details fetched now)."""
        j = Job(self, int(job_id))
        j.refresh()
        return j

    def jobs(
        self,
        *,
        share: str | None = None,
        state: str | Sequence[str] | None = None,
        user: str | None = None,
        array: int | None = None,
        limit: int | None = None,
    ) -> list["Job"]:
        """Jobs, lowest ids first, filtered by share, state(s), user and array; every
        page is fetched unless ``limit`` stops it."""
        if state is not None and not isinstance(state, str):
            state = ",".join(state)
        out: list[Job] = []
        after: int | None = None
        while True:
            page = min(1000, limit - len(out)) if limit is not None else 1000
            if page <= 0:
                return out
            r = self.request(
                "GET",
                "/api/v1/jobs",
                params={"share": share, "state": state, "user": user,
                        "array": array, "limit": page, "after": after},
            )
            for s in r["jobs"]:
                out.append(Job(self, int(s["id"]), summary=s))
            after = r.get("next_after")
            if after is None:
                return out

    def history(
        self,
        *,
        since: datetime | float | None = None,
        user: str | None = None,
        share: str | None = None,
        state: str | Sequence[str] | None = None,
        limit: int | None = 100,
        before: str | None = None,
    ) -> list[dict[str, Any]]:
        """Ended jobs (SUCCEEDED, FAILED, CANCELLED), newest end first: those still in
        the controllers' state and those that have left it for the history store.

        ``since`` is a :class:`~datetime.datetime` or seconds since the epoch (default:
        every job the history holds); ``state`` one ended state or several. Pages are
        fetched until ``limit`` jobs (``None``: all of them). Each record is the API's:
        ``job`` (the summary), ``ended_at`` (ms), ``elapsed_ms``, ``exit_code``,
        ``reason``, ``archived``. ``before`` continues after a record: pass
        ``f"{r['ended_at']}.{r['job']['id']}"`` of the last one seen."""
        if state is not None and not isinstance(state, str):
            state = ",".join(state)
        since_ms: int | None = None
        if isinstance(since, datetime):
            since_ms = int(since.timestamp() * 1000)
        elif since is not None:
            since_ms = int(since * 1000)
        out: list[dict[str, Any]] = []
        while True:
            page = min(1000, limit - len(out)) if limit is not None else 1000
            if page <= 0:
                return out
            r = self.request(
                "GET",
                "/api/v1/history",
                params={"since": since_ms, "user": user, "share": share, "state": state,
                        "limit": page, "before": before},
            )
            out.extend(r["jobs"])
            before = r.get("next")
            if before is None:
                return out

    def array_tasks(self, array: "int | Job") -> list["Job"]:
        """The tasks of an array (by its id, or the job its submit returned)."""
        return self.jobs(array=array.id if isinstance(array, Job) else array)

    # -- the rest of the cluster ----------------------------------------------------

    def shares(self) -> list[dict[str, Any]]:
        """Per quota share: strategy, and per unit max, used, lent and borrowed."""
        shares: list[dict[str, Any]] = self.request("GET", "/api/v1/shares")
        return shares

    def groups(self) -> list[dict[str, Any]]:
        """The groups of quota shares (nested quotas): each one's queue, member shares
        and groups, strategy, and per unit its max and ceiling."""
        groups: list[dict[str, Any]] = self.request("GET", "/api/v1/groups")
        return groups

    def delete_group(self, name: str) -> None:
        """Deletes a group of shares (admins); its members are then in no group."""
        self.request("DELETE", f"/api/v1/groups/{quote(name, safe='')}", json={})

    def queue(self, limit: int = 20) -> dict[str, Any]:
        """The front of the queue and of each share."""
        front: dict[str, Any] = self.request("GET", "/api/v1/queue", params={"limit": limit})
        return front

    def nodes(self) -> list[dict[str, Any]]:
        """Nodes, their state and GPUs."""
        nodes: list[dict[str, Any]] = self.request("GET", "/api/v1/nodes")
        return nodes

    def drain(self, node: str, reason: str, now: bool = False) -> None:
        """Drains a node (operators and admins); with ``now`` its jobs stop too."""
        self.request("POST", f"/api/v1/nodes/{node}/drain", json={"reason": reason, "now": now})

    def resume(self, node: str) -> None:
        """Puts a drained node back in service."""
        self.request("POST", f"/api/v1/nodes/{node}/resume")

    def controllers(self) -> dict[str, Any]:
        """The controllers: members, leader, term, commit and applied indexes."""
        status: dict[str, Any] = self.request("GET", "/api/v1/controllers")
        return status

    def whoami(self) -> dict[str, Any]:
        """The caller's role and name as the cluster sees them."""
        who: dict[str, Any] = self.request("GET", "/api/v1/whoami")
        return who

    def apply(self, policy_path: str | os.PathLike[str], dry_run: bool = True) -> dict[str, Any]:
        """Applies a policy file (admins); by default only reports what would change."""
        with open(policy_path, encoding="utf-8") as f:
            text = f.read()
        result: dict[str, Any] = self.request(
            "POST", "/api/v1/policy", json={"toml": text, "dry_run": dry_run})
        return result

    # -- streams --------------------------------------------------------------------

    def events(
        self,
        *,
        after: int | None = None,
        job: int | None = None,
        share: str | None = None,
        timeout: float | None = None,
    ) -> Iterator[Event]:
        """Job transitions and share usage as they are committed, from ``after`` (a log
        index; default: now). The stream survives controllers going away: it resumes
        on another from the last index seen. With ``timeout``, ends by raising
        :class:`TimeoutError` once that many seconds have passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = self._applied() if after is None else after
        params = {k: v for k, v in (("job", job), ("share", share)) if v is not None}
        failures = 0
        while True:
            for c in self._order():
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("no matching event in time")
                read = 30.0 if deadline is None else max(0.1, min(30.0, deadline - time.monotonic()))
                target = self._target("/api/v1/events", params)
                try:
                    conn, r = self._stream(c, target, {"Last-Event-ID": str(last)}, read)
                except TrancheError as e:
                    if e.status == 503:
                        continue
                    raise
                except (OSError, http.client.HTTPException):
                    continue
                self._prefer(c)
                failures = 0
                try:
                    for kind, data, ident in _sse(r):
                        if ident is not None:
                            last = ident
                        yield Event(kind=kind, data=data, index=int(data.get("index", last)))
                        if deadline is not None:
                            conn.sock.settimeout(max(0.1, min(30.0, deadline - time.monotonic())))
                except (OSError, http.client.HTTPException):
                    pass
                finally:
                    conn.close()
            failures += 1
            time.sleep(min(1.0, 0.1 * failures))


def _sse(r: http.client.HTTPResponse) -> Iterator[tuple[str, dict[str, Any], int | None]]:
    """(kind, data, id) of each event of a text/event-stream, until it ends."""
    kind, data, ident = "", "", None
    while True:
        raw = r.readline()
        if not raw:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line == "":
            if kind and data:
                yield kind, _jsonlib.loads(data), ident
            kind, data, ident = "", "", None
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line.startswith("id:"):
            ident = int(line[3:].strip())


class Job:
    """A job of the cluster. Its details are fetched by :meth:`refresh` (and by the
    calls that change it); :attr:`status` is the status as last fetched."""

    def __init__(self, cluster: Cluster, job_id: int, summary: dict[str, Any] | None = None):
        self.cluster = cluster
        self.id = job_id
        self._data: dict[str, Any] = summary or {}

    def __repr__(self) -> str:
        return f"Job({self.id}, {self._data.get('status', '?')})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id and other.cluster is self.cluster

    def __hash__(self) -> int:
        return hash(self.id)

    def refresh(self) -> "Job":
        """Fetches the job's details: spec, attempts, transitions."""
        self._data = self.cluster.request("GET", f"/api/v1/jobs/{self.id}")
        return self

    @property
    def data(self) -> dict[str, Any]:
        """The job's details as last fetched (the API's JSON)."""
        if "spec" not in self._data:
            self.refresh()
        return self._data

    @property
    def status(self) -> str:
        """The status as last fetched (``RUNNABLE``, ``RUNNING``, ``SUCCEEDED``...)."""
        if "status" not in self._data:
            self.refresh()
        return str(self._data["status"])

    @property
    def archived(self) -> bool:
        """Whether the job has ended and left the controllers' state (it is read from
        the history store of the controller that answered)."""
        return bool(self.data.get("archived", False))

    @property
    def exit_code(self) -> int | None:
        """The latest attempt's exit code, once it has exited."""
        return self.data.get("exit_code")

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    def wait(self, timeout: float | None = None) -> str:
        """Waits until the job ends (over the event stream, no polling) and returns its
        final status. Raises :class:`TimeoutError` after ``timeout`` seconds."""
        start = self.cluster._applied()
        if self.refresh().done:
            return self.status
        for ev in self.cluster.events(after=start, job=self.id, timeout=timeout):
            if ev.kind == "reset" or (ev.kind == "job" and ev.data.get("to") in TERMINAL):
                if self.refresh().done:
                    return self.status
        raise AssertionError("the event stream ended")  # pragma: no cover

    def logs(self, follow: bool = False, stderr: bool = False, attempt: int | None = None,
             node: str | None = None) -> Any:
        """The job's output as text; with ``follow``, an iterator of text pieces that
        ends when the attempt ends."""
        params = {"follow": "1" if follow else None, "stderr": "1" if stderr else None,
                  "attempt": attempt, "node": node}
        if not follow:
            # An agent files an ended attempt's output just after it reports the end,
            # so for a moment after a job ends its node may not find the output: ask
            # again for up to a second before calling it missing.
            for _ in range(10):
                try:
                    return "".join(self._follow(params))
                except NotFound as e:
                    if "no output of job" not in e.message:
                        raise
                    time.sleep(0.1)
            return "".join(self._follow(params))
        return self._follow(params)

    def _follow(self, params: dict[str, Any]) -> Iterator[str]:
        import codecs

        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        target = Cluster._target(f"/api/v1/jobs/{self.id}/logs", params)
        last: TrancheError | None = None
        for c in self.cluster._order():
            try:
                conn, r = self.cluster._stream(c, target, {}, None)
            except TrancheError as e:
                if e.status == 503:
                    last = e
                    continue
                raise
            except (OSError, http.client.HTTPException) as e:
                last = ConnectionFailed(0, "unreachable", f"{c.url}: {e}")
                continue
            try:
                while True:
                    chunk = r.read1(65536)
                    if not chunk:
                        break
                    text = dec.decode(chunk)
                    if text:
                        yield text
                tail = dec.decode(b"", final=True)
                if tail:
                    yield tail
                return
            finally:
                conn.close()
        raise last or ConnectionFailed(0, "unreachable", "no controller answered")

    def cancel(self, reason: str | None = None) -> "Job":
        """Cancels the job (a running one gets its checkpoint signal and grace)."""
        self._data = self.cluster.request(
            "POST", f"/api/v1/jobs/{self.id}/cancel",
            json={"reason": reason} if reason else {})
        return self

    def hold(self) -> "Job":
        """Holds the job while it waits: PENDING until released."""
        self._data = self.cluster.request("POST", f"/api/v1/jobs/{self.id}/hold")
        return self

    def release(self) -> "Job":
        """Releases a held job."""
        self._data = self.cluster.request("POST", f"/api/v1/jobs/{self.id}/release")
        return self

    def explain(self) -> list[str]:
        """Why the job is where it is, one fact a line, with numbers."""
        return list(self.cluster.request("GET", f"/api/v1/jobs/{self.id}/explain")["lines"])

    def set_priority(self, priority: int) -> "Job":
        """Changes the job's priority (0 to 9999)."""
        self._data = self.cluster.request(
            "PATCH", f"/api/v1/jobs/{self.id}", json={"priority": priority})
        return self

    # The seed SDK's names.
    def describe(self) -> dict[str, Any]:
        """The job's details, fetched now."""
        return self.refresh().data

    def terminate(self, reason: str = "terminated") -> None:
        """Cancels the job."""
        self.cancel(reason)
