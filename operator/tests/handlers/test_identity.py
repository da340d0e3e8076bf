"""The operator's identity for kopf never needs a passwd entry (the chart's UID 65532 has none)."""

from __future__ import annotations

import os
import pwd
import socket

import pytest

from tailguard.handlers.main import operator_identity


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param(
            {"POD_NAME": "tailguard-7d9f-abcde"}, "tailguard-7d9f-abcde", id="pod-name-from-the-chart"
        ),
        pytest.param({"POD_ID": "op-1", "USER": "alice"}, "op-1", id="kopf-pod-id"),
        pytest.param({"POD_NAME": "", "USER": "alice"}, f"alice@{socket.gethostname()}", id="empty-pod-name"),
        pytest.param({"LOGNAME": "bob"}, f"bob@{socket.gethostname()}", id="logname"),
    ],
)
def test_identity_prefers_the_pod_then_the_user(environ: dict[str, str], expected: str) -> None:
    assert operator_identity(environ) == expected


def test_identity_without_a_passwd_entry_uses_the_numeric_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert operator_identity({}) == f"uid-{os.getuid()}@{socket.gethostname()}"
