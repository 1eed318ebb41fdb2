"""Files whose content runs as code on the user's machine later, outside any sandbox.

An agent that writes `.venv/lib/python3.11/site-packages/x.pth`, a Makefile target, `.envrc` or a CI
workflow has not run anything yet: the user's next `python`, `make`, `cd` or push does. ribbit cannot
stop that, but it can ask before such a write in auto-edit and name every such file the agent changed at
the end of a task. The kinds are data, here (RUNS_LATER, ENVIRONMENT_FOLDERS); extend them here. A kind
nobody listed is caught by a rule, not a name: a dotfile at the repository's root or anything in a
dot-folder is some tool's settings, and counts unless INERT lists it as holding no code. What the
repository's own git config makes git run or read as config is read from that config
(agent.undo.git_runs_later).

`runs_later(path)` answers for a path relative to the repository root (posix separators).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import marshal
import os
import re
import stat
import sys
from pathlib import Path, PurePosixPath

from agent.fs import read_regular
from agent.undo.git_runs_later import git_runs_later

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
# Every other kind, as data: why -> the patterns of the files it names; where two patterns of different
# kinds match one path, the earlier entry wins (`jest.config.*` before `*.config.js`).
#   "NAME"  (no slash): a file of that name (fnmatch) in any folder;
#   "DIR/"  (a trailing slash): any file under that folder, found at any depth (".github/workflows/");
#   "A/B"   (a slash inside): a path ending so, at any depth ("gradle/wrapper/gradle-wrapper.properties").
# Then the rule for kinds nobody listed (UNLISTED_DOTFILE), with its exceptions in INERT.
RUNS_LATER: dict[str, tuple[str, ...]] = {
    # Build files and task runners: programs, or they run the commands they list.
    "a build file (make)": ("Makefile", "makefile", "GNUmakefile", "*.mk"),
    "a build file (cmake)": ("CMakeLists.txt", "*.cmake"),
    "cmake presets (the commands they name)": ("CMakePresets.json", "CMakeUserPresets.json"),
    "a build file (meson)": ("meson.build",), "a build file (just)": ("justfile", "Justfile"),
    "a build file (task)": ("Taskfile.yml", "Taskfile.yaml", "taskfile.yml", "taskfile.yaml"),
    "a task file (invoke)": ("tasks.py",), "a task file (fabric)": ("fabfile.py",), "a task file (doit)": ("dodo.py",),
    "a build file (scons)": ("SConstruct", "SConscript"), "a build script (./configure)": ("configure",),
    "a build file (autoconf)": ("configure.ac",), "a build file (automake)": ("Makefile.am",),
    "a build file (configure)": ("Makefile.in",), "a build script": ("autogen.sh",),
    "a build file (rake)": ("Rakefile",), "a build file (grunt)": ("Gruntfile.js",),
    "a build file (gulp)": ("gulpfile.js",), "a build file (sbt)": ("build.sbt", "*.sbt"),
    "a build file (mix)": ("mix.exs",), "a Haskell build script (cabal)": ("Setup.hs",),
    "a Rust build script": ("build.rs",), "a container build file": ("Dockerfile",),
    "a build file (bazel)": ("BUILD", "BUILD.bazel", "WORKSPACE", "MODULE.bazel", "*.bzl", "WORKSPACE.bazel"),
    "bazel settings (the commands it runs)": (".bazelrc",), "a build file (buck)": ("BUCK",),
    "MSBuild settings (imported by every project below)": ("Directory.Build.props",),
    "MSBuild targets (imported by every project below)": ("Directory.Build.targets",),
    "an MSBuild project (its tasks run on build)": ("*.csproj", "*.fsproj", "*.vbproj", "*.vcxproj"),
    "MSBuild settings (imported by projects)": ("*.props",), "MSBuild targets (imported by projects)": ("*.targets",),
    "a Swift package (a program swift build runs)": ("Package.swift",),
    "a build file (leiningen: a program)": ("project.clj",), "a build file (zig: a program)": ("build.zig",),
    "a build file (mill: a program)": ("build.sc", "build.mill"),
    "an sbt build definition (a program)": ("project/*.scala",), "a conan recipe (a program)": ("conanfile.py",),
    "a build file (dune: rules run commands)": ("dune",), "a build file (ant: tasks run commands)": ("build.xml",),
    "a build file (premake: a program)": ("premake*.lua",), "a build file (xmake: a program)": ("xmake.lua",),
    "a Haskell package (custom setup, build tools)": ("*.cabal",),
    "cabal settings (what it builds and runs)": ("cabal.project",),
    "Sphinx settings (a program sphinx-build and Read the Docs run)": ("doc*/conf.py", "source/conf.py"),
    "MkDocs settings (hooks and plugins it runs)": ("mkdocs.yml", "mkdocs.yaml"),
    "hatch settings (build hooks, scripts)": ("hatch.toml",), "pixi tasks": ("pixi.toml",),
    "devbox (init hooks, scripts)": ("devbox.json",), "Nx settings (commands it runs)": ("nx.json",),
    "an Nx project (commands it runs)": ("project.json",), "DVC pipeline (commands it runs)": ("dvc.yaml",),
    "skaffold (builds and hooks it runs)": ("skaffold.yaml",),
    "a conda environment (pip installs from it)": ("environment.yml", "environment.yaml"),
    "Python requirements (pip install runs what they name: index URLs, local and VCS packages)": (
        "requirements*.txt", "requirements/*.txt",
    ),
    "a GitHub action (a workflow's `uses: ./` runs it)": ("action.yml", "action.yaml"),
    # Package managers: install scripts, plugins, and the package manager itself committed to the repository.
    "a Python build script (pip install runs it)": ("setup.py",),
    "Python build and test settings (plugins)": ("setup.cfg",),
    "Python build settings (build hooks, entry points)": ("pyproject.toml",),
    "a Python build hook (hatch)": ("hatch_build.py",), "pipenv scripts": ("Pipfile",),
    "npm scripts (npm install / test run them)": ("package.json",),
    "a native build file (node-gyp, run on npm install)": ("binding.gyp",),
    "npm settings (scripts, node options, registries)": (".npmrc",),
    "yarn settings (yarn-path runs a program)": (".yarnrc",), "yarn settings (plugins, yarnPath)": (".yarnrc.yml",),
    "yarn plugins (run by every yarn command)": (".yarn/plugins/",),
    "a yarn release committed to the repository (yarnPath runs it)": (".yarn/releases/",),
    "yarn's editor SDKs (the editor runs them)": (".yarn/sdks/",),
    "Yarn Plug'n'Play (loaded by every node run)": (".pnp.cjs", ".pnp.loader.mjs"),
    "pnpm hooks (run on install)": (".pnpmfile.cjs",),
    "pnpm settings (hooks, patched packages)": ("pnpm-workspace.yaml",),
    "bun settings (preload scripts)": ("bunfig.toml", ".bunfig.toml"), "deno tasks": ("deno.json", "deno.jsonc"),
    "composer scripts (run on install)": ("composer.json",), "a Ruby bundle file": ("Gemfile",),
    "a Ruby gem spec (a program bundler runs)": ("*.gemspec",), "a Homebrew bundle (a Ruby program)": ("Brewfile",),
    "a CocoaPods file (a Ruby program)": ("Podfile",), "Rust build settings (build scripts)": ("Cargo.toml",),
    "cargo settings (build scripts, runners, aliases)": (".cargo/",),
    "a Rust toolchain (rustup runs what it names)": ("rust-toolchain", "rust-toolchain.toml"),
    "a Go workspace (which code go builds and runs)": ("go.work",),
    # Build wrappers: they download and run what their properties name.
    "the Gradle wrapper (runs and downloads)": ("gradlew",), "the Maven wrapper (runs and downloads)": ("mvnw",),
    "the Gradle wrapper's distribution (downloaded and run)": ("gradle/wrapper/gradle-wrapper.properties",),
    "the Gradle wrapper (runs)": ("gradle/wrapper/gradle-wrapper.jar",),
    "Maven's wrapper, extensions and JVM options": (".mvn/",),
    "a build file (gradle)": ("build.gradle", "build.gradle.kts", "settings.gradle", "settings.gradle.kts"),
    "Gradle settings (JVM arguments, init scripts)": ("gradle.properties",), "a build file (maven)": ("pom.xml",),
    # Python start-up: run at every interpreter start, by the REPL, or by a test run.
    "runs at every Python start": ("sitecustomize.py", "usercustomize.py"),
    "runs at every Python start, from site-packages": ("*.pth",),
    "compiled Python (imported instead of its source)": ("*.pyc", "*.pyo"),
    "a Python REPL start-up file (PYTHONSTARTUP)": (".pythonrc", ".pythonrc.py"),
    "pdb commands (run when pdb starts here)": (".pdbrc", ".pdbrc.py"),
    "IPython settings (a program)": ("ipython_config.py",),
    "an IPython start-up script": ("profile_*/startup/*.py", "profile_*/startup/*.ipy"),
    "IPython profiles and start-up scripts": (".ipython/",), "Jupyter settings (programs Jupyter runs)": (".jupyter/",),
    "Jupyter settings (a program)": ("jupyter_*_config.py",),
    # Test runners, type checkers and coverage: their settings load plugins (code) by name or path.
    "a pytest bootstrap (runs with every pytest)": ("conftest.py",),
    "pytest's settings (plugins it loads)": ("pytest.ini",), "a test runner's settings (tox)": ("tox.ini",),
    "a test runner's script (nox)": ("noxfile.py",), "mypy settings (plugins it loads)": ("mypy.ini", ".mypy.ini"),
    "coverage settings (plugins it loads)": (".coveragerc",),
    "pyright settings (which environment it runs)": ("pyrightconfig.json",),
    "pylint settings (init-hook runs Python)": (".pylintrc", "pylintrc"),
    "flake8 settings (local plugins)": (".flake8",),
    "jest settings (a program, or the modules it loads)": ("jest.config.*",),
    "vitest settings (a program)": ("vitest.config.*", "vitest.workspace.*"),
    "karma settings (a program)": ("karma.conf.*",), "playwright settings (a program)": ("playwright.config.*",),
    "cypress settings (a program)": ("cypress.config.*",), "cypress settings (plugins)": ("cypress.json",),
    "mocha settings (modules it requires)": (".mocharc*",), "protractor settings (a program)": ("protractor.conf.js",),
    "WebdriverIO settings (a program)": ("wdio.conf.*",), "ava settings (a program)": ("ava.config.*",),
    "Babel settings (plugins it loads)": (".babelrc*", "babel.config.*"),
    "swc settings (plugins it loads)": (".swcrc",),
    # JavaScript config files are programs their tools run (on test, build, or when the editor opens the project).
    "a JavaScript config file (a program its tool runs)": ("*.config.js", "*.config.cjs", "*.config.mjs"),
    "a TypeScript config file (a program its tool runs)": ("*.config.ts", "*.config.mts", "*.config.cts"),
    "ESLint settings (plugins; a program the editor runs)": (".eslintrc*",),
    "Prettier settings (a program)": (".prettierrc.js", ".prettierrc.cjs", ".prettierrc.mjs"),
    "stylelint settings (plugins)": (".stylelintrc*",), "Storybook settings (programs)": (".storybook/",),
    # Language and environment start-up: version files pick what runs, env hooks run on cd.
    "an environment hook (direnv runs it on cd)": (".envrc",),
    "environment variables tools load (NODE_OPTIONS, ...)": (".env",),
    "tool versions (asdf and mise run what it names)": (".tool-versions",),
    "a Node version (nvm runs what it names)": (".nvmrc",),
    "a Node version (fnm, nodenv run what it names)": (".node-version",),
    "a Python version (pyenv)": (".python-version",), "a Ruby version (rbenv, rvm)": (".ruby-version",),
    "a Java version (jenv)": (".java-version",), "SDK versions (sdkman)": (".sdkmanrc",),
    "mise settings (hooks and env run on cd)": ("mise.toml", ".mise.toml"), "mise settings and tasks": (".mise/",),
    "rtx settings (hooks run on cd)": (".rtx.toml",),
    "a Nix flake (nix develop / direnv run its shell hook)": ("flake.nix",),
    "a Nix shell (its shell hook runs)": ("shell.nix",),
    "a Nix expression (nix-shell runs its shell hook)": ("default.nix",),
    "a devenv shell (its hooks run)": ("devenv.nix",),
    "a shell start-up file": (
        ".bashrc", ".profile", ".zshrc", ".bash_profile", ".bash_login", ".zprofile", ".zshenv", ".zlogin",
    ),
    "a shell exit file": (".bash_logout",),
    # git: filters, submodules, hook managers (what the repository's own config makes git run is read from it too).
    "git filters (run on checkout and add)": (".gitattributes",),
    "git submodules (fetched and checked out)": (".gitmodules",),
    "git settings (run if a config includes them)": (".gitconfig",),
    "git hooks (pre-commit runs them)": (".pre-commit-config.yaml", ".pre-commit-hooks.yaml"),
    "git hooks (lefthook)": ("lefthook.yml", "lefthook.yaml", ".lefthook.yml", "lefthook-local.yml"),
    "git hooks (overcommit)": (".overcommit.yml",), "git hooks (husky)": (".husky/",), "git hooks": (".githooks/",),
    "lint-staged commands (run on commit)": (".lintstagedrc*", "lint-staged.config.*"),
    # CI: runs on push.
    "CI actions (run on push)": (".github/actions/",),
    "CI (runs on push)": (
        ".github/workflows/", ".circleci/", ".buildkite/", ".gitea/workflows/", ".forgejo/workflows/", ".woodpecker/",
        ".gitlab-ci.yml", ".travis.yml", "Jenkinsfile", "azure-pipelines.yml", "bitbucket-pipelines.yml", ".drone.yml",
        ".woodpecker.yml", "appveyor.yml", ".appveyor.yml", ".cirrus.yml", ".readthedocs.yaml",
    ),
    # Editors, IDEs and dev containers: tasks, launch configurations, settings naming programs, containers.
    "editor settings, tasks and launch configurations (VS Code runs them)": (".vscode/",),
    "IDE project settings (run configurations, tools it runs)": (".idea/",), "IDE run configurations": (".fleet/",),
    "editor settings and tasks (Zed runs them)": (".zed/",),
    "a dev container definition": (".devcontainer/", ".devcontainer.json"),
    "a VS Code workspace (settings and tasks)": ("*.code-workspace",),
    "editor settings (YouCompleteMe runs it)": (".ycm_extra_conf.py",), "vim settings (run with 'exrc')": (".exrc",),
    "neovim settings (run with 'exrc')": (".nvimrc", ".nvim.lua"), "Emacs settings (eval forms)": (".dir-locals.el",),
    "a Vagrant file (a Ruby program)": ("Vagrantfile",),
    "containers and what they mount (compose)": (
        "docker-compose.yml", "docker-compose.yaml", "compose.yml", "compose.yaml",
    ),
}
# A dotfile at the root, or anything in a dot-folder (`.config/`, `.tool/...`), is some tool's settings:
# runs-later unless it is one of these (files of a name, or `DIR/`: anything under the folder).
UNLISTED_DOTFILE = "a tool's settings (a dotfile ribbit does not know: tools read these on their own)"
INERT: tuple[str, ...] = (
    ".gitignore", ".gitkeep", ".keep", ".git-blame-ignore-revs", ".mailmap", ".editorconfig", ".DS_Store",
    ".dockerignore", ".npmignore", ".eslintignore", ".prettierignore", ".stylelintignore", ".hgignore", ".ignore",
    ".rgignore", ".fdignore", ".gcloudignore", ".vercelignore", ".slugignore", ".markdownlintignore",
    ".prettierrc", ".prettierrc.json", ".prettierrc.yaml", ".prettierrc.yml", ".prettierrc.toml", ".markdownlint.json",
    ".markdownlint.yaml", ".markdownlint.yml", ".markdownlint.jsonc", ".clang-format", ".rustfmt.toml", ".ruff.toml",
    ".codespellrc", ".cspell.json", ".yamllint", ".yamllint.yml", ".yamllint.yaml", ".env.example", ".env.sample",
    ".env.template", ".nojekyll", ".coverage", ".all-contributorsrc", ".zenodo.json", ".lycheeignore", ".typos.toml",
    ".github/", ".gitlab/", ".changeset/", ".ipynb_checkpoints/", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
    ".hypothesis/", ".cache/", ".coverage_cache/", ".pyre/", ".pytype/", ".parcel-cache/", ".eslintcache", ".turbo/",
    ".nyc_output/", ".benchmarks/", ".reuse/", ".well-known/",
)
VIRTUALENV = "a Python virtual environment (its python and activate scripts run it)"


def runs_later(path: str, root: Path | None = None) -> str | None:
    """Why this repository-relative path holds code that runs later on the user's machine, or None.

    With `root`: a folder above the path that holds `pyvenv.cfg` (a virtualenv, whatever its name) counts
    too, and so does what the repository's git config makes git run or read (agent.undo.git_runs_later)."""
    parts = PurePosixPath(path).parts
    if not parts:
        return None
    for part in parts[:-1]:
        if part.lower() in ENVIRONMENT_FOLDERS:  # any case: a case-insensitive disk (macOS) reads Site-Packages too
            return ENVIRONMENT_FOLDERS[part.lower()]
    if root is not None:
        if _in_virtualenv(root, parts[:-1]):
            return VIRTUALENV
        why = git_runs_later(root, "/".join(parts))
        if why is not None:
            return why
    return listed_kind(parts) or _unlisted(parts)


