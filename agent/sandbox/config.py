"""What the Bash sandbox lets a command see: environment variables, hidden paths, host sockets, tmp sizes.

The rules are allow-lists: environment variables by name, and the home folder (HOME, the user's own
home if HOME names another, /root when ribbit runs as root, XDG folders set outside them) is an empty
read-only folder with only the toolchains' installs and caches shown again, read-only (HOME_TOOLCHAINS,
and PATH entries and toolchain variables that lead into it). The rest of the file system is read-only
but readable. Credential paths are also hidden by name (DEFAULT_HIDDEN_IN_HOME): they matter inside a
shown toolchain folder, in a repository that is the home, or when the user shows the whole home again
with `expose = ["~"]`. The user adds to the rules in `$XDG_CONFIG_HOME/ribbit/sandbox.toml` (default
`~/.config/ribbit/sandbox.toml`) or with the `RIBBIT_SANDBOX_HIDE`, `RIBBIT_SANDBOX_EXPOSE`,
`RIBBIT_SANDBOX_ENV` variables:

    hide = ["~/work/other-client"]   # more paths to hide (shown empty inside the sandbox)
    expose = ["~/.config/mise"]      # more of the home folder to show (read-only), or a default-hidden path
    env = ["DATABASE_URL", "MYAPP_*"]  # more variables to pass in (names or fnmatch patterns)
    writable = ["~/.cache/pip"]      # more paths a command may write, where the repository is writable
    tmp_size_mb = 1024               # size of the private, RAM-backed /tmp
    shm_size_mb = 256                # size of the private /dev/shm
    write_quota_mb = 4096            # what a session may write to the repository's disk (default: half the free space)
    memory_mb = 4096                 # memory one command may use (default: RAM less the model and the desktop's room)
    max_processes = 1024             # processes (threads count) one command may run at once
    bang_sandbox = true              # run the user's own `!command`s in the sandbox too (default: as the user)
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import os
import pwd
import re
import stat
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.paths import config_home, home_dir
from models.settings import Settings

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
# What a build or a test needs of the home folder, shown read-only in a home that is otherwise empty:
# language version managers' installs, per-user packages, package managers' caches, build tools' local
# repositories and wrappers' downloads. `~` is the home folder; `${VAR:-default}` is VAR where it is set
# to an absolute path, else the default; `*` matches within one name. Only the parts that hold programs
# and packages, not a tool's whole folder where that also keeps logins (~/.cargo/credentials.toml,
# ~/.m2/settings.xml, ~/.gradle/gradle.properties, ~/.nuget/NuGet): those stay hidden.
HOME_TOOLCHAINS: tuple[str, ...] = (
    # Python
    "${PYENV_ROOT:-~/.pyenv}", "~/.local/bin", "~/.local/lib/python*/site-packages",
    "${XDG_DATA_HOME:-~/.local/share}/uv/python", "${XDG_DATA_HOME:-~/.local/share}/uv/tools", "${UV_CACHE_DIR:-~/.cache/uv}",
    "${PIP_CACHE_DIR:-~/.cache/pip}", "${XDG_CACHE_HOME:-~/.cache}/pip", "${XDG_CACHE_HOME:-~/.cache}/uv",
    "${XDG_CACHE_HOME:-~/.cache}/pypoetry", "${XDG_DATA_HOME:-~/.local/share}/pypoetry", "${POETRY_HOME:-~/.poetry}",
    "${XDG_DATA_HOME:-~/.local/share}/pipx", "~/.local/pipx", "~/.virtualenvs",
    "${XDG_DATA_HOME:-~/.local/share}/virtualenvs", "~/.conda/envs", "~/.conda/pkgs", "~/miniconda3", "~/anaconda3",
    "~/miniforge3", "~/mambaforge", "~/.pixi/bin", "~/.pixi/envs",
    # Version managers of several languages
    "${ASDF_DATA_DIR:-~/.asdf}", "~/.tool-versions", "${MISE_DATA_DIR:-~/.local/share/mise}",
    "${XDG_DATA_HOME:-~/.local/share}/rtx", "~/.nix-profile",
    # JavaScript
    "${NVM_DIR:-~/.nvm}", "${VOLTA_HOME:-~/.volta}", "${FNM_DIR:-~/.local/share/fnm}", "~/.fnm", "~/.npm/_cacache",
    "~/.npm/_npx", "${XDG_CACHE_HOME:-~/.cache}/yarn", "~/.yarn/berry/cache", "${PNPM_HOME:-~/.local/share/pnpm}",
    "${XDG_CACHE_HOME:-~/.cache}/pnpm", "~/.pnpm-store", "${BUN_INSTALL:-~/.bun}/bin", "~/.bun/install/cache",
    "${DENO_DIR:-~/.cache/deno}", "~/.deno/bin", "${XDG_CACHE_HOME:-~/.cache}/ms-playwright",
    "${XDG_CACHE_HOME:-~/.cache}/Cypress", "${XDG_CACHE_HOME:-~/.cache}/puppeteer", "~/.node-gyp",
    "${XDG_CACHE_HOME:-~/.cache}/node-gyp",
    # Rust, Go
    "${CARGO_HOME:-~/.cargo}/bin", "${CARGO_HOME:-~/.cargo}/registry", "${CARGO_HOME:-~/.cargo}/git",
    "${RUSTUP_HOME:-~/.rustup}", "${GOPATH:-~/go}/bin", "${GOPATH:-~/go}/pkg", "${GOMODCACHE:-~/go/pkg/mod}",
    "${GOCACHE:-~/.cache/go-build}", "~/sdk", "${XDG_CACHE_HOME:-~/.cache}/golangci-lint",
    # JVM
    "~/.m2/repository", "~/.m2/wrapper", "${GRADLE_USER_HOME:-~/.gradle}/caches", "${GRADLE_USER_HOME:-~/.gradle}/wrapper",
    "${GRADLE_USER_HOME:-~/.gradle}/native", "${GRADLE_USER_HOME:-~/.gradle}/jdks", "${SDKMAN_DIR:-~/.sdkman}/candidates",
    "~/.jdks", "~/.ivy2/cache", "~/.ivy2/local", "~/.sbt/boot", "${XDG_CACHE_HOME:-~/.cache}/coursier", "~/.konan",
    # Ruby, .NET, Haskell, OCaml, Lean, Nim, Julia, Dart, Zig, Perl, PHP, C and C++ caches
    "${RBENV_ROOT:-~/.rbenv}", "~/.rvm", "~/.gem/ruby", "${XDG_DATA_HOME:-~/.local/share}/gem", "~/.bundle/cache",
    "${DOTNET_ROOT:-~/.dotnet}", "~/.nuget/packages", "~/.ghcup", "~/.cabal/bin", "~/.cabal/packages", "~/.cabal/store",
    "~/.stack/programs", "~/.stack/snapshots", "~/.stack/pantry", "~/.opam", "~/.elan", "~/.nimble", "~/.juliaup",
    "~/.julia/packages", "~/.julia/artifacts", "~/.julia/compiled", "~/.pub-cache", "${XDG_CACHE_HOME:-~/.cache}/zig",
    "~/perl5", "~/.plenv", "~/.composer/vendor", "${XDG_CONFIG_HOME:-~/.config}/composer/vendor",
    "${XDG_CACHE_HOME:-~/.cache}/ccache", "~/.ccache", "${XDG_CACHE_HOME:-~/.cache}/bazel",
    "${XDG_CACHE_HOME:-~/.cache}/bazelisk", "~/.platformio",
    # git's own settings (user.name for a test's commits); the sandbox shows them with credentials masked.
    "~/.gitconfig", "${XDG_CONFIG_HOME:-~/.config}/git/config", "${XDG_CONFIG_HOME:-~/.config}/git/ignore",
    "${XDG_CONFIG_HOME:-~/.config}/git/attributes",
)
# A toolchain's own settings and logins, in the place the toolchain keeps them, inside a folder
# HOME_TOOLCHAINS shows: npm's global npmrc under each Node prefix, pip's pip.conf of an interpreter or
# environment, conda's .condarc (channel tokens). Shown empty (same syntax as HOME_TOOLCHAINS).
TOOLCHAIN_LOGINS: tuple[str, ...] = (
    "${NVM_DIR:-~/.nvm}/versions/node/*/etc/npmrc", "${ASDF_DATA_DIR:-~/.asdf}/installs/nodejs/*/etc/npmrc",
    "${VOLTA_HOME:-~/.volta}/tools/image/node/*/etc/npmrc", "${FNM_DIR:-~/.local/share/fnm}/node-versions/*/installation/etc/npmrc",
    "${MISE_DATA_DIR:-~/.local/share/mise}/installs/node/*/etc/npmrc", "${PNPM_HOME:-~/.local/share/pnpm}/etc/npmrc",
    "${PYENV_ROOT:-~/.pyenv}/versions/*/pip.conf", "${ASDF_DATA_DIR:-~/.asdf}/installs/python/*/pip.conf",
    "${MISE_DATA_DIR:-~/.local/share/mise}/installs/python/*/pip.conf", "~/.virtualenvs/*/pip.conf",
    "${XDG_DATA_HOME:-~/.local/share}/virtualenvs/*/pip.conf", "${XDG_DATA_HOME:-~/.local/share}/pipx/venvs/*/pip.conf",
    "${VIRTUAL_ENV:-~/.venv}/pip.conf", "${CONDA_PREFIX:-~/.conda}/.condarc", "${CONDA_PREFIX:-~/.conda}/pip.conf",
    *(f"~/{conda}/{where}" for conda in ("miniconda3", "anaconda3", "miniforge3", "mambaforge")
      for where in (".condarc", "condarc", "pip.conf", "envs/*/.condarc", "envs/*/pip.conf")),
    "~/.conda/envs/*/.condarc", "~/.conda/envs/*/pip.conf",
    # Logins a toolchain keeps inside its own folder: PlatformIO's account session, Dart's pub login (before
    # 2.15), .NET's per-user certificate stores (private keys: the ASP.NET development certificate's).
    "~/.platformio/appstate.json", "~/.pub-cache/credentials.json", "${DOTNET_ROOT:-~/.dotnet}/corefx", "~/.dotnet/corefx",
)
# Variables naming a toolchain's folder (or a list of them), shown where they lead into a hidden home.
TOOLCHAIN_VARIABLES: tuple[str, ...] = (
    "VIRTUAL_ENV", "CONDA_PREFIX", "JAVA_HOME", "GOROOT", "GEM_HOME", "GEM_PATH", "BUNDLE_PATH", "NODE_PATH",
    "PYTHONHOME", "PYTHONPATH", "PATH",
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
    # `!command` in the TUI is the user's own: unsandboxed unless this is set.
    bang_sandbox: bool = False

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
    variables = Settings.read(environ)
    extra = {"hide": variables.sandbox_hide, "expose": variables.sandbox_expose, "env": variables.sandbox_env}
    return settings.model_copy(update={k: [*getattr(settings, k), *v] for k, v in extra.items()})


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


XDG_FOLDERS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


def hidden_homes(environ: Mapping[str, str]) -> list[Path]:
    """The folders a command sees empty but for their toolchains: HOME, the user's own home (when HOME
    names another), /root for root, and the XDG folders where they are set outside those (a home's
    settings and logins, moved)."""
    xdg = tuple(Path(v) for name in XDG_FOLDERS if (v := environ.get(name, "")) and os.path.isabs(v))
    return list(_homes(home_dir(environ), os.geteuid(), xdg))


@functools.lru_cache(maxsize=16)
def _homes(home: Path, euid: int, xdg: tuple[Path, ...] = ()) -> tuple[Path, ...]:
    candidates = [home]
    try:
        candidates.append(Path(pwd.getpwuid(euid).pw_dir))
    except (KeyError, OSError):
        pass
    if euid == 0:
        candidates.append(Path("/root"))
    out: list[Path] = []
    for candidate in candidates:
        real = _resolved(candidate)
        if real.is_absolute() and real != Path("/") and real.is_dir() and real not in out:
            out.append(real)
    for folder in xdg:
        real = _resolved(folder)
        if real.is_dir() and len(real.parts) > 2 and not any(real.is_relative_to(h) or h.is_relative_to(real) for h in out):
            out.append(real)
    return tuple(out)


_VARIABLE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}")
# The variables HOME_TOOLCHAINS reads (`${VAR:-...}`).
_TOOLCHAIN_NAMES = frozenset(m.group(1) for e in (*HOME_TOOLCHAINS, *TOOLCHAIN_LOGINS) if (m := _VARIABLE.match(e)))


def _toolchain_entry(entry: str, home: Path, environ: Mapping[str, str]) -> list[Path]:
    """One HOME_TOOLCHAINS entry as the paths it names (its `*` expanded)."""
    match = _VARIABLE.match(entry)
    if match:
        value = environ.get(match.group(1), "")
        base = value if value and os.path.isabs(value) else match.group(2)
        entry = base + entry[match.end():]
    path = expand(entry, home)
    if "*" not in str(path):
        return [path]
    text, base = str(path), str(home)
    pattern = glob.escape(base) + text[len(base):] if text.startswith(base + "/") else text  # the home's own name literal
    return sorted(Path(p) for p in glob.glob(pattern))[:MAX_TOOLCHAIN_GLOB]


MAX_TOOLCHAIN_GLOB = 32
TOOLCHAINS_FRESH_S = 10


def home_toolchains(settings: SandboxSettings, environ: Mapping[str, str]) -> list[tuple[Path, Path]]:
    """What a command sees of the hidden homes, as (path as named, path resolved): HOME_TOOLCHAINS, the
    toolchain variables' folders (PATH entries too) and the user's `expose`, where they exist and lie
    inside a hidden home (never a home itself, nor a folder holding one). It runs before every command:
    remembered, and worked out again when a variable or the settings change, or TOOLCHAINS_FRESH_S
    passed (a toolchain installed meanwhile shows from then on)."""
    homes = hidden_homes(environ)
    names = sorted({*_TOOLCHAIN_NAMES, *TOOLCHAIN_VARIABLES, *XDG_FOLDERS, "HOME"})
    key = (
        tuple(settings.expose), tuple((n, environ.get(n)) for n in names), int(time.monotonic() // TOOLCHAINS_FRESH_S),
    )
    return list(_toolchains(key, tuple(homes)))


@functools.lru_cache(maxsize=8)
def _toolchains(key: tuple, homes: tuple[Path, ...]) -> tuple[tuple[Path, Path], ...]:  # type: ignore[type-arg]
    expose, variables, _ = key
    environ = {name: value for name, value in variables if value is not None}
    home = home_dir(environ)
    named: list[Path] = []
    for base in dict.fromkeys([home, *homes]):
        for entry in HOME_TOOLCHAINS:
            named += _toolchain_entry(entry, base, environ)
    for variable in TOOLCHAIN_VARIABLES:
        named += [Path(p) for p in environ.get(variable, "").split(os.pathsep) if p and os.path.isabs(p)]
    chosen = [expand(p, home) for p in expose]
    # A toolchain folder never shows a credential folder (PATH=~/.ssh:..., a link ~/.pyenv -> ~/.aws): only
    # the user's own `expose` can.
    logins = tuple(f"{base / rel}/" for base in dict.fromkeys([home, *homes]) for rel in DEFAULT_HIDDEN_IN_HOME)
    out: dict[Path, Path] = {}
    for path in [*named, *chosen]:
        path = Path(os.path.normpath(path))
        if not os.path.lexists(path):
            continue
        real = _resolved(path)
        inside = [h for h in homes if path.is_relative_to(h) or real.is_relative_to(h)]
        if not inside or any(real == h or h.is_relative_to(real) for h in homes) or not real.exists():
            continue
        if path not in chosen and any(f"{p}/".startswith(logins) or any(
                login.startswith(f"{p}/") for login in logins) for p in (path, real)):
            continue
        out.setdefault(path, real)
    return tuple(sorted(out.items(), key=lambda pair: (len(pair[0].parts), str(pair[0]))))


def toolchain_logins(settings: SandboxSettings, environ: Mapping[str, str]) -> list[Path]:
    """TOOLCHAIN_LOGINS that exist inside a shown toolchain folder (remembered like home_toolchains)."""
    homes = hidden_homes(environ)
    if not homes:
        return []
    names = sorted({*_TOOLCHAIN_NAMES, *TOOLCHAIN_VARIABLES, *XDG_FOLDERS, "HOME"})
    key = (
        tuple(settings.expose), tuple((n, environ.get(n)) for n in names), int(time.monotonic() // TOOLCHAINS_FRESH_S),
    )
    shown = tuple(named for named, _ in home_toolchains(settings, environ))
    return list(_logins(key, shown))


@functools.lru_cache(maxsize=8)
def _logins(key: tuple, shown: tuple[Path, ...]) -> tuple[Path, ...]:  # type: ignore[type-arg]
    _, variables, _ = key
    environ = {name: value for name, value in variables if value is not None}
    home = home_dir(environ)
    out: list[Path] = []
    for entry in TOOLCHAIN_LOGINS:
        for path in _toolchain_entry(entry, home, environ):
            path = Path(os.path.normpath(path))
            if os.path.lexists(path) and any(path.is_relative_to(s) for s in shown):
                out.append(path)
    return tuple(out)


def hidden_paths(
    settings: SandboxSettings, environ: Mapping[str, str], extra: Iterable[Path] = (), bound: Iterable[Path] = (),
) -> list[Path]:
    """Existing paths to hide, resolved (a hidden symlink hides its target), outermost first, no duplicates.

    The home folders are among them unless the user exposed one whole (`expose = ["~"]`). A path given in
    `expose` is dropped from the list; one inside a hidden folder is bound back later.
    """
    home = home_dir(environ)
    exposed = {_resolved(expand(p, home)) for p in settings.expose}
    runtime = environ.get("XDG_RUNTIME_DIR")
    homes = [h for h in hidden_homes(environ) if h not in exposed]
    # Inside a hidden home the named credential paths matter only where a shown folder would show them.
    # (`bound`: folders the runner binds over them, the repository among them: the home itself may be one.)
    shown = tuple(f"{named}/" for named in [*(n for n, _ in home_toolchains(settings, environ)), *bound]) if homes else ()
    in_home = [home / rel for rel in DEFAULT_HIDDEN_IN_HOME]
    if homes and home in homes:
        in_home = [p for p in in_home if f"{p}/".startswith(shown)]
    candidates = [
        *homes,
        *in_home,
        *(Path(p) for p in SOCKET_FOLDERS),
        *([Path(runtime)] if runtime and Path(runtime).is_absolute() else []),
        *(toolchain_logins(settings, environ) if homes else ()),
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
    """Paths shown again inside a hidden folder, resolved: the home's toolchains and what the user exposed;
    they are bound back read-only."""
    home = home_dir(environ)
    wanted = [real for _, real in home_toolchains(settings, environ)]
    wanted += [_resolved(expand(entry, home)) for entry in settings.expose]
    return list(_inside_hidden(tuple(wanted), tuple(hidden)))


@functools.lru_cache(maxsize=32)
def _inside_hidden(wanted: tuple[Path, ...], hidden: tuple[Path, ...]) -> tuple[Path, ...]:
    out = sorted({real for real in wanted if real.exists() and any(real != h and real.is_relative_to(h) for h in hidden)},
                 key=lambda p: (len(p.parts), str(p)))
    # One inside another shown folder needs no mount of its own, unless something hidden lies between.
    return tuple(p for p in out if not any(
        p != q and p.is_relative_to(q) and not any(h.is_relative_to(q) and p.is_relative_to(h) for h in hidden)
        for q in out))


def exposed_aliases(settings: SandboxSettings, environ: Mapping[str, str], exposed: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(path as named, what it resolves to) for shown home paths reached through a link (`~/.pyenv` -> a
    folder elsewhere): bound at the named path too, so the link's users find it in the empty home."""
    exposed = list(exposed)
    homes = hidden_homes(environ)
    out = []
    for named, real in home_toolchains(settings, environ):
        if named == real or not any(named.is_relative_to(h) for h in homes):
            continue
        if any(named.is_relative_to(e) for e in exposed):
            continue  # inside a folder shown whole: the link itself is there
        out.append((named, real))
    return out


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
