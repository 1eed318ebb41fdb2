"""Files whose content runs as code on the user's machine later, outside any sandbox.

An agent that writes `.venv/lib/python3.11/site-packages/x.pth`, a Makefile target, `.envrc` or a CI
workflow has not run anything yet: the user's next `python`, `make`, `cd` or push does. ribbit cannot
stop that, but it can ask before such a write in auto-edit and name every such file the agent changed at
the end of a task. The whole list lives here; extend it here.

`runs_later(path)` answers for a path relative to the repository root (posix separators).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import marshal
import os
import stat
import sys
from pathlib import Path, PurePosixPath

from agent.fs import read_regular

# Folders that hold installed packages or an environment: anything written inside runs on import,
# on activation or on the next install (`*.pth` files run at every Python start).
ENVIRONMENT_FOLDERS: dict[str, str] = {
    "site-packages": "installed Python packages (run on import; .pth files at every Python start)",
    "dist-packages": "installed Python packages (run on import; .pth files at every Python start)",
    "node_modules": "installed npm packages (run on require, and their install scripts)",
    "__pypackages__": "installed Python packages (PEP 582)",
    ".tox": "tox's virtual environments",
    ".nox": "nox's virtual environments",
    ".direnv": "direnv's environment",
}
# Names (fnmatch, matched against the file name) of files a tool runs by itself.
FILE_NAMES: dict[str, str] = {
    "Makefile": "a build file (make)", "makefile": "a build file (make)", "GNUmakefile": "a build file (make)",
    "*.mk": "a build file (make)", "CMakeLists.txt": "a build file (cmake)", "*.cmake": "a build file (cmake)",
    "setup.py": "a Python build script (pip install runs it)", "setup.cfg": "Python build settings",
    "pyproject.toml": "Python build settings (build hooks, entry points)", "build.rs": "a Rust build script",
    "package.json": "npm scripts (npm install / test run them)", "Rakefile": "a build file (rake)",
    "Gemfile": "a Ruby bundle file", "build.gradle": "a build file (gradle)", "build.gradle.kts": "a build file (gradle)",
    "pom.xml": "a build file (maven)", "meson.build": "a build file (meson)", "justfile": "a build file (just)",
    "Justfile": "a build file (just)", "Taskfile.yml": "a build file (task)", "Dockerfile": "a container build file",
    "conftest.py": "a pytest bootstrap (runs with every pytest)", "tox.ini": "a test runner's settings (tox)",
    "noxfile.py": "a test runner's script (nox)", "pytest.ini": "pytest's settings (plugins it loads)",
    "sitecustomize.py": "runs at every Python start", "usercustomize.py": "runs at every Python start",
    "*.pth": "runs at every Python start, from site-packages",
    "*.pyc": "compiled Python (imported instead of its source)", "*.pyo": "compiled Python (imported instead of its source)",
    ".envrc": "an environment hook (direnv runs it on cd)",
    ".gitattributes": "git filters (run on checkout and add)", ".gitmodules": "git submodules (fetched and checked out)",
    ".pre-commit-config.yaml": "git hooks (pre-commit runs them)", ".gitlab-ci.yml": "CI (runs on push)",
    ".travis.yml": "CI (runs on push)", "Jenkinsfile": "CI (runs on push)", "azure-pipelines.yml": "CI (runs on push)",
    "bitbucket-pipelines.yml": "CI (runs on push)", ".npmrc": "npm settings (scripts, registries)",
    ".yarnrc.yml": "yarn settings (plugins)", ".bashrc": "a shell start-up file", ".profile": "a shell start-up file",
    ".zshrc": "a shell start-up file",
    # Config files that are programs: the JS tools load them on test, build or when the editor opens the
    # project (ESLint's extension), package managers on install, mise on cd, build wrappers when run.
    "*.config.js": "a JavaScript config file (a program its tool runs)",
    "*.config.cjs": "a JavaScript config file (a program its tool runs)",
    "*.config.mjs": "a JavaScript config file (a program its tool runs)",
    "*.config.ts": "a TypeScript config file (a program its tool runs)",
    "*.config.mts": "a TypeScript config file (a program its tool runs)",
    ".eslintrc.js": "ESLint settings (a program the editor runs)", ".eslintrc.cjs": "ESLint settings (a program the editor runs)",
    ".pnpmfile.cjs": "pnpm hooks (run on install)", ".yarnrc": "yarn settings (yarn-path runs a program)",
    "mise.toml": "mise settings (hooks and env run on cd)", ".mise.toml": "mise settings (hooks and env run on cd)",
    "gradlew": "the Gradle wrapper (runs and downloads)", "mvnw": "the Maven wrapper (runs and downloads)",
    "settings.gradle": "a build file (gradle)", "settings.gradle.kts": "a build file (gradle)",
    "Cargo.toml": "Rust build settings (build scripts)", "composer.json": "composer scripts (run on install)",
    # More build files and task runners that are programs, or run the commands they list.
    "Taskfile.yaml": "a build file (task)", "taskfile.yml": "a build file (task)", "tasks.py": "a task file (invoke)",
    "fabfile.py": "a task file (fabric)", "dodo.py": "a task file (doit)", "SConstruct": "a build file (scons)",
    "SConscript": "a build file (scons)", "configure": "a build script (./configure)", "configure.ac": "a build file (autoconf)",
    "Makefile.am": "a build file (automake)", "Makefile.in": "a build file (configure)", "autogen.sh": "a build script",
    "hatch_build.py": "a Python build hook (hatch)", "binding.gyp": "a native build file (node-gyp, run on npm install)",
    "Gruntfile.js": "a build file (grunt)", "gulpfile.js": "a build file (gulp)", "deno.json": "deno tasks",
    "bunfig.toml": "bun settings (preload scripts)", "build.sbt": "a build file (sbt)", "mix.exs": "a build file (mix)",
    "Setup.hs": "a Haskell build script (cabal)", "*.gemspec": "a Ruby gem spec (a program bundler runs)",
    "Brewfile": "a Homebrew bundle (a Ruby program)", "Podfile": "a CocoaPods file (a Ruby program)",
    "Pipfile": "pipenv scripts", "rust-toolchain": "a Rust toolchain (rustup runs what it names)",
    "rust-toolchain.toml": "a Rust toolchain (rustup runs what it names)",
    "flake.nix": "a Nix flake (nix develop / direnv run its shell hook)", "shell.nix": "a Nix shell (its shell hook runs)",
    "default.nix": "a Nix expression (nix-shell runs its shell hook)", "devenv.nix": "a devenv shell (its hooks run)",
    "Vagrantfile": "a Vagrant file (a Ruby program)", "docker-compose.yml": "containers and what they mount (compose)",
    "docker-compose.yaml": "containers and what they mount (compose)", "compose.yml": "containers and what they mount (compose)",
    "compose.yaml": "containers and what they mount (compose)",
    # Git hook managers, more CI, editors' and tools' files that are programs.
    "lefthook.yml": "git hooks (lefthook)", ".lefthook.yml": "git hooks (lefthook)", ".overcommit.yml": "git hooks (overcommit)",
    ".drone.yml": "CI (runs on push)", ".woodpecker.yml": "CI (runs on push)", "appveyor.yml": "CI (runs on push)",
    ".appveyor.yml": "CI (runs on push)", ".cirrus.yml": "CI (runs on push)", ".readthedocs.yaml": "CI (runs on push)",
    ".pylintrc": "pylint settings (init-hook runs Python)", "pylintrc": "pylint settings (init-hook runs Python)",
    ".pdbrc": "pdb commands (run when pdb starts here)", ".ycm_extra_conf.py": "editor settings (YouCompleteMe runs it)",
    ".exrc": "vim settings (run with 'exrc')", ".nvimrc": "neovim settings (run with 'exrc')", ".nvim.lua": "neovim settings (run with 'exrc')",
    ".babelrc.js": "Babel settings (a program)", ".mocharc.js": "mocha settings (a program)", ".prettierrc.js": "Prettier settings (a program)",
    ".prettierrc.cjs": "Prettier settings (a program)", ".stylelintrc.js": "stylelint settings (a program)",
    ".bash_profile": "a shell start-up file", ".bash_login": "a shell start-up file", ".bash_logout": "a shell exit file",
    ".zprofile": "a shell start-up file", ".zshenv": "a shell start-up file", ".zlogin": "a shell start-up file",
}
# Folders (a path component, or a prefix of the path) whose files a tool runs.
FOLDERS: dict[str, str] = {
    ".github/workflows": "CI (runs on push)", ".circleci": "CI (runs on push)", ".buildkite": "CI (runs on push)",
    ".vscode": "editor settings and tasks (VS Code runs them)", ".idea/runConfigurations": "IDE run configurations",
    ".husky": "git hooks (husky)", ".githooks": "git hooks", ".devcontainer": "a dev container definition",
    ".cargo": "cargo settings (build scripts, runners)", ".github/actions": "CI actions (run on push)",
    ".gitea/workflows": "CI (runs on push)", ".forgejo/workflows": "CI (runs on push)", ".woodpecker": "CI (runs on push)",
    ".idea": "IDE project settings (run configurations, tools it runs)",
    ".fleet": "IDE run configurations", ".zed": "editor settings and tasks (Zed runs them)",
}


VIRTUALENV = "a Python virtual environment (its python and activate scripts run it)"


def runs_later(path: str, root: Path | None = None) -> str | None:
    """Why this repository-relative path holds code that runs later on the user's machine, or None.

    With `root`, a folder above the path that holds `pyvenv.cfg` (a virtualenv, whatever its name) counts too."""
    parts = PurePosixPath(path).parts
    if not parts:
        return None
    for part in parts[:-1]:
        if part in ENVIRONMENT_FOLDERS:
            return ENVIRONMENT_FOLDERS[part]
    if root is not None and _in_virtualenv(root, parts[:-1]):
        return VIRTUALENV
    joined = f"/{'/'.join(parts[:-1])}/"
    for folder, why in FOLDERS.items():
        if f"/{folder}/" in joined:
            return why
    name = parts[-1]
    for pattern, why in FILE_NAMES.items():
        if fnmatch.fnmatchcase(name, pattern):
            return why
    return None


def _in_virtualenv(root: Path, folders: tuple[str, ...]) -> bool:
    for depth in range(1, len(folders) + 1):
        try:
            if stat.S_ISREG(os.lstat(root.joinpath(*folders[:depth], "pyvenv.cfg")).st_mode):
                return True
        except OSError:
            continue
    return False


def is_environment_folder(name: str, entries: frozenset[str] | set[str] = frozenset()) -> bool:
    """A folder that is an installed environment: named like one, or a virtualenv (holds pyvenv.cfg)."""
    return name in ENVIRONMENT_FOLDERS or "pyvenv.cfg" in entries


COMPILED_READ_LIMIT = 8 << 20  # a compiled module past this is not compared (and so named)


def compiled_from_source(root: Path, rel: str) -> bool:
    """A `__pycache__/NAME.TAG[.opt-N].pyc` that is exactly what this Python compiles from NAME.py beside it.

    Caches are not named at the end of a task (every test run rewrites them), but a forged one runs
    instead of its unchanged source (issue 33): only a file proven to be the source's own compilation is
    left unnamed (pytest's rewritten test modules too, where the same pytest is importable here, so a
    test run is not named). Another interpreter's tag or a missing source: not proven."""
    path = PurePosixPath(rel)
    if path.parent.name != "__pycache__" or path.suffix != ".pyc":
        return False
    name, _, rest = path.stem.partition(".")
    tag, _, opt = rest.partition(".opt-")
    rewritten = tag == _pytest_tag()
    if not (rewritten or tag == sys.implementation.cache_tag) or opt not in ("", "1", "2"):
        return False
    data = read_regular(root / rel)
    source = read_regular(root / path.parent.parent / f"{name}.py")
    if data is None or source is None or len(data) > COMPILED_READ_LIMIT or data[:4] != importlib.util.MAGIC_NUMBER:
        return False
    filename = str(root / path.parent.parent / f"{name}.py")
    try:
        code = marshal.loads(data[16:])
        # dont_inherit: this module's own __future__ imports must not change the compilation compared.
        if rewritten:
            return bool(code == _pytest_compile(source, filename))
        return bool(code == compile(source, filename, "exec", dont_inherit=True, optimize=int(opt or 0)))
    except (ValueError, EOFError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _pytest_tag() -> str | None:
    """The cache tag of pytest's rewritten test modules, where pytest is installed beside ribbit."""
    try:
        from _pytest.assertion.rewrite import PYTEST_TAG
    except ImportError:
        return None
    return str(PYTEST_TAG)


def _pytest_compile(source: bytes, filename: str) -> object:
    """What pytest writes for a test module (its assertion rewriting, no plugin's hook: config None)."""
    import ast

    from _pytest.assertion.rewrite import rewrite_asserts

    tree = ast.parse(source, filename=filename)
    rewrite_asserts(tree, source, filename, None)
    return compile(tree, filename, "exec", dont_inherit=True)