class _Kinds:
    """A table of (pattern, why) in RUNS_LATER's syntax, compiled once: exact names by dict, the rest by regex or
    folder tuples; `first` gives the reason of the earliest entry that matches, as a scan in order would.
    Case is ignored: on a case-insensitive disk (macOS's default) pytest finds `Conftest.py` as
    `conftest.py`, npm `PACKAGE.JSON`, direnv `sub/.Envrc`."""

    def __init__(self, table: tuple[tuple[str, str], ...]) -> None:
        self.names: dict[str, tuple[int, str]] = {}
        self.wild: list[tuple[int, re.Pattern[str], str]] = []
        self.folders: list[tuple[int, tuple[str, ...], str]] = []
        self.tails: list[tuple[int, tuple[re.Pattern[str], ...], str]] = []
        for index, (pattern, why) in enumerate(table):
            if pattern.endswith("/"):
                self.folders.append((index, tuple(pattern.lower().rstrip("/").split("/")), why))
            elif "/" in pattern:
                parts = tuple(re.compile(fnmatch.translate(p), re.IGNORECASE) for p in pattern.split("/"))
                self.tails.append((index, parts, why))
            elif any(c in pattern for c in "*?["):
                self.wild.append((index, re.compile(fnmatch.translate(pattern), re.IGNORECASE), why))
            else:
                self.names.setdefault(pattern.lower(), (index, why))

    def first(self, parts: tuple[str, ...]) -> str | None:
        name = parts[-1].lower()
        found = [self.names[name]] if name in self.names else []
        found += [(i, why) for i, regex, why in self.wild if regex.match(parts[-1])]
        folders = tuple(p.lower() for p in parts[:-1])
        for i, wanted, why in self.folders:
            if wanted[0] in folders and any(folders[k:k + len(wanted)] == wanted for k in range(len(folders) - len(wanted) + 1)):
                found.append((i, why))
        for i, regexes, why in self.tails:
            if len(parts) >= len(regexes) and all(r.match(p) for r, p in zip(regexes, parts[-len(regexes):])):
                found.append((i, why))
        return min(found)[1] if found else None


