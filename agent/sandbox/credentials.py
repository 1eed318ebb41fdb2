"""Git's credentials kept out of what a sandboxed command can read.

git keeps credentials in plain text where any command can read them: a token in a remote URL
(`https://x-access-token:ghp_...@github.com/...`) or in a `url.<base>.insteadOf` section name, an
`http.extraheader` with an Authorization header, a password or token key, a credential helper that
echoes a password, a `store --file` the helper writes to. They sit in the repository's config (and
config.worktree, each linked worktree's and each submodule's config, the legacy remotes/ and
branches/ files), in the user's global and system config, and in any file those include. The
commands a user lets run unasked (`cat .git/config`) and the model both see what a command prints.

What is a credential is decided by what git means, not by how a value looks: every value is searched
for URL userinfo with or without a scheme (`http.proxy = alice:PASS@proxy:3128` is a URL to git), a
proxy's user name is masked too, every `extraheader` and credential helper, and the files git reads
credentials from (`credential.helper store --file`, `http.cookieFile`, `http.sslKey`,
~/.git-credentials, $XDG_CONFIG_HOME/git/credentials) are shown empty. Which files hold config is
asked of git itself too (`git config --list --show-origin`, includes followed, conditional ones
as git evaluates them), beside the known places and the includes ribbit follows itself.

So while a command runs, bubblewrap binds over each such file that holds something to hide a copy
with it masked (`***`), read-only: `git remote -v`, `git config -l` and `cat` still work and show
where things point, not the secrets. The copy is rebuilt from git's own parse of the file (`git config
--list`, which runs nothing), so what git would read is exactly what is masked, and comments (which
git drops) are gone; a file git cannot parse is shown empty. Credential stores named by a helper are
shown empty. git already leaves URL credentials out of FETCH_HEAD and reflog messages.

Copies live in a private folder of ribbit's (in the system temp folder, which every command sees as
an empty private /tmp), made when first needed and rebuilt when a file's stat data changes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.git import GitError, run_git, session_repo

MASK = "***"
MAX_FILES = 200  # config files followed through includes and submodules, per command
MAX_INCLUDE_DEPTH = 10  # as git's own limit
MAX_MODULE_DEPTH = 8
READ_LIMIT = 1 << 20  # a legacy remotes/branches file larger than this is hidden whole
HEADER = "# ribbit: this is a copy with credentials masked ({}); the file itself is unchanged\n"

# userinfo in any URL (`scheme://user:secret@host`): masked, except a bare user name for ssh.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#\s\"']*)@")
# userinfo before a host where there is no scheme (`alice:PASS@proxy:3128`, `user:pw@host:path`): git
# takes such a value as a URL (a proxy) or an scp-like address; a colon in it is a password.
_BARE_USERINFO = re.compile(r"(?i)(^|[\s\"'=(<,])(?![a-z][a-z0-9+.-]*://)([^\s\"'@/:=]+:[^\s\"'@/]*)@(?=[\w\[])")
# Any userinfo at the start of a proxy's value, scheme or not (`TOKEN@proxy:3128`), up to the last `@`
# before the host (`alice:p@ss@proxy`: curl takes the last one).
_PROXY_USERINFO = re.compile(r"(?i)^\s*((?:[a-z][a-z0-9+.-]*://)?)([^\s/]+)@")
# A value (or section name) that is a URL: its authority is everything up to the first `/`, `?` or `#`,
# and its userinfo everything before the last `@` there, whatever it holds (`'`, a space, an `@`).
_LEADING_URL = re.compile(r"(?i)^(\s*[a-z][a-z0-9+.-]*://)([^/?#]*)@")
# Keys whose value is a file git reads credentials or a private key from: shown empty.
_CREDENTIAL_FILE_KEYS = frozenset({"cookiefile", "sslkey", "sslcert"})
# A secret-looking query parameter (`?private_token=...`).
_SECRET_QUERY = re.compile(r"(?i)([?&;][^=&#\s]*(?:token|key|secret|passw|sig|auth)[^=&#\s]*=)[^&#\s\"']+")
# Token formats of the common forges, wherever they appear.
_KNOWN_TOKEN = re.compile(r"\b(?:gh[oprsu]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,}|xox[abprs]-[\w-]{10,})")
# Keys whose whole value is a secret (the last part of the name, lower-cased as git lists it).
_SECRET_KEY = re.compile(r"(pass|password|passwd|token|secret|extraheader|authorization|cookie|apikey|api-key)$")
_PLAIN_HELPER = re.compile(r"[A-Za-z0-9_.-]*")  # `store`, `cache`, `manager-core`: a name, nothing to hide
_HEADER_NAME = re.compile(r"([A-Za-z0-9-]+:)\s*\S")
_SSH_SCHEMES = ("ssh://", "git+ssh://", "ssh+git://")
_NEEDS_QUOTES = re.compile(r'[#;"\\\n\t\b]|^\s|\s$')


def mask_text(text: str) -> str:
    """URL credentials, secret query parameters and known token formats in free text, masked."""

    def userinfo(match: re.Match[str]) -> str:
        scheme, info = match.group(1), match.group(2)
        if not info or (scheme.lower() in _SSH_SCHEMES and ":" not in info):
            return match.group()
        return f"{scheme}{MASK}@"

    text = _URL_USERINFO.sub(userinfo, text)
    text = _BARE_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    text = _SECRET_QUERY.sub(lambda m: m.group(1) + MASK, text)
    return _KNOWN_TOKEN.sub(MASK, text)


def _mask_url(text: str) -> str:
    """`text` with the userinfo of a URL it starts with masked as git parses one, then mask_text."""

    def userinfo(match: re.Match[str]) -> str:
        scheme, info = match.group(1), match.group(2)
        if scheme.strip().lower() in _SSH_SCHEMES and ":" not in info:
            return match.group()  # `ssh://git@host`: a user name, no secret
        return f"{scheme}{MASK}@"

    return mask_text(_LEADING_URL.sub(userinfo, text, count=1))


def mask_value(key: str, value: str) -> str:
    """One config value as the sandbox shows it (`key` as `git config --list` prints it)."""
    name = key.rpartition(".")[2].lower()
    section = key.partition(".")[0].lower()
    if name == "extraheader":
        header = _HEADER_NAME.match(value)
        return f"{header.group(1)} {MASK}" if header else MASK
    if _SECRET_KEY.search(name) and value:
        return MASK
    if section == "credential" and name == "helper" and not _PLAIN_HELPER.fullmatch(value):
        return MASK  # `!f() { echo password=...; }; f`, `store --file=...`
    if name.endswith("proxy") and name != "gitproxy":  # http.proxy, remote.<name>.proxy, http.<url>.proxy
        value = _PROXY_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", value)
    return _mask_url(value)


@dataclass(frozen=True)
class ConfigFile:
    """One config file as git parses it: its entries, the files it includes, the stores its helpers name."""

    entries: list[tuple[str, str | None]] | None  # None: git cannot parse it
    includes: list[Path] = field(default_factory=list)
    stores: list[Path] = field(default_factory=list)


def parse_config(path: Path, home: Path) -> ConfigFile:
    """Read `path` with `git config --file --list` (no includes followed; reading runs nothing)."""
    try:
        proc = run_git(["config", "--file", str(path), "--no-includes", "--list", "--null"], check=False, timeout=30)
    except GitError:
        return ConfigFile(entries=None)
    if proc.returncode != 0:
        return ConfigFile(entries=None)
    entries: list[tuple[str, str | None]] = []
    includes: list[Path] = []
    stores: list[Path] = []
    for record in os.fsdecode(proc.stdout).split("\0")[:-1]:
        key, newline, value = record.partition("\n")
        entries.append((key, value if newline else None))
        lowered = key.lower()
        if not newline:
            continue
        if lowered.endswith(".path") and (lowered == "include.path" or lowered.startswith("includeif.")):
            target = _include_target(value, path, home)
            if target is not None:
                includes.append(target)
        elif lowered.startswith("credential.") and lowered.endswith(".helper"):
            stores += _store_files(value, home)
        elif lowered.rpartition(".")[2] in _CREDENTIAL_FILE_KEYS and lowered.startswith("http.") and value:
            stores.append(home / value[2:] if value.startswith("~/") else Path(value))
    return ConfigFile(entries=entries, includes=includes, stores=stores)


def _include_target(value: str, including: Path, home: Path) -> Path | None:
    if value.startswith("~/"):
        return home / value[2:]
    if not value or value.startswith("%("):
        return None
    target = Path(value)
    return target if target.is_absolute() else including.parent / target


def _store_files(helper: str, home: Path) -> list[Path]:
    """The file any helper is told to keep passwords in (`--file=PATH` / `--file PATH`): `store`, but also
    the store by its full path or run from a shell snippet (`!git credential-store --file=PATH $@`)."""
    try:
        words = shlex.split(helper)
    except ValueError:
        words = helper.split()
    out = []
    for i, word in enumerate(words):
        given = word[len("--file="):] if word.startswith("--file=") else words[i + 1] if word == "--file" and i + 1 < len(words) else None
        if given:
            out.append(home / given[2:] if given.startswith("~/") else Path(given))
    return out


def _masked_key(key: str) -> str:
    """A key with its subsection masked as render_config writes it (`url.alice:pw@host:.insteadof`)."""
    section, _, rest = key.partition(".")
    subsection, dot, name = rest.rpartition(".")
    return f"{section}.{_mask_url(subsection)}.{name}" if dot else key


def render_config(entries: list[tuple[str, str | None]] | None, what: str) -> str:
    """A config file holding `entries` masked, in git's syntax (`what` names the file in the header)."""
    if entries is None:
        return HEADER.format(f"{what}: git cannot parse it, so it is shown empty")
    out = [HEADER.format(what)]
    current = None
    for key, value in entries:
        section, _, rest = key.partition(".")
        subsection, _, name = rest.rpartition(".")
        header = f'[{section} "{_quote(_mask_url(subsection))}"]' if subsection else f"[{section}]"
        if header != current:
            out.append(header + "\n")
            current = header
        out.append(f"\t{name}\n" if value is None else f"\t{name} = {_value(mask_value(key, value))}\n")
    return "".join(out)


