"""Lease owners that say which process they are, so that a dead one can be proven dead.

A lease outlives the process that holds it until it expires (30 s by default).
When that process was killed, the next process on the same machine should not
have to wait: it can look. An owner name carries what identifies its process
on its machine, for as long as the machine runs:

    web-1:4242:9f3a1c2b@1b2c3d4e5f607182.4026531836-4026531834.987654/5e6f7a8b

that is, the host name, the pid and a random nonce (for people), then the boot
id, the pid and time namespaces, and the process's start time (in clock ticks
since boot, as that time namespace counts them), then the tags of the runtime
and of the drive that holds the lease.

`is_dead` answers True only when it can prove it: same boot, same namespaces,
and that pid is gone, a zombie, or a newer process (its start time differs).
Anything it cannot judge (another host, a container with its own pid or time
namespace, no ``/proc``, an owner name without these facts) is treated as
alive: the caller waits for the lease to expire, as it always could.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from functools import cache

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class Identity:
    """What tells one process apart on its machine while the machine runs."""

    boot: str
    """The first 16 hex digits of the kernel's boot id (random per boot, so per machine too)."""
    namespaces: str
    """The pid namespace's inode and the time namespace's (``0`` on kernels without them), as
    ``pid-time``: pids, and start times, mean the same only within the same two."""
    start: int
    """The process's start time, in clock ticks since boot (``/proc/<pid>/stat``, field 22)."""


def _stat(pid: int | str) -> tuple[int, str, int] | None:
    """``(pid, state, start time)`` of a process from ``/proc``, or None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')' itself.
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return int(head.split(" (", 1)[0]), fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


@cache
def _identity_of(pid: int) -> Identity | None:
    """This process's identity, or None where it cannot be established (no Linux /proc)."""
    try:
        with open(_BOOT_ID) as handle:
            boot = handle.read().strip().replace("-", "")[:16]
        namespaces = f"{os.stat('/proc/self/ns/pid').st_ino}-{_inode('/proc/self/ns/time')}"
    except OSError:
        return None
    stat = _stat("self")
    # A /proc mounted from another pid namespace shows this process under another pid
    # (or not at all): what it says of other pids would not be about our neighbours.
    if stat is None or stat[0] != pid or len(boot) != 16:
        return None
    return Identity(boot, namespaces, stat[2])


def _inode(path: str) -> int:
    """A namespace's inode, or 0 where the kernel has no such namespace (time: before 5.6)."""
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return 0


def identity() -> Identity | None:
    """This process's identity (looked up again in a forked child, whose pid differs)."""
    return _identity_of(os.getpid())


_nonces = random.Random()  # tether's own: a program that seeds `random` must not make owners alike
os.register_at_fork(after_in_child=_nonces.seed)  # siblings forked from one parent differ too


def tag() -> str:
    """Eight random hex digits that tell owners in one process apart (uuid4 costs a system call)."""
    return f"{_nonces.getrandbits(32):08x}"


@cache
def _owner_of(pid: int) -> str:
    name = f"{os.uname().nodename}:{pid}:{tag()}"
    found = _identity_of(pid)
    if found is None:
        return name
    return f"{name}@{found.boot}.{found.namespaces}.{found.start}"


def process_owner() -> str:
    """This process's name as a lease owner (a forked child gets its own)."""
    return _owner_of(os.getpid())


def is_dead(owner: str) -> bool:
    """Whether the process named by a lease ``owner`` provably no longer runs.

    False whenever that cannot be proven: the owner runs on another machine or
    boot, in another pid namespace, or names no identity (a worker given a name
    of its own, a tether that did not record one); or this process cannot read
    ``/proc`` the way it needs to.
    """
    process = owner.split("/", 1)[0]
    head, at, facts = process.rpartition("@")
    if not at:
        return False
    try:
        boot, namespaces, start = facts.split(".")
        pid = int(head.rsplit(":", 2)[-2])
        recorded = Identity(boot, namespaces, int(start))
    except (ValueError, IndexError):
        return False
    mine = identity()
    if mine is None or (recorded.boot, recorded.namespaces) != (mine.boot, mine.namespaces):
        return False  # another machine, boot or container: cannot look
    if pid == os.getpid():
        return recorded.start != mine.start  # a process before this one had our pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True  # no process has that pid at all
    except PermissionError:
        pass  # it exists and belongs to someone else: look at its start time
    except OSError:
        return False
    stat = _stat(pid)
    if stat is None:
        return False  # it exists but /proc hides it (hidepid), or it ended just now: wait
    _, state, started = stat
    if started != recorded.start:
        return True  # another process, which has the dead one's pid now
    # A zombie ran to its end (or was killed) and only waits for its parent to read its status;
    # unless only its first thread ended and others run on (then it shows Z too).
    return state in ("Z", "X") and _threads(pid) <= 1


def _threads(pid: int) -> int:
    """How many threads the process has (``/proc/<pid>/status``); 0 if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0