_LISTED = _Kinds(tuple((pattern, why) for why, patterns in RUNS_LATER.items() for pattern in patterns))
_INERT = _Kinds(tuple((pattern, "inert") for pattern in INERT))


def listed_kind(parts: tuple[str, ...]) -> str | None:
    """The first RUNS_LATER kind the path is, or None."""
    return _LISTED.first(parts)


# Task and build files by the `*file` convention (Makefile, Justfile, Earthfile, Tiltfile, Procfile, Snakefile,
# Containerfile...): a capitalised or all-capitals name ending in "file", whatever its suffix or prefix
# (`Makefile.local`, `Taskfile.dist.yml`, `dev.Dockerfile`), at any depth; not a document, data or a backup
# (`Makefile.txt`, `Profile.json`, `Makefile.orig`).
TASK_FILE = "a build or task file (a `*file` name: the tool of that name runs what it lists)"
_TASK_FILE = re.compile(r"(?:.*\.)?(?:[A-Z][A-Za-z]*file|[A-Z]+FILE)"
                        r"(?:\.(?!(?:txt|md|rst|adoc|html|pdf|json|csv|png|svg|orig|bak|rej|swp)$)[^/]*)?")


def _unlisted(parts: tuple[str, ...]) -> str | None:
    """A dotfile at the root or a file in a dot-folder that INERT does not list: some tool's settings."""
    if _TASK_FILE.fullmatch(parts[-1]):
        return TASK_FILE
    dotted = (len(parts) == 1 and parts[0].startswith(".")) or any(p.startswith(".") for p in parts[:-1])
    if not dotted or _INERT.first(parts) is not None:
        return None
    return UNLISTED_DOTFILE


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
