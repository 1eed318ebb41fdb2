"""`ribbit doctor` lines about the agent side: sandbox, undo journal, file watcher."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel


class Check(BaseModel):
    name: str
    ok: bool
    detail: str


def agent_checks(root: Path, model_bytes: int = 0) -> list[Check]:
    """`model_bytes`: what the configured model would keep resident (the default memory cap leaves it room)."""
    from agent.undo.journal import journal_kind
    from agent.sandbox.runner import sandbox_available
    from agent.undo.watcher import count_dirs, inotify_watch_limit

    checks = place_checks(root)
    if not checks[0].ok:
        return checks  # no sandbox, journal or watcher lines for a folder ribbit will not work in
    ok, why = sandbox_available()
    checks.append(Check(
        name="sandbox", ok=ok,
        detail=f"{why}: Bash runs read-only outside the repo, without network" if ok
        else f"NO SANDBOX: {why}; every Bash call will ask for approval, and full-auto needs --no-sandbox",
    ))
    checks += sandbox_checks(root, ok)
    if ok:
        checks.append(overlay_check())
    checks.append(caps_check(model_bytes))
    # Says which journal is in use without creating a private one.
    from agent.undo.ignored import IGNORED_BYTES_BUDGET, IGNORED_FILES_BUDGET

    checks.append(Check(
        name="undo journal", ok=root.is_dir(),
        detail=f"{journal_kind(root)}; git-ignored files too, up to {IGNORED_FILES_BUDGET:,} files / "
        f"{IGNORED_BYTES_BUDGET >> 20} MiB (installed environments such as .venv and node_modules are not journaled)",
    ))
    limit = inotify_watch_limit()
    if limit is None:
        checks.append(Check(name="file watcher", ok=True, detail="watchdog (native observer for this system)"))
    else:
        budget = limit // 2
        dirs = count_dirs(root, budget) if root.is_dir() else 0
        inotify = dirs <= budget
        checks.append(Check(
            name="file watcher", ok=True,
            detail=f"inotify ({dirs} folders, limit {limit} watches)" if inotify
            else f"polling: more than {budget} folders for {limit} inotify watches",
        ))
    return checks


def place_checks(root: Path) -> list[Check]:
    """The folder ribbit would work in (refused: /, home, system folders; read-only: plan mode only) and
    the state folder (sessions, journals, outputs)."""
    from agent.paths import read_only_checkout, state_home, state_problem, unsuitable_folder

    why = None if root.is_dir() else f"{root} is not a folder (or does not exist)"
    why = why or unsuitable_folder(root)
    if why is not None:
        checks = [Check(name="repository", ok=False, detail=why)]
    elif (read_only := read_only_checkout(root)) is not None:
        checks = [Check(name="repository", ok=False, detail=read_only)]
    else:
        checks = [Check(name="repository", ok=True, detail=str(root))]
    problem = state_problem()
    checks.append(Check(name="state folder", ok=problem is None, detail=problem or str(state_home())))
    return checks


def sandbox_checks(root: Path, sandbox_ok: bool) -> list[Check]:
    """What a sandboxed command may write, what it cannot see, what it gets from ribbit's environment."""
    import os

    from agent.sandbox.bwrap import bwrap_works
    from agent.sandbox.runner import BwrapRunner
    from agent.sandbox.config import (
        SandboxConfigError, config_path, exposed_inside, hidden_homes, hidden_paths, load_settings, sandbox_env,
    )

    path = _home_short(config_path())
    try:
        settings = load_settings()
    except SandboxConfigError as exc:
        return [Check(name="sandbox config", ok=False, detail=f"{exc}; ribbit will not start until it is fixed")]
    checks = [Check(
        name="sandbox config", ok=True,
        detail=f"{path}" + ("" if config_path().exists() else " (none: the defaults)")
        + "; RIBBIT_SANDBOX_HIDE / _EXPOSE / _ENV add to it",
    )]
    env_names = sorted(sandbox_env(os.environ, settings, tmpdir="/tmp"))
    tmp = f"a private /tmp ({settings.tmp_size_mb} MiB) and /dev/shm ({settings.shm_size_mb} MiB)"
    if sandbox_ok and bwrap_works()[0] and root.is_dir():
        runner = BwrapRunner(root, settings)
        view = runner.view("read-write")
        probe = _probe(runner, root)
        runner.close()
        if probe:
            checks.append(Check(name="sandbox probe", ok=False, detail=f"a command in this layout fails: {probe}"))
        extra = [_home_short(p) for p in view.writable if p != view.root]
        hidden, sockets, exposed = view.hidden, view.sockets, view.exposed
        masked = [_home_short(m.path) for m in view.masked]
        if view.tmp_bytes is None:
            tmp = "a private /tmp and /dev/shm on disk, not capped (bubblewrap older than 0.7 has no --size)"
    else:
        extra = []
        hidden, sockets = hidden_paths(settings, os.environ), []
        exposed = exposed_inside(settings, os.environ, hidden)
        masked = []
    checks.append(Check(
        name="sandbox writes", ok=True,
        detail=(
            f"{root} (not .git) and {tmp}"
            + (", " + ", ".join(extra) if extra else "")
            + "; in ask and auto-edit, commands that run without asking get the repository read-only; no network"
        ),
    ))
    homes = [h for h in hidden_homes(os.environ) if h in hidden]
    others = [p for p in hidden if p not in homes]
    home_part = [f"{', '.join(str(h) for h in homes)} (empty but for the toolchains below)"] if homes else []
    shown = ", ".join([*home_part, *(_home_short(p) for p in others)]) or "nothing"
    checks.append(Check(
        name="sandbox hides", ok=True,
        detail=f"{shown}; {len(sockets)} host unix socket(s) outside those masked" + _first(sockets),
    ))
    checks.append(Check(
        name="sandbox shows", ok=True,
        detail=("of the home folder, read-only: " + ", ".join(_home_short(p) for p in exposed) if exposed
                else "nothing of the home folder") + " (sandbox.toml: expose = [\"~/...\"] shows more; \"~\" all of it)",
    ))
    checks.append(Check(
        name="sandbox masks", ok=True,
        detail=("shown with git credentials masked: " + ", ".join(masked) if masked
                else "no git config file here holds credentials to mask") + " (docs/security.md)",
    ))
    checks.append(Check(
        name="sandbox env", ok=True, detail=" ".join(env_names) + " (values not shown; nothing else is passed)",
    ))
    if root.is_dir():
        from agent.sandbox.runner import WriteQuota

        checks.append(Check(
            name="write quota", ok=True,
            detail=WriteQuota(root, settings.write_quota_mb).describe() + " (sandbox.toml: write_quota_mb; 0 = none)",
        ))
    return checks