def _value(text: str) -> str:
    """A value as git reads it back: bare where that is unambiguous, else quoted with git's escapes."""
    if not _NEEDS_QUOTES.search(text):
        return text
    return '"' + _quote(text).replace("\n", "\\n").replace("\t", "\\t").replace("\b", "\\b") + '"'


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


@dataclass(frozen=True)
class Masked:
    """A file to cover while a command runs: `path` (resolved) shows `source`, a masked (or empty) copy."""

    path: Path
    source: Path


class CredentialMasks:
    """The masked copies for one repository's commands (one per runner)."""

    def __init__(self, root: Path, environ: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.environ = os.environ if environ is None else environ
        self._folder: Path | None = None
        # resolved path -> (stat key, parse result or None for a legacy file, the copy or None if nothing to hide)
        self._seen: dict[Path, tuple[tuple[int, ...], ConfigFile | None, Path | None]] = {}
        # (stat keys of the files it depends on, the files git named) from the last `--show-origin`
        self._effective: tuple[tuple[tuple[int, ...] | None, ...], list[Path]] | None = None
        self._dirs: list[Path] | None = None

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def mounts(self) -> list[Masked]:
        """What to bind over for the next command: masked copies, and credential stores shown empty."""
        home = Path(self.environ.get("HOME") or Path.home())
        self._dirs = None
        out: dict[Path, Path] = {}
        stores: list[Path] = []
        configs = [(p, 0) for p in self._config_candidates(home)]
        done: set[Path] = set()
        while configs and len(done) < MAX_FILES:
            path, depth = configs.pop(0)
            real = _resolved(path)
            if real is None or real in done:
                continue
            done.add(real)
            found = self._masked(real, home, legacy=False)
            if found is None:
                continue
            parsed, copy = found
            if copy is not None:
                out[real] = copy
            if parsed is not None and depth < MAX_INCLUDE_DEPTH:
                configs += [(p, depth + 1) for p in parsed.includes]
                # A relative cookie file is opened from where git runs: the work tree, for this repository's commands.
                stores += [p if p.is_absolute() else self.root / p for p in parsed.stores]
        for path in self._legacy_candidates():
            real = _resolved(path)
            if real is not None and real not in out:
                found = self._masked(real, home, legacy=True)
                if found is not None and found[1] is not None:
                    out[real] = found[1]
        for path in [*stores, *self._default_stores(home)]:
            real = _resolved(path)
            if real is not None and real not in out and real.is_file():
                out[real] = self._copy(b"")  # empty, readable: the helper finds no password either
        return [Masked(path, source) for path, source in out.items()]

    # -- where git keeps config --------------------------------------------------------------------

    def _git_dirs(self) -> list[Path]:
        """The repository's git dir(s) and common dir, wherever they are (a worktree's lie outside);
        looked up once per `mounts()`."""
        if self._dirs is None:
            self._dirs = self._find_git_dirs()
        return self._dirs

    def _find_git_dirs(self) -> list[Path]:
        found: list[Path] = []
        repo = session_repo(self.root)
        if repo is not None:
            found.append(repo.git_dir)
        dot_git = self.root / ".git"
        if dot_git.is_dir():
            found.append(dot_git.resolve())  # a `.git` that is a link: where it leads
        elif dot_git.exists():
            target = _gitfile(dot_git)
            if target is not None:
                found.append(target)
        out: list[Path] = []
        for git_dir in found:
            common = _gitfile(git_dir / "commondir", prefix="")
            for folder in (git_dir, common):
                if folder is not None and folder.is_dir() and folder not in out:
                    out.append(folder)
        return out

    def _effective_files(self, home: Path, known: list[Path]) -> list[Path]:
        """Every file git reads config from for this repository, as git itself says (includes followed,
        conditional ones as they apply now): `git config --list --show-origin`, which runs nothing.
        Asked again only when one of the files it depends on (or HEAD, for `onbranch:`) changed."""
        watched = [*known, *(self._effective[1] if self._effective else []), *(d / "HEAD" for d in self._git_dirs())]
        key = tuple(_stat_key(p) for p in watched)
        if self._effective is not None and self._effective[0] == key:
            return self._effective[1]
        found = self._ask_git(home)
        self._effective = (tuple(_stat_key(p) for p in [*known, *found, *(d / "HEAD" for d in self._git_dirs())]), found)
        return found

    def _ask_git(self, home: Path) -> list[Path]:
        repo = session_repo(self.root)
        env = {"HOME": str(home)}
        if self.environ.get("XDG_CONFIG_HOME"):
            env["XDG_CONFIG_HOME"] = self.environ["XDG_CONFIG_HOME"]
        if repo is not None:
            env |= {"GIT_DIR": str(repo.git_dir), "GIT_WORK_TREE": str(repo.work_tree)}
        else:
            env["GIT_DIR"] = str(self.root / ".git")  # never a `.git` found further up
        try:
            proc = run_git(["config", "--list", "--show-origin", "--includes", "-z"], cwd=self.root, env=env,
                           work_tree=self.root, check=False, timeout=30, read_user_config=True)
        except GitError:
            return []
        if proc.returncode != 0:
            return []
        out: list[Path] = []
        records = os.fsdecode(proc.stdout).split("\0")
        for origin in records[0::2]:
            if origin.startswith("file:"):
                path = Path(origin[len("file:"):])
                path = path if path.is_absolute() else self.root / path
                if path not in out:
                    out.append(path)
        return out[:MAX_FILES]

    def _config_candidates(self, home: Path) -> list[Path]:
        env = self.environ
        xdg = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
        out = [
            Path(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"),
            home / ".gitconfig", xdg / "git" / "config", *([Path(env["GIT_CONFIG_GLOBAL"])] if env.get("GIT_CONFIG_GLOBAL") else []),
        ]
        for git_dir in self._git_dirs():
            out += [git_dir / "config", git_dir / "config.worktree"]
            out += [w / "config.worktree" for w in _children(git_dir / "worktrees")]
            out += list(_module_configs(git_dir / "modules", 0))
        return out + [p for p in self._effective_files(home, out) if p not in out]

    def _legacy_candidates(self) -> list[Path]:
        return [f for d in self._git_dirs() for sub in ("remotes", "branches") for f in _children(d / sub)]

    def _default_stores(self, home: Path) -> list[Path]:
        xdg = Path(self.environ["XDG_CONFIG_HOME"]) if self.environ.get("XDG_CONFIG_HOME") else home / ".config"
        return [home / ".git-credentials", xdg / "git" / "credentials"]

    # -- the copies --------------------------------------------------------------------------------

    def _masked(self, real: Path, home: Path, *, legacy: bool) -> tuple[ConfigFile | None, Path | None] | None:
        """(the parse, the masked copy or None when nothing needs hiding); None if it is not a readable file."""
        try:
            info = os.stat(real)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        cached = self._seen.get(real)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        raw = _read(real)
        parsed: ConfigFile | None = None
        if legacy:
            text = raw.decode("utf-8", "surrogateescape") if raw is not None and len(raw) <= READ_LIMIT else None
            masked = mask_text(text) if text is not None else None
            copy = None if text is not None and masked == text else self._copy(
                masked.encode("utf-8", "surrogateescape") if masked is not None else HEADER.format("unreadable").encode())
        else:
            parsed = parse_config(real, home)
            entries = parsed.entries
            changed = entries is None or any(
                value is not None and mask_value(k, value) != value or _masked_key(k) != k for k, value in entries)
            commented = raw is None or b"#" in raw or b";" in raw  # comments git drops may hold anything
            copy = self._copy(render_config(entries, real.name).encode("utf-8", "surrogateescape")) if changed or commented else None
        self._seen[real] = (key, parsed, copy)
        return parsed, copy

    def _copy(self, data: bytes) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="ribbit-git-masked-"))
        path = self._folder / hashlib.sha256(data).hexdigest()[:24]
        if not path.exists():
            temp = path.with_suffix(".tmp")
            temp.write_bytes(data)
            temp.chmod(0o444)
            temp.replace(path)
        return path


