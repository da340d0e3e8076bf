"""A Debian bookworm base image with Debian's Python 3.11, made here with ``debootstrap``.

No container registry is needed: the root filesystem comes from Debian's archive (minbase plus
``python3``, ``python3-venv`` and ``ca-certificates``, upgraded from bookworm-updates and
bookworm-security), is stripped of documentation, man pages, locales, legacy iconv modules and apt's
lists, and is loaded with ``docker import``. The tarball is kept under ``<cache>/images/``, so a fresh engine imports it
again without a second debootstrap; an image whose recipe label matches is not rebuilt at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from cluster.tools import cache_root
from containers import engine
from containers.engine import EngineError, Progress, say

IMAGE = "tailguard/python-base:bookworm"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv", "ca-certificates")
RECIPE_LABEL = "dev.tailguard.base.recipe"

#: dpkg leaves these out of every later install too (an image built on this base stays small).
DPKG_EXCLUDES = """\
# Keep the image small: no documentation, man pages or translations (copyright files stay).
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
# glibc's iconv modules for legacy character sets (8 MB). Python's codecs are its own, and glibc
# converts UTF-8/16/32, UCS and ASCII without them.
path-exclude=/usr/lib/*/gconv/*.so
"""

APT_CONF = """\
APT::Install-Recommends "false";
APT::Install-Suggests "false";
"""

#: Run in the chroot after debootstrap: security and point-release updates, then no caches.
UPGRADE = "apt-get update -qq && apt-get -y -qq upgrade && apt-get clean"

#: Removed from the root filesystem before it is packed (paths relative to it; globs allowed).
STRIP = (
    "var/lib/apt/lists/*",
    "var/cache/apt/*",
    "var/cache/debconf/*-old",
    "var/lib/dpkg/*-old",
    "var/log/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/lintian/*",
    "usr/lib/*/gconv/*.so",
    "tmp/*",
    "root/.cache",
)


def mirror() -> str:
    return os.environ.get("TAILGUARD_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def security_mirror() -> str:
    return os.environ.get("TAILGUARD_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")


def sources() -> str:
    """The image's apt sources (deb822), as in Debian's own images."""
    return (
        f"Types: deb\nURIs: {mirror()}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {security_mirror()}\nSuites: {SUITE}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )


def recipe() -> str:
    """A short hash of everything that decides the base's content (but the archive's state)."""
    text = "\n".join([SUITE, " ".join(PACKAGES), DPKG_EXCLUDES, APT_CONF, UPGRADE, *STRIP, sources()])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def images_dir() -> Path:
    return cache_root() / "images"


def tarball() -> Path:
    return images_dir() / f"python-base-{SUITE}-{recipe()}.tar"


def image_recipe(cli: str, image: str = IMAGE) -> str | None:
    """The recipe label of ``image`` in the engine, or None when it has no such image."""
    out = subprocess.run(
        [cli, "image", "inspect", "-f", f'{{{{index .Config.Labels "{RECIPE_LABEL}"}}}}', image],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() if out.returncode == 0 else None


def _run(cmd: list[str], what: str, log: Path) -> None:
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise EngineError(f"{what} failed (exit {rc}); last lines of {log}:\n{tail}")


@contextlib.contextmanager
def _proc_mounted(root: Path) -> Iterator[None]:
    """/proc in the chroot while package scripts run in it."""
    target = root / "proc"
    subprocess.run(["mount", "-t", "proc", "proc", str(target)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _strip(root: Path) -> None:
    for pattern in STRIP:
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    for doc in (root / "usr/share/doc").glob("*"):
        if doc.is_dir() and not doc.is_symlink():
            for entry in doc.iterdir():
                if entry.name != "copyright":
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    for locale in (root / "usr/share/locale").glob("*"):
        if locale.name != "locale.alias":
            shutil.rmtree(locale) if locale.is_dir() and not locale.is_symlink() else locale.unlink()
    # The engine mounts its own; the build host's must not travel.
    for name in ("etc/resolv.conf", "etc/hostname"):
        (root / name).write_text("")


def make_rootfs(progress: Progress = say) -> Path:
    """debootstrap, upgrade, minimize and pack the root filesystem; returns the tarball."""
    if os.geteuid() != 0:
        raise EngineError("debootstrap needs root (chroot, mknod); run the base build as root")
    if shutil.which("debootstrap") is None:
        engine.apt_install(["debootstrap"], progress)
    work = images_dir() / "build"
    root = work / "rootfs"
    log = work / "debootstrap.log"
    if work.exists():
        shutil.rmtree(work)
    root.mkdir(parents=True)
    started = time.monotonic()
    progress(f"debootstrap {SUITE} (minbase + {', '.join(PACKAGES)}) from {mirror()}; log {log}")
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            "--components=main",
            SUITE,
            str(root),
            mirror(),
        ],
        "debootstrap",
        log,
    )
    (root / "etc/dpkg/dpkg.cfg.d/tailguard-minimal").write_text(DPKG_EXCLUDES)
    (root / "etc/apt/apt.conf.d/tailguard-minimal").write_text(APT_CONF)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(sources())
    shutil.copyfile("/etc/resolv.conf", root / "etc/resolv.conf")
    progress("apt-get upgrade in the chroot (bookworm-updates, bookworm-security)")
    with _proc_mounted(root):
        _run(["chroot", str(root), "sh", "-c", UPGRADE], "apt-get upgrade in the chroot", log)
    _strip(root)
    out = tarball()
    partial = out.with_suffix(".partial")
    _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], "tar", log)
    partial.rename(out)
    shutil.rmtree(root)
    size_mb = out.stat().st_size / 1e6
    progress(f"root filesystem {out} ({size_mb:.0f} MB) in {time.monotonic() - started:.0f}s")
    return out


def python_version(cli: str, image: str = IMAGE) -> str:
    out = subprocess.run(
        [cli, "run", "--rm", "--network=none", image, "python3", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or out.stderr.strip()


def ensure(progress: Progress = say, *, force: bool = False) -> str:
    """The base image in the engine, built when missing or made by another recipe. Its name."""
    engine.ensure(progress)
    cli = engine.docker_cli()
    if not force and image_recipe(cli) == recipe():
        return IMAGE
    with engine.lock("python-base"):
        if not force and image_recipe(cli) == recipe():
            return IMAGE
        tar = tarball()
        if force or not tar.is_file():
            for old in images_dir().glob(f"python-base-{SUITE}-*.tar"):
                old.unlink()
            tar = make_rootfs(progress)
        progress(f"docker import {tar.name} as {IMAGE}")
        changes = [
            f"LABEL {RECIPE_LABEL}={recipe()}",
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["python3"]',
        ]
        cmd = [cli, "import"]
        for change in changes:
            cmd += ["--change", change]
        out = subprocess.run([*cmd, str(tar), IMAGE], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise EngineError(f"docker import failed: {out.stderr.strip()}")
        progress(f"{IMAGE}: {python_version(cli)}")
    return IMAGE
