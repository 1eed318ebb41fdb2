"""What the Bash sandbox lets a command see: environment variables, hidden paths, host sockets, tmp sizes.

The rules are allow-lists where that is possible (environment variables) and masks where it is not
(the filesystem is read-only but readable, so credential folders are hidden explicitly). The user adds
to them in `$XDG_CONFIG_HOME/ribbit/sandbox.toml` (default `~/.config/ribbit/sandbox.toml`) or with
the `RIBBIT_SANDBOX_HIDE`, `RIBBIT_SANDBOX_EXPOSE`, `RIBBIT_SANDBOX_ENV` variables:

    hide = ["~/work/other-client"]   # more paths to hide (shown empty inside the sandbox)
    expose = ["~/.docker"]           # default-hidden paths to show again, or parts of a hidden folder
    env = ["DATABASE_URL", "MYAPP_*"]  # more variables to pass in (names or fnmatch patterns)
    writable = ["~/.cache/pip"]      # more paths a command may write, where the repository is writable
    tmp_size_mb = 1024               # size of the private, RAM-backed /tmp
    shm_size_mb = 256                # size of the private /dev/shm
    write_quota_mb = 4096            # what a session may write to the repository's disk (default: half the free space)
    memory_mb = 4096                 # memory one command may use (default: RAM less the model and the desktop's room)
    max_processes = 1024             # processes (threads count) one command may run at once
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.paths import config_home, home_dir

# What a command may do to the repository: plan mode and read-only commands get "read-only".
Access = Literal["read-only", "read-write"]

# Variables that tests, build tools and toolchains need; nothing that usually carries a secret.
# `LC_ALL` is folded into LANG and LC_MESSAGES is pinned to C below (see sandbox_env).
ENV_ALLOWED: tuple[str, ...] = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "HOSTNAME",
    "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_DIRS", "XDG_CONFIG_DIRS",
    # Python
    "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_EXE", "CONDA_SHLVL", "PYENV_ROOT", "PYENV_VERSION",
    "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED",
    "UV_CACHE_DIR", "UV_PYTHON", "POETRY_HOME",
    # JavaScript, Ruby, Java, Go, Rust, .NET
    "NVM_DIR", "NVM_BIN", "NODE_PATH", "NODE_ENV", "GEM_HOME", "GEM_PATH", "RBENV_ROOT", "BUNDLE_PATH",
    "JAVA_HOME", "GOPATH", "GOROOT", "GOFLAGS", "GOCACHE", "GOMODCACHE", "GOTOOLCHAIN",
    "CARGO_HOME", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "DOTNET_ROOT",
    # C and C++ builds
    "CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "MAKEFLAGS", "PKG_CONFIG_PATH",
    "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH",
    "SOURCE_DATE_EPOCH", "CI",
)
# Set for every command: no pager waits on a terminal nobody reads, no colour codes in the output.
ENV_FIXED: dict[str, str] = {
    "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1",
    # English system messages: the model reads them, and ribbit recognises "Read-only file system".
    "LC_MESSAGES": "C",
}

# Credential stores and private data under $HOME, hidden in every sandboxed command.
DEFAULT_HIDDEN_IN_HOME: tuple[str, ...] = (
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".config/gh", ".config/hub", ".config/doctl",
    ".kube", ".docker", ".config/containers/auth.json", ".netrc", ".git-credentials", ".config/git/credentials",
    ".pypirc", ".npmrc", ".yarnrc.yml", ".gem/credentials", ".cargo/credentials", ".cargo/credentials.toml",
    ".m2/settings.xml", ".gradle/gradle.properties", ".ivy2/.credentials", ".terraform.d", ".vault-token",
    ".pgpass", ".my.cnf", ".s3cfg", ".boto", ".oci", ".config/rclone", ".config/op", ".password-store",
    ".local/share/keyrings", ".mozilla", ".config/google-chrome", ".config/chromium", ".config/BraveSoftware",
    ".thunderbird", ".bash_history", ".zsh_history", ".python_history", ".psql_history", ".mysql_history",
    ".node_repl_history", ".local/share/fish/fish_history",
    # Coding assistants' own logins
    ".claude/.credentials.json", ".codex/auth.json", ".config/github-copilot",
)
# Host folders that hold the sockets of running services (dbus, systemd, docker, ssh/gpg agents).
SOCKET_FOLDERS: tuple[str, ...] = ("/run", "/var/run")


class SandboxConfigError(Exception):
    """One line for the user: the sandbox settings cannot be read."""


class SandboxSettings(BaseModel):
    """The user's additions to the sandbox's rules (sandbox.toml and RIBBIT_SANDBOX_* variables)."""

    model_config = ConfigDict(extra="forbid")

    hide: list[str] = Field(default_factory=list)
    expose: list[str] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list)
    writable: list[str] = Field(default_factory=list)
    tmp_size_mb: int = Field(1024, ge=1, le=1 << 20)
    shm_size_mb: int = Field(256, ge=1, le=1 << 20)
    # What a session may write to the repository's disk (MiB; 0: no quota); unset: half the free space.
    write_quota_mb: int | None = Field(None, ge=0, le=1 << 30)
    # Caps for each command (agent.sandbox.caps; 0: none); unset memory_mb: RAM less the model and the desktop.
    memory_mb: int | None = Field(None, ge=0, le=1 << 30)
    max_processes: int | None = Field(None, ge=0, le=1 << 22)

    @property
    def tmp_bytes(self) -> int:
        return self.tmp_size_mb * 1024 * 1024

    @property
    def shm_bytes(self) -> int:
        return self.shm_size_mb * 1024 * 1024


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return config_home(environ) / "sandbox.toml"


def load_settings(environ: Mapping[str, str] | None = None) -> SandboxSettings:
    """The settings file plus the RIBBIT_SANDBOX_* variables; SandboxConfigError (one line) if unreadable.

    A broken file stops ribbit rather than being ignored: it may be what hides the user's secrets.
    """
    environ = os.environ if environ is None else environ
    path = config_path(environ)
    data: dict[str, object] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise SandboxConfigError(f"cannot read {path}: {exc}") from None
    try:
        settings = SandboxSettings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "settings"
        raise SandboxConfigError(f"{path}: {where}: {err['msg']}") from None
    extra = {
        "hide": _split(environ.get("RIBBIT_SANDBOX_HIDE", ""), os.pathsep),
        "expose": _split(environ.get("RIBBIT_SANDBOX_EXPOSE", ""), os.pathsep),
        "env": _split(environ.get("RIBBIT_SANDBOX_ENV", ""), ","),
    }
    return settings.model_copy(update={k: [*getattr(settings, k), *v] for k, v in extra.items()})


def _split(text: str, sep: str) -> list[str]:
    return [part.strip() for part in text.split(sep) if part.strip()]


def expand(path: str, home: Path) -> Path:
    """`~` and `~/x` against the sandbox's HOME; relative paths are taken from HOME too."""
    if path == "~" or path.startswith("~/"):
        return home / path[2:] if path != "~" else home
    candidate = Path(path)
    return candidate if candidate.is_absolute() else home / candidate


