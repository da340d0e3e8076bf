"""The image harness's pure parts: the base's recipe and stripping, the operator build's command."""

from __future__ import annotations

from pathlib import Path

import pytest

from containers import base, operator_image


def test_recipe_is_stable_and_follows_the_content(monkeypatch: pytest.MonkeyPatch) -> None:
    first = base.recipe()
    assert first == base.recipe()
    assert len(first) == 12
    monkeypatch.setattr(base, "PACKAGES", (*base.PACKAGES, "curl"))
    assert base.recipe() != first


def test_sources_name_bookworm_its_updates_and_security(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILGUARD_DEBIAN_MIRROR", "http://mirror.example/debian")
    text = base.sources()
    assert "URIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n" in text
    assert "Suites: bookworm-security\n" in text
    assert text.count("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg") == 2


def test_tarball_lives_in_the_cache_under_its_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TAILGUARD_CACHE_DIR", str(tmp_path))
    assert base.tarball() == tmp_path / "images" / f"python-base-bookworm-{base.recipe()}.tar"


def test_strip_keeps_copyright_and_locale_alias_only(tmp_path: Path) -> None:
    root = tmp_path
    for rel in (
        "usr/share/doc/python3/copyright",
        "usr/share/doc/python3/changelog.Debian.gz",
        "usr/share/doc/python3/examples/x.py",
        "usr/share/man/man1/python3.1.gz",
        "usr/share/locale/locale.alias",
        "usr/share/locale/de/LC_MESSAGES/apt.mo",
        "var/lib/apt/lists/deb.debian.org_dists_bookworm_InRelease",
        "var/cache/apt/pkgcache.bin",
        "var/log/dpkg.log",
        "etc/resolv.conf",
        "usr/bin/python3",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    base._strip(root)
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert left == [
        "etc/hostname",
        "etc/resolv.conf",
        "usr/bin/python3",
        "usr/share/doc/python3/copyright",
        "usr/share/locale/locale.alias",
    ]
    assert (root / "etc/resolv.conf").read_text() == ""


def test_build_command_points_the_dockerfile_at_the_local_base(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    cmd = operator_image.build_command("docker", "tailguard/operator:t", base.IMAGE, ca)
    assert cmd[:2] == ["docker", "build"]
    assert ["-f", str(operator_image.DOCKERFILE)] == cmd[cmd.index("-f") : cmd.index("-f") + 2]
    assert f"PYTHON_IMAGE={base.IMAGE}" in cmd
    assert f"VERSION={operator_image.version()}" in cmd
    assert f"id=pip-ca,src={ca}" in cmd
    assert cmd[-3:] == ["-t", "tailguard/operator:t", str(operator_image.REPO)]
    without_ca = operator_image.build_command("docker", "x:y", base.IMAGE, None)
    assert "--secret" not in without_ca


def test_ca_bundle_prefers_the_explicit_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ca = tmp_path / "proxy-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("TAILGUARD_BUILD_CA", str(ca))
    assert operator_image.ca_bundle() == ca
    monkeypatch.setenv("TAILGUARD_BUILD_CA", str(tmp_path / "missing.pem"))
    monkeypatch.setenv("PIP_CERT", str(ca))
    assert operator_image.ca_bundle() == ca


def test_default_tag_is_the_project_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAILGUARD_OPERATOR_IMAGE", raising=False)
    assert operator_image.default_tag() == f"tailguard/operator:{operator_image.version()}"
    monkeypatch.setenv("TAILGUARD_OPERATOR_IMAGE", "registry.example/tg:1")
    assert operator_image.default_tag() == "registry.example/tg:1"
