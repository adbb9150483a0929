"""Lease owners name their process; a recoverer calls one dead only when it can prove it.

Real processes throughout: a child that exited, a zombie, a live stranger whose
pid is reused, and a process in a pid namespace of its own (``unshare``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tether.runtime._core import owners as _owners
from tether.runtime._core.owners import _stat, identity, is_dead, process_owner

PRINT_OWNER = "from tether.runtime._core.owners import process_owner; print(process_owner(), flush=True)"


def facts(owner: str) -> tuple[str, int, str, str, int]:
    """(host, pid, boot, namespaces, start) of an owner name."""
    head, _, tail = owner.split("/", 1)[0].partition("@")
    host, pid, _ = head.rsplit(":", 2)
    boot, namespaces, start = tail.split(".")
    return host, int(pid), boot, namespaces, int(start)


def owner_like(pid: int, start: int, *, boot: str | None = None, namespace: str | None = None) -> str:
    host, _, mine_boot, mine_namespace, _ = facts(process_owner())
    return f"{host}:{pid}:0badf00d@{boot or mine_boot}.{namespace or mine_namespace}.{start}/tag"


def test_this_process_is_alive_and_says_who_it_is() -> None:
    owner = process_owner()
    host, pid, boot, namespace, start = facts(owner)
    mine = identity()
    assert mine is not None and (pid, boot, namespace, start) == (os.getpid(), mine.boot, mine.namespaces,
                                                                  mine.start)
    assert host == os.uname().nodename
    assert not is_dead(owner)
    assert not is_dead(owner + "/runtime-tag/drive-tag")


def test_a_process_that_exited_is_dead() -> None:
    child = subprocess.run([sys.executable, "-c", PRINT_OWNER], capture_output=True, text=True, check=True)
    assert is_dead(child.stdout.strip())


def test_a_killed_child_not_yet_reaped_is_dead() -> None:
    with subprocess.Popen([sys.executable, "-c", PRINT_OWNER + "; import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        owner = child.stdout.readline().strip()
        assert not is_dead(owner)  # running
        os.kill(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, its status not read: a zombie
        assert _stat(child.pid) is not None and _stat(child.pid)[1] == "Z"  # type: ignore[index]
        assert is_dead(owner)


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    # Alive until its stdin closes or it is killed: no timer decides when it goes.
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE) as process:
        yield process
        process.kill()


def test_a_pid_reused_by_another_process_is_not_its_owner(stranger: subprocess.Popen[bytes]) -> None:
    stat = _stat(stranger.pid)
    assert stat is not None
    assert not is_dead(owner_like(stranger.pid, stat[2]))  # that very process: alive
    assert is_dead(owner_like(stranger.pid, stat[2] - 5))  # an earlier process with the same pid: gone
    assert stranger.poll() is None


def test_what_cannot_be_judged_is_alive(stranger: subprocess.Popen[bytes]) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(gone.stdout)
    assert is_dead(owner_like(dead_pid, 1))  # the baseline: this one can be judged, and is dead
    assert not is_dead(owner_like(dead_pid, 1, boot="00000000000000ff"))  # another machine, or boot
    assert not is_dead(owner_like(dead_pid, 1, namespace="1-" + facts(process_owner())[3].split("-")[1]))
    assert not is_dead(owner_like(dead_pid, 1, namespace=facts(process_owner())[3].split("-")[0] + "-1"))
    for unsaid in ("worker-7", "web-1:4242:abcd", "web-1:4242:abcd@", "web-1:x:abcd@b.1.2", f"h:{dead_pid}:a@zz"):
        assert not is_dead(unsaid)


def test_without_proc_nothing_is_judged_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = subprocess.run([sys.executable, "-c", PRINT_OWNER], capture_output=True, text=True, check=True)
    owner = gone.stdout.strip()
    assert is_dead(owner)
    monkeypatch.setattr(_owners, "_BOOT_ID", "/nonexistent/boot_id")  # a system without Linux's /proc
    _owners._identity_of.cache_clear()
    try:
        assert identity() is None
        assert not is_dead(owner)
    finally:
        _owners._identity_of.cache_clear()


UNSHARE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]


def test_a_process_in_another_pid_namespace_is_never_judged() -> None:
    """A container's pid 1 is not our pid 1: neither side may call the other dead."""
    outside = process_owner()
    inside = subprocess.run([*UNSHARE, sys.executable, "-c",
                             PRINT_OWNER + f"; from tether.runtime._core.owners import is_dead; print(is_dead({outside!r}))"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert inside.returncode == 0, inside.stderr
    owner, verdict = inside.stdout.split()
    _, pid, _, namespace, _ = facts(owner)
    assert pid == 1 and namespace != facts(outside)[3]
    assert verdict == "False"  # from inside, this live process cannot be judged: alive
    assert not is_dead(owner)  # it has exited, but in a namespace we cannot look into: wait
