"""Disk quotas that ``statvfs`` cannot see, for grpoflow.preflight's disk check.

``statvfs`` gives a filesystem's free space; on a cluster's Lustre, GPFS (IBM Storage Scale) or NFS home the limit a
job hits is usually the user's, group's, project's or fileset's quota, far below that. ``room(path)`` asks the
filesystem's own tool, as the user running Snakemake:

- Lustre: ``lfs quota -u USER``, ``-g GROUP`` and, when the directory has a project id (``lfs project -d``),
  ``-p ID``, on the mount point;
- GPFS: ``mmlsquota -u USER``, ``-g GROUP`` and, for the directory's fileset (``mmlsattr -L``), ``-j FILESET``, on
  the device;
- anything else (NFS through rquotad, ext4, XFS): ``quota -w -u`` and ``-g`` for the mount point (``-f``).

The room is the smallest ``limit - used`` over the answers that set a limit: the hard limit, else the soft one
(GPFS: less what is ``in_doubt``). A tool that is missing, fails or times out, or prints nothing it can read,
leaves the quota unchecked, and the text says so plainly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT_S = 30  # per command: a quota server that does not answer must not hold up every snakemake call
GPFS_BIN = "/usr/lpp/mmfs/bin"  # where GPFS installs its commands; often not on PATH

_SIZE = re.compile(r"^\[?(\d+(?:\.\d+)?)([kmgtpe]?)\]?\*?$", re.IGNORECASE)
_UNITS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}


@dataclass(frozen=True)
class Limit:
    """One quota as a tool printed it, in bytes (0: no limit)."""

    owner: str  # "user bob", "group proj", "project 1234", "fileset fs1"
    used: int
    soft: int
    hard: int

    @property
    def limit(self) -> int:
        return self.hard or self.soft

    @property
    def room(self) -> int | None:
        return max(0, self.limit - self.used) if self.limit else None


@dataclass(frozen=True)
class Quota:
    """What the quota tools said about one filesystem: the room left (None when no limit was read) and a line."""

    room: int | None
    text: str
    limit: Limit | None = None  # the tightest one


def size_bytes(text: str, plain_unit: int) -> int:
    """``1041408`` (in ``plain_unit`` bytes), ``[1041408]``, ``15860*``, ``792.3M``, ``9.537T``, ``0k`` -> bytes. The
    tools' suffixes are binary (``lfs quota -h``, ``mmlsquota --block-size auto``, ``quota -s``)."""
    m = _SIZE.match(text.strip())
    if not m:
        raise ValueError(f"not a size: {text!r}")
    number, suffix = m.groups()
    if not suffix:
        return int(float(number) * plain_unit)
    return int(float(number) * 1024 ** _UNITS[suffix.lower()])


def _data_rows(lines: list[str], header: int) -> list[list[str]]:
    """The rows after a header line; a filesystem name too long for its column is printed alone on its line, its
    numbers on the next (lfs quota, quota without -w)."""
    rows, pending = [], None
    for line in lines[header + 1 :]:
        words = line.split()
        if not words or line.startswith(("Disk quotas", "uid ", "gid ", "prj ")) or "Block Limits" in line:
            break
        if len(words) == 1 and pending is None:
            pending = words
            continue
        rows.append((pending or []) + words)
        pending = None
    return rows


def parse_lfs_quota(text: str, owner: str) -> list[Limit]:
    """``lfs quota -u|-g|-p ID MOUNT`` (Lustre): ``Filesystem kbytes quota limit grace files quota limit grace``
    (KiB; ``used`` and suffixed sizes with ``-h``); a value in brackets is one that some servers did not report."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if words[:1] == ["Filesystem"] and len(words) >= 4 and words[1] in ("kbytes", "used"):
            for row in _data_rows(lines, i):
                used, soft, hard = (size_bytes(w, 1024) for w in row[1:4])
                out.append(Limit(owner, used, soft, hard))
    return out


def parse_mmlsquota(text: str, owner: str) -> list[Limit]:
    """``mmlsquota`` (GPFS): ``Filesystem type KB quota limit in_doubt grace | files ...`` (KiB; ``blocks`` with
    suffixed sizes under ``--block-size``), or ``no limits``. What is ``in_doubt`` counts as used: IBM's docs say the
    sum of in-doubt and current usage may not exceed the hard limit."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if words[:2] in (["Filesystem", "type"], ["Name", "type"]) and len(words) >= 6:
            for row in _data_rows(lines, i):
                block = " ".join(row).split("|")[0].split()
                if block[2:4] == ["no", "limits"]:
                    continue
                used, soft, hard, doubt = (size_bytes(w, 1024) for w in block[2:6])
                out.append(Limit(owner, used + doubt, soft, hard))
    return out


