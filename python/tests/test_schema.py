"""The OpenAPI document: valid OpenAPI 3.1, and a running cluster's answers (fuzzed by
schemathesis from it) contradict it nowhere and are never 5xx.

The fuzzing has a cluster of its own whose nodes are all drained first, so the jobs
it submits never run. The event stream and job output are left out of fuzzing (one
never ends; the other streams bytes) and covered by the SDK's tests."""

from __future__ import annotations

import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import tranche
from conftest import start_dev, stop_dev


class _ControllerName(requests.adapters.HTTPAdapter):
    """Verifies the controllers' certificate under its TLS name, whatever address."""

    def init_poolmanager(self, *a, **kw):
        kw["server_hostname"] = tranche.client.CONTROLLER_NAME
        kw["assert_hostname"] = tranche.client.CONTROLLER_NAME
        super().init_poolmanager(*a, **kw)


@pytest.fixture(scope="module")
def fuzz_dev():
    with tempfile.TemporaryDirectory(prefix="tranche-fuzz-") as tmp:
        d = start_dev(Path(tmp))
        try:
            ops = tranche.Cluster.from_config(d.config_of("operator", "ops"))
            for n in ops.nodes():
                ops.drain(n["name"], "schema fuzzing: no job may run")
            yield d
        finally:
            stop_dev(d)


def _document(d) -> dict:
    c = tranche.Cluster(d.urls, ca=d.ca, token=d.token)
    try:
        return c.request("GET", "/api/v1/openapi.json")
    finally:
        c.close()


def test_the_document_is_valid_openapi_3_1(fuzz_dev):
    doc = _document(fuzz_dev)
    assert doc["openapi"].startswith("3.1")
    validate(doc)
    paths = set(doc["paths"])
    for p in ("/api/v1/jobs", "/api/v1/jobs/{id}", "/api/v1/events", "/api/v1/health",
              "/api/v1/shares", "/api/v1/groups", "/api/v1/nodes", "/api/v1/policy"):
        assert p in paths


@pytest.fixture(scope="module")
def api_schema(fuzz_dev):
    doc = _document(fuzz_dev)
    for p in ("/api/v1/events", "/api/v1/jobs/{id}/logs"):
        doc["paths"].pop(p)
    return schemathesis.openapi.from_dict(doc)


schema = schemathesis.pytest.from_fixture("api_schema")


def _session(d, admin: bool) -> requests.Session:
    s = requests.Session()
    s.mount("https://", _ControllerName())
    s.verify = d.ca
    if admin:
        # The admin's certificate: every route's success path (policy, drain) too.
        tls = tomllib.loads(Path(d.config_of("admin", "admin")).read_text())["tls"]
        s.cert = (tls["cert"], tls["key"])
    else:
        s.headers["Authorization"] = f"Bearer {d.token}"
    return s


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


def _call(case, url: str, s: requests.Session, ca: str):
    """Calls as a client of the API does: a 503 (no leader, or a commit that did not come
    in time on a loaded machine) is retried after its Retry-After, up to three times;
    what comes back then is checked, a 503 included."""
    for _ in range(3):
        resp = case.call(base_url=url, session=s, timeout=15, verify=ca, cert=s.cert)
        if resp.status_code != 503 or "Retry-After" not in resp.headers:
            break
        time.sleep(float(resp.headers["Retry-After"]))
    return resp


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_answers_fit_the_document_for_a_user(case, fuzz_dev):
    resp = _call(case, fuzz_dev.urls[0], _session(fuzz_dev, False), fuzz_dev.ca)
    case.validate_response(resp, checks=CHECKS)


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_answers_fit_the_document_for_an_admin(case, fuzz_dev):
    resp = _call(case, fuzz_dev.urls[1], _session(fuzz_dev, True), fuzz_dev.ca)
    case.validate_response(resp, checks=CHECKS)