def _stat_key(path: Path) -> tuple[int, ...] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _resolved(path: Path) -> Path | None:
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    return real


def _children(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as entries:
            return sorted(Path(e.path) for e in entries)[:MAX_FILES]
    except OSError:
        return []


def _module_configs(modules: Path, depth: int) -> Iterator[Path]:
    """Each submodule's config (nested submodules' too: modules/a/modules/b)."""
    if depth >= MAX_MODULE_DEPTH:
        return
    stack = [modules]
    seen = 0
    while stack and seen < MAX_FILES:
        folder = stack.pop()
        for child in _children(folder):
            if not child.is_dir() or child.is_symlink():
                continue
            seen += 1
            if (child / "HEAD").exists():  # a submodule's git dir (its name may hold slashes)
                yield child / "config"
                yield child / "config.worktree"
                yield from (w / "config.worktree" for w in _children(child / "worktrees"))
                yield from _module_configs(child / "modules", depth + 1)
            else:
                stack.append(child)


def _gitfile(path: Path, prefix: str = "gitdir:") -> Path | None:
    """Where a `.git` file (or a git dir's `commondir`) points, resolved; None if it is not one."""
    data = _read(path, 4096)
    if data is None:
        return None
    text = data.decode("utf-8", "replace").strip()
    if not text.startswith(prefix):
        return None
    target = Path(text[len(prefix):].strip())
    return (target if target.is_absolute() else path.parent / target).resolve()


def _read(path: Path, limit: int = READ_LIMIT) -> bytes | None:
    """A regular file's first `limit` bytes (never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)