def parse_quota(text: str, owner: str) -> list[Limit]:
    """``quota -w`` (Linux quota-tools: local quotas, NFS through rquotad): ``Filesystem blocks quota limit grace files
    quota limit grace`` (1 KiB blocks; ``space`` and suffixed sizes with ``-s``); ``*`` marks a soft limit passed;
    ``...: none`` when no quota is set."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if words[:1] == ["Filesystem"] and len(words) >= 4 and words[1] in ("blocks", "space"):
            for row in _data_rows(lines, i):
                used, soft, hard = (size_bytes(w, 1024) for w in row[1:4])
                out.append(Limit(owner, used, soft, hard))
    return out


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> tuple[str, str, str]:
    """(mount point, filesystem type, source) of the filesystem holding ``path``: the last-mounted of the longest
    mount points above it."""
    real = os.path.realpath(path)
    best = ("/", "unknown", "")
    try:
        with open(mountinfo, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return best
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 2:
            continue
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040 is a space
        inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best[0]):
            best = (mnt, rest[0], rest[1])
    return best


def _ids() -> tuple[str, str]:
    import grp
    import pwd

    uid, gid = os.getuid(), os.getgid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return user, group


def _ask(cmd: list[str], run) -> str | None:
    try:
        proc = run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    # quota-tools exits non-zero when a limit is passed, and still prints the table.
    return proc.stdout if proc.returncode == 0 or "Filesystem" in proc.stdout else None


def _gb(n: int) -> str:
    return f"{n / 1e9:.0f} GB" if n >= 10e9 else f"{n / 1e9:.2f} GB"


def room(path: str, run=subprocess.run, which=shutil.which, mountinfo: str = "/proc/self/mountinfo") -> Quota:
    """The quota room on ``path``'s filesystem for the user running this, as the filesystem's own tool reports it."""
    mnt, fstype, source = mount_of(path, mountinfo)
    user, group = _ids()
    where = f"{fstype} at {mnt}"
    if fstype == "lustre":
        tool = which("lfs")
        if not tool:
            return Quota(None, f"quota not checked on {where}: no `lfs` on PATH (free space is the filesystem's)")
        asks = [
            (f"user {user}", [tool, "quota", "-u", user, mnt]),
            (f"group {group}", [tool, "quota", "-g", group, mnt]),
        ]
        project = _ask([tool, "project", "-d", path], run)
        pid = project.split()[0] if project and project.split() and project.split()[0].isdigit() else "0"
        if pid != "0":
            asks.append((f"project {pid}", [tool, "quota", "-p", pid, mnt]))
        parse, name = parse_lfs_quota, "lfs quota"
    elif fstype == "gpfs":
        tool = which("mmlsquota") or which("mmlsquota", path=GPFS_BIN)
        if not tool:
            return Quota(None, f"quota not checked on {where}: no `mmlsquota` (free space is the filesystem's)")
        device = source.removeprefix("/dev/")
        asks = [(f"user {user}", [tool, "-u", user, device]), (f"group {group}", [tool, "-g", group, device])]
        attrs = _ask([os.path.join(os.path.dirname(tool), "mmlsattr"), "-L", path], run) or ""
        fileset = re.search(r"^fileset name:\s*(\S+)", attrs, re.MULTILINE)
        if fileset:
            asks.append((f"fileset {fileset.group(1)}", [tool, "-j", fileset.group(1), device]))
        parse, name = parse_mmlsquota, "mmlsquota"
    else:
        tool = which("quota")
        if not tool:
            return Quota(None, f"quota not checked on {where}: no `quota` command (free space is the filesystem's)")
        asks = [(f"user {user}", [tool, "-w", "-u", "-f", mnt]), (f"group {group}", [tool, "-w", "-g", "-f", mnt])]
        parse, name = parse_quota, "quota"
    limits, answered = [], 0
    for owner, cmd in asks:
        text = _ask(cmd, run)
        if text is None:
            continue
        answered += 1
        try:
            limits += parse(text, owner)
        except ValueError:
            return Quota(None, f"quota not checked on {where}: `{' '.join(cmd)}` printed what grpoflow cannot read")
    if not answered:
        return Quota(None, f"quota not checked on {where}: `{name}` did not answer (free space is the filesystem's)")
    limited = [q for q in limits if q.room is not None]
    if not limited:
        return Quota(None, f"no quota set for {', '.join(o for o, _ in asks)} on {where} ({name})")
    tight = min(limited, key=lambda q: q.room)
    return Quota(
        tight.room,
        f"{_gb(tight.room)} left in the {tight.owner} quota ({_gb(tight.limit)}) on {where} ({name})",
        tight,
    )