def sandbox_env(
    environ: Mapping[str, str], settings: SandboxSettings, *, tmpdir: str | None,
) -> dict[str, str]:
    """The whole environment a command gets: allow-listed names from ribbit's, then the fixed values."""
    allowed = _matcher((*ENV_ALLOWED, *settings.env))
    env = {name: value for name, value in environ.items() if allowed(name)}
    if "LC_ALL" in environ and "LC_ALL" not in settings.env:
        # LC_ALL would override LC_MESSAGES=C: keep the user's locale for everything else through LANG.
        env.pop("LC_ALL", None)
        env["LANG"] = environ["LC_ALL"]
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("HOME", str(home_dir(environ)))
    env.update(ENV_FIXED)
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    else:
        env.pop("TMPDIR", None)
        if "TMPDIR" in environ:
            env["TMPDIR"] = environ["TMPDIR"]
    return env


@functools.lru_cache(maxsize=8)
def _matcher(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """Exact names by set lookup, the few patterns (LC_*, the user's) as one regex: called per command."""
    exact = frozenset(p for p in patterns if not any(c in p for c in "*?["))
    wild = [fnmatch.translate(p) for p in patterns if p not in exact]
    regex = re.compile("|".join(wild)) if wild else None
    return lambda name: name in exact or (regex is not None and regex.fullmatch(name) is not None)


def hidden_paths(settings: SandboxSettings, environ: Mapping[str, str], extra: Iterable[Path] = ()) -> list[Path]:
    """Existing paths to hide, resolved (a hidden symlink hides its target), outermost first, no duplicates.

    A path given in `expose` is dropped from the list; one inside a hidden folder is bound back later.
    """
    home = home_dir(environ)
    exposed = {_resolved(expand(p, home)) for p in settings.expose}
    runtime = environ.get("XDG_RUNTIME_DIR")
    candidates = [
        *(home / rel for rel in DEFAULT_HIDDEN_IN_HOME),
        *(Path(p) for p in SOCKET_FOLDERS),
        *([Path(runtime)] if runtime and Path(runtime).is_absolute() else []),
        *extra,
        *(expand(p, home) for p in settings.hide),
    ]
    found: set[Path] = set()
    for candidate in candidates:
        if not os.path.lexists(candidate):
            continue
        real = _resolved(candidate)
        if real in exposed or real == Path("/") or not real.exists():
            continue
        found.add(real)
    # Nested ones stay: a bind between them (the repository inside a hidden folder) can show one again.
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def exposed_inside(settings: SandboxSettings, environ: Mapping[str, str], hidden: Iterable[Path]) -> list[Path]:
    """Paths the user exposed that lie inside a hidden folder: they are bound back, read-only."""
    home = home_dir(environ)
    hidden = list(hidden)
    out = []
    for entry in settings.expose:
        real = _resolved(expand(entry, home))
        if real.exists() and any(real != h and real.is_relative_to(h) for h in hidden):
            out.append(real)
    return sorted(set(out), key=lambda p: (len(p.parts), str(p)))


def host_socket_paths(table: Path = Path("/proc/net/unix")) -> list[Path]:
    """Every filesystem path a unix socket is bound to on this host (its network namespace), that exists.

    A read-only mount does not stop connect(): each such socket is masked in the sandbox.
    """
    try:
        lines = table.read_text(errors="replace").splitlines()[1:]
    except OSError:
        return []
    paths: set[Path] = set()
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) < 8 or not fields[7].startswith("/"):
            continue  # unnamed or abstract (@...) sockets: the sandbox's own network namespace has none
        path = Path(fields[7])
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                paths.add(path)
        except (OSError, ValueError):
            continue
    return sorted(paths)


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path
