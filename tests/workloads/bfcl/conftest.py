"""Fixtures for the BFCL workload tests: the provisioned BFCL and one worker.

The real llama-server comes from tests/conftest.py (`llama_server_url`)."""

from __future__ import annotations

import pytest

from kit.workloads.bfcl import BfclWorker, ensure_bfcl


@pytest.fixture(scope="session")
def bfcl_install():
    return ensure_bfcl()


@pytest.fixture(scope="session")
def bfcl_worker(bfcl_install):
    with BfclWorker(bfcl_install) as worker:
        yield worker


@pytest.fixture(scope="session")
def first_80(bfcl_worker):
    return bfcl_worker.load_episodes(count=80)