def overlay_check() -> Check:
    """Whether a writable command's changes can be kept apart from everyone else's (agent.sandbox.overlay)."""
    from agent.sandbox.overlay import overlay_works

    if overlay_works():
        return Check(name="command overlay", ok=True, detail=(
            "a writable command writes through an overlay applied when it ends: what you change meanwhile stays yours"))
    return Check(name="command overlay", ok=False, detail=(
        "cannot mount an overlay for commands here (unshare + overlayfs in a user namespace): what changes while "
        "a writable command runs counts as the command's, and undo would take it back"))


def caps_check(model_bytes: int) -> Check:
    """The memory and process caps every command runs under, and how this machine holds them (a cgroup
    is made and removed to find out)."""
    from agent.sandbox.caps import DESKTOP_AT_LEAST, DESKTOP_SHARE, CapLimits, CommandCaps, cgroups_wanted, memory_text, memory_total
    from agent.sandbox.config import SandboxConfigError, load_settings

    try:
        settings = load_settings()
    except SandboxConfigError:
        return Check(name="command caps", ok=False, detail="the sandbox config cannot be read (above)")
    caps = CommandCaps.create(
        CapLimits.from_settings(settings.memory_mb, settings.max_processes, model_bytes), cgroups=cgroups_wanted(),
    )
    try:
        detail = caps.describe()
    finally:
        caps.close()
    total = memory_total()
    if settings.memory_mb is None and total is not None:
        desktop = max(DESKTOP_AT_LEAST, total // DESKTOP_SHARE)
        detail += (f"; memory default: {memory_text(total)} of RAM less the model's {memory_text(model_bytes)} "
                   f"and {memory_text(desktop)} for the desktop")
    return Check(
        name="command caps", ok=caps.memory != "none" or caps.limits.memory_bytes is None,
        detail=detail + " (sandbox.toml: memory_mb, max_processes; 0 = no cap)",
    )


def _probe(runner: object, root: Path) -> str:
    """Run `true` in the real layout, read-only (nothing is made in the folder); '' when it works."""
    import threading

    from agent.sandbox.runner import BwrapRunner

    assert isinstance(runner, BwrapRunner)
    result = runner.run("true", root, 20, threading.Event(), access="read-only")
    if result.exit_code == 0:
        return ""
    lines = result.output.strip().splitlines()
    return lines[-1][:200] if lines else f"exit code {result.exit_code}"


def _home_short(path: Path) -> str:
    home = Path.home()
    return "~/" + str(path.relative_to(home)) if path.is_relative_to(home) and path != home else str(path)


def _first(paths: list[Path], count: int = 3) -> str:
    if not paths:
        return ""
    more = f" and {len(paths) - count} more" if len(paths) > count else ""
    return " (" + ", ".join(str(p) for p in paths[:count]) + more + ")"
