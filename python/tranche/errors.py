"""The SDK's exceptions: each API error carries the API's code, message and field."""

from __future__ import annotations


class TrancheError(Exception):
    """An error answer of the Tranche API.

    Attributes:
        status: the HTTP status (0 when no controller answered).
        code: the API's machine-readable code (``invalid``, ``forbidden``, ...).
        message: what a person reads.
        field: the request field at fault, when there is one.
    """

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message if field is None else f"{message} (field {field})")
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class BadRequest(TrancheError):
    """400: the request breaks a rule; nothing changed."""


class Unauthenticated(TrancheError):
    """401: no credentials, or a token that is expired, forged or revoked."""


class Forbidden(TrancheError):
    """403: the identity may not do this."""


class NotFound(TrancheError):
    """404: no such job, share, node or path."""


class Conflict(TrancheError):
    """409: the request conflicts with the current state; nothing changed."""


class Unavailable(TrancheError):
    """503: no leader (an election), or the controller is stopping; retry."""


class ConnectionFailed(TrancheError):
    """No controller could be reached."""


_BY_STATUS: dict[int, type[TrancheError]] = {
    400: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    503: Unavailable,
}


def from_response(status: int, body: object) -> TrancheError:
    """The exception for an error answer with this status and JSON body."""
    code, message, field = "error", f"HTTP {status}", None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        e = body["error"]
        code = str(e.get("code", code))
        message = str(e.get("message", message))
        field = e.get("field")
    cls = _BY_STATUS.get(status, TrancheError)
    return cls(status, code, message, field)
