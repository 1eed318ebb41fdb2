"""Every folder ribbit keeps things in outside the repository, and the names it gives them.

State (`$XDG_STATE_HOME/ribbit`: journals of folders that are not repositories, saved sessions, per-project
settings, cut command outputs, crash logs) and configuration (`$XDG_CONFIG_HOME/ribbit`: sandbox.toml,
AGENTS.md). Caches (`$XDG_CACHE_HOME/ribbit`) are the models' (models/base.py). A relative XDG_* value is
ignored, as the XDG spec says (it would put ribbit's files in whatever folder ribbit runs in).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path


def _xdg(name: str, default: str, environ: Mapping[str, str]) -> Path:
    value = environ.get(name, "")
    return Path(value) if value and os.path.isabs(value) else home_dir(environ) / default


def home_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("HOME") or Path.home())


def state_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_STATE_HOME/ribbit` (default ~/.local/state/ribbit)."""
    return _xdg("XDG_STATE_HOME", ".local/state", os.environ if environ is None else environ) / "ribbit"


def config_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/ribbit` (default ~/.config/ribbit)."""
    return _xdg("XDG_CONFIG_HOME", ".config", os.environ if environ is None else environ) / "ribbit"


def project_key(root: Path) -> str:
    """`NAME-HASH` for a folder: what ribbit's per-project state outside the repository is named by."""
    resolved = root.resolve()
    return f"{resolved.name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:16]}"


def project_state(root: Path) -> Path:
    """Per-project settings folder (kept outside the repository, so nothing leaks into commits)."""
    return state_home() / "projects" / project_key(root)


def private_git_dir(root: Path) -> Path:
    """The undo journal of a folder that is not a git repository."""
    return state_home() / "journals" / f"{project_key(root)}.git"


def new_session_id() -> str:
    """Sorts in the order sessions began, also within one second (`ribbit undo` breaks ties of their
    one-second commit times by id, and undo takes the last): milliseconds, then 3 random hex digits."""
    now = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now % 1 * 1000):03d}{os.urandom(2).hex()[:3]}"


# Folders that are never a project: the agent could change the whole system or the user's whole home
# there, and the watcher would follow tens of thousands of folders. TREES: the folder and all inside it;
# FOLDERS: the folder itself (a project may live below /opt, /srv, /tmp, /var or /mnt).
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys",
    "/usr", "/System", "/Library", "/private/etc", "/private/var/db",
)
SYSTEM_FOLDERS = ("/", "/home", "/mnt", "/media", "/opt", "/root", "/snap", "/srv", "/tmp", "/var", "/Users",
                  "/Applications", "/Volumes", "/private", "/private/tmp", "/private/var")


def _resolved(path: str | Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path).absolute()


REPO_ADVICE = "start ribbit in your project's folder, or name it with --repo DIR"


def unsuitable_folder(root: Path, environ: Mapping[str, str] | None = None, *, advice: str = REPO_ADVICE) -> str | None:
    """Why `root` cannot be the folder the agent works in (one line ending in `advice`), or None when it can.
    `ribbit` itself names --repo; `ribbit eval` asks the same of each task's repository."""
    here = _resolved(root)
    home = _resolved(home_dir(environ))
    if here == home:
        return f"{here} is your home folder, not a project: the agent could change anything in it; {advice}"
    if here in home.parents:
        what = "the root of the file system" if here == Path(here.anchor) else "a folder that holds your home folder"
        return f"{here} is {what}, not a project: the agent could change any file below it; {advice}"
    for tree in SYSTEM_TREES:
        top = _resolved(tree)
        if here == top or top in here.parents:
            return f"{here} is a system folder, not a project: the agent could change the system; {advice}"
    if any(here == _resolved(folder) for folder in SYSTEM_FOLDERS):
        return f"{here} is a system folder, not a project: the agent could change everything below it; {advice}"
    return None


def unwritable(folder: Path) -> str | None:
    """Why a file cannot be made in `folder` (a read-only mount, no permission), or None. A real probe:
    os.access says yes to root on a read-only mount."""
    probe = folder / f".ribbit-probe-{os.getpid()}-{os.urandom(3).hex()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    try:
        probe.unlink()
    except OSError:
        pass
    return None


def state_problem() -> str | None:
    """Why ribbit cannot keep its state (sessions, journals, settings, command outputs), or None: one line."""
    folder = state_home()
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        why = unwritable(folder)
    except OSError as exc:
        why = exc.strerror or str(exc)
    if why is None:
        return None
    return (f"ribbit's state folder {folder} is not writable ({why}): ribbit keeps sessions, undo journals and "
            "command outputs there; set XDG_STATE_HOME to a writable folder")


def read_only_checkout(root: Path) -> str | None:
    """One line when the agent cannot write in `root` (only plan mode can work there), else None."""
    why = unwritable(root)
    if why is None:
        return None
    return (f"{root} is read-only ({why}): ribbit cannot edit here; --mode plan reads and plans without "
            "changing anything")
