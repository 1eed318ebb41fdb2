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
# Every other kind, as data: (pattern, why), the first that matches wins.
#   "NAME"  (no slash): a file of that name (fnmatch) in any folder;
#   "DIR/"  (a trailing slash): any file under that folder, found at any depth (".github/workflows/");
#   "A/B"   (a slash inside): a path ending so, at any depth ("gradle/wrapper/gradle-wrapper.properties").
# Then the rule for kinds nobody listed (UNLISTED_DOTFILE), with its exceptions in INERT.
RUNS_LATER: tuple[tuple[str, str], ...] = (
    # Build files and task runners: programs, or they run the commands they list.
    ("Makefile", "a build file (make)"), ("makefile", "a build file (make)"), ("GNUmakefile", "a build file (make)"),
    ("*.mk", "a build file (make)"), ("CMakeLists.txt", "a build file (cmake)"), ("*.cmake", "a build file (cmake)"),
    ("CMakePresets.json", "cmake presets (the commands they name)"), ("meson.build", "a build file (meson)"),
    ("justfile", "a build file (just)"), ("Justfile", "a build file (just)"), ("Taskfile.yml", "a build file (task)"),
    ("Taskfile.yaml", "a build file (task)"), ("taskfile.yml", "a build file (task)"), ("tasks.py", "a task file (invoke)"),
    ("fabfile.py", "a task file (fabric)"), ("dodo.py", "a task file (doit)"), ("SConstruct", "a build file (scons)"),
    ("SConscript", "a build file (scons)"), ("configure", "a build script (./configure)"),
    ("configure.ac", "a build file (autoconf)"), ("Makefile.am", "a build file (automake)"),
    ("Makefile.in", "a build file (configure)"), ("autogen.sh", "a build script"), ("Rakefile", "a build file (rake)"),
    ("Gruntfile.js", "a build file (grunt)"), ("gulpfile.js", "a build file (gulp)"), ("build.sbt", "a build file (sbt)"),
    ("mix.exs", "a build file (mix)"), ("Setup.hs", "a Haskell build script (cabal)"), ("build.rs", "a Rust build script"),
    ("Dockerfile", "a container build file"), ("BUILD", "a build file (bazel)"), ("BUILD.bazel", "a build file (bazel)"),
    ("WORKSPACE", "a build file (bazel)"), ("MODULE.bazel", "a build file (bazel)"), ("*.bzl", "a build file (bazel)"),
    (".bazelrc", "bazel settings (the commands it runs)"),
    ("taskfile.yaml", "a build file (task)"), ("BUCK", "a build file (buck)"), ("WORKSPACE.bazel", "a build file (bazel)"),
    ("Directory.Build.props", "MSBuild settings (imported by every project below)"),
    ("Directory.Build.targets", "MSBuild targets (imported by every project below)"),
    ("*.csproj", "an MSBuild project (its tasks run on build)"), ("*.fsproj", "an MSBuild project (its tasks run on build)"),
    ("*.vbproj", "an MSBuild project (its tasks run on build)"), ("*.vcxproj", "an MSBuild project (its tasks run on build)"),
    ("*.props", "MSBuild settings (imported by projects)"), ("*.targets", "MSBuild targets (imported by projects)"),
    ("Package.swift", "a Swift package (a program swift build runs)"), ("project.clj", "a build file (leiningen: a program)"),
    ("build.zig", "a build file (zig: a program)"), ("build.sc", "a build file (mill: a program)"),
    ("build.mill", "a build file (mill: a program)"), ("*.sbt", "a build file (sbt)"),
    ("project/*.scala", "an sbt build definition (a program)"), ("conanfile.py", "a conan recipe (a program)"),
    ("dune", "a build file (dune: rules run commands)"), ("build.xml", "a build file (ant: tasks run commands)"),
    ("premake*.lua", "a build file (premake: a program)"), ("xmake.lua", "a build file (xmake: a program)"),
    ("*.cabal", "a Haskell package (custom setup, build tools)"), ("cabal.project", "cabal settings (what it builds and runs)"),
    ("CMakeUserPresets.json", "cmake presets (the commands they name)"),
    ("doc*/conf.py", "Sphinx settings (a program sphinx-build and Read the Docs run)"),
    ("source/conf.py", "Sphinx settings (a program sphinx-build and Read the Docs run)"),
    ("mkdocs.yml", "MkDocs settings (hooks and plugins it runs)"), ("mkdocs.yaml", "MkDocs settings (hooks and plugins it runs)"),
    ("hatch.toml", "hatch settings (build hooks, scripts)"), ("pixi.toml", "pixi tasks"), ("devbox.json", "devbox (init hooks, scripts)"),
    ("nx.json", "Nx settings (commands it runs)"), ("project.json", "an Nx project (commands it runs)"),
    ("dvc.yaml", "DVC pipeline (commands it runs)"), ("skaffold.yaml", "skaffold (builds and hooks it runs)"),
    ("environment.yml", "a conda environment (pip installs from it)"), ("environment.yaml", "a conda environment (pip installs from it)"),
    ("requirements*.txt", "Python requirements (pip install runs what they name: index URLs, local and VCS packages)"),
    ("requirements/*.txt", "Python requirements (pip install runs what they name: index URLs, local and VCS packages)"),
    ("action.yml", "a GitHub action (a workflow's `uses: ./` runs it)"), ("action.yaml", "a GitHub action (a workflow's `uses: ./` runs it)"),
    # Package managers: install scripts, plugins, and the package manager itself committed to the repository.
    ("setup.py", "a Python build script (pip install runs it)"), ("setup.cfg", "Python build and test settings (plugins)"),
    ("pyproject.toml", "Python build settings (build hooks, entry points)"),
    ("hatch_build.py", "a Python build hook (hatch)"), ("Pipfile", "pipenv scripts"),
    ("package.json", "npm scripts (npm install / test run them)"),
    ("binding.gyp", "a native build file (node-gyp, run on npm install)"),
    (".npmrc", "npm settings (scripts, node options, registries)"), (".yarnrc", "yarn settings (yarn-path runs a program)"),
    (".yarnrc.yml", "yarn settings (plugins, yarnPath)"), (".yarn/plugins/", "yarn plugins (run by every yarn command)"),
    (".yarn/releases/", "a yarn release committed to the repository (yarnPath runs it)"),
    (".yarn/sdks/", "yarn's editor SDKs (the editor runs them)"), (".pnp.cjs", "Yarn Plug'n'Play (loaded by every node run)"),
    (".pnp.loader.mjs", "Yarn Plug'n'Play (loaded by every node run)"), (".pnpmfile.cjs", "pnpm hooks (run on install)"),
    ("pnpm-workspace.yaml", "pnpm settings (hooks, patched packages)"),
    ("bunfig.toml", "bun settings (preload scripts)"), (".bunfig.toml", "bun settings (preload scripts)"),
    ("deno.json", "deno tasks"), ("deno.jsonc", "deno tasks"), ("composer.json", "composer scripts (run on install)"),
    ("Gemfile", "a Ruby bundle file"), ("*.gemspec", "a Ruby gem spec (a program bundler runs)"),
    ("Brewfile", "a Homebrew bundle (a Ruby program)"), ("Podfile", "a CocoaPods file (a Ruby program)"),
    ("Cargo.toml", "Rust build settings (build scripts)"), (".cargo/", "cargo settings (build scripts, runners, aliases)"),
    ("rust-toolchain", "a Rust toolchain (rustup runs what it names)"),
    ("rust-toolchain.toml", "a Rust toolchain (rustup runs what it names)"),
    ("go.work", "a Go workspace (which code go builds and runs)"),
    # Build wrappers: they download and run what their properties name.
    ("gradlew", "the Gradle wrapper (runs and downloads)"), ("mvnw", "the Maven wrapper (runs and downloads)"),
    ("gradle/wrapper/gradle-wrapper.properties", "the Gradle wrapper's distribution (downloaded and run)"),
    ("gradle/wrapper/gradle-wrapper.jar", "the Gradle wrapper (runs)"), (".mvn/", "Maven's wrapper, extensions and JVM options"),
    ("build.gradle", "a build file (gradle)"), ("build.gradle.kts", "a build file (gradle)"),
    ("settings.gradle", "a build file (gradle)"), ("settings.gradle.kts", "a build file (gradle)"),
    ("gradle.properties", "Gradle settings (JVM arguments, init scripts)"), ("pom.xml", "a build file (maven)"),
    # Python start-up: run at every interpreter start, by the REPL, or by a test run.
    ("sitecustomize.py", "runs at every Python start"), ("usercustomize.py", "runs at every Python start"),
    ("*.pth", "runs at every Python start, from site-packages"),
    ("*.pyc", "compiled Python (imported instead of its source)"), ("*.pyo", "compiled Python (imported instead of its source)"),
    (".pythonrc", "a Python REPL start-up file (PYTHONSTARTUP)"), (".pythonrc.py", "a Python REPL start-up file (PYTHONSTARTUP)"),
    (".pdbrc", "pdb commands (run when pdb starts here)"), (".pdbrc.py", "pdb commands (run when pdb starts here)"),
    ("ipython_config.py", "IPython settings (a program)"), ("profile_*/startup/*.py", "an IPython start-up script"),
    ("profile_*/startup/*.ipy", "an IPython start-up script"), (".ipython/", "IPython profiles and start-up scripts"),
    (".jupyter/", "Jupyter settings (programs Jupyter runs)"), ("jupyter_*_config.py", "Jupyter settings (a program)"),
    # Test runners, type checkers and coverage: their settings load plugins (code) by name or path.
    ("conftest.py", "a pytest bootstrap (runs with every pytest)"), ("pytest.ini", "pytest's settings (plugins it loads)"),
    ("tox.ini", "a test runner's settings (tox)"), ("noxfile.py", "a test runner's script (nox)"),
    ("mypy.ini", "mypy settings (plugins it loads)"), (".mypy.ini", "mypy settings (plugins it loads)"),
    (".coveragerc", "coverage settings (plugins it loads)"),
    ("pyrightconfig.json", "pyright settings (which environment it runs)"),
    (".pylintrc", "pylint settings (init-hook runs Python)"), ("pylintrc", "pylint settings (init-hook runs Python)"),
    (".flake8", "flake8 settings (local plugins)"),
    ("jest.config.*", "jest settings (a program, or the modules it loads)"),
    ("vitest.config.*", "vitest settings (a program)"), ("vitest.workspace.*", "vitest settings (a program)"),
    ("karma.conf.*", "karma settings (a program)"), ("playwright.config.*", "playwright settings (a program)"),
    ("cypress.config.*", "cypress settings (a program)"), ("cypress.json", "cypress settings (plugins)"),
    (".mocharc*", "mocha settings (modules it requires)"), ("protractor.conf.js", "protractor settings (a program)"),
    ("wdio.conf.*", "WebdriverIO settings (a program)"), ("ava.config.*", "ava settings (a program)"),
    (".babelrc*", "Babel settings (plugins it loads)"), ("babel.config.*", "Babel settings (plugins it loads)"),
    (".swcrc", "swc settings (plugins it loads)"),
    # JavaScript config files are programs their tools run (on test, build, or when the editor opens the project).
    ("*.config.js", "a JavaScript config file (a program its tool runs)"),
    ("*.config.cjs", "a JavaScript config file (a program its tool runs)"),
    ("*.config.mjs", "a JavaScript config file (a program its tool runs)"),
    ("*.config.ts", "a TypeScript config file (a program its tool runs)"),
    ("*.config.mts", "a TypeScript config file (a program its tool runs)"),
    ("*.config.cts", "a TypeScript config file (a program its tool runs)"),
    (".eslintrc*", "ESLint settings (plugins; a program the editor runs)"), (".prettierrc.js", "Prettier settings (a program)"),
    (".prettierrc.cjs", "Prettier settings (a program)"), (".prettierrc.mjs", "Prettier settings (a program)"),
    (".stylelintrc*", "stylelint settings (plugins)"), (".storybook/", "Storybook settings (programs)"),
    # Language and environment start-up: version files pick what runs, env hooks run on cd.
    (".envrc", "an environment hook (direnv runs it on cd)"), (".env", "environment variables tools load (NODE_OPTIONS, ...)"),
    (".tool-versions", "tool versions (asdf and mise run what it names)"), (".nvmrc", "a Node version (nvm runs what it names)"),
    (".node-version", "a Node version (fnm, nodenv run what it names)"), (".python-version", "a Python version (pyenv)"),
    (".ruby-version", "a Ruby version (rbenv, rvm)"), (".java-version", "a Java version (jenv)"),
    (".sdkmanrc", "SDK versions (sdkman)"),
    ("mise.toml", "mise settings (hooks and env run on cd)"), (".mise.toml", "mise settings (hooks and env run on cd)"),
    (".mise/", "mise settings and tasks"), (".rtx.toml", "rtx settings (hooks run on cd)"),
    ("flake.nix", "a Nix flake (nix develop / direnv run its shell hook)"), ("shell.nix", "a Nix shell (its shell hook runs)"),
    ("default.nix", "a Nix expression (nix-shell runs its shell hook)"), ("devenv.nix", "a devenv shell (its hooks run)"),
    (".bashrc", "a shell start-up file"), (".profile", "a shell start-up file"), (".zshrc", "a shell start-up file"),
    (".bash_profile", "a shell start-up file"), (".bash_login", "a shell start-up file"), (".bash_logout", "a shell exit file"),
    (".zprofile", "a shell start-up file"), (".zshenv", "a shell start-up file"), (".zlogin", "a shell start-up file"),
    # git: filters, submodules, hook managers (what the repository's own config makes git run is read from it too).
    (".gitattributes", "git filters (run on checkout and add)"), (".gitmodules", "git submodules (fetched and checked out)"),
    (".gitconfig", "git settings (run if a config includes them)"),
    (".pre-commit-config.yaml", "git hooks (pre-commit runs them)"),
    (".pre-commit-hooks.yaml", "git hooks (pre-commit runs them)"), ("lefthook.yml", "git hooks (lefthook)"),
    ("lefthook.yaml", "git hooks (lefthook)"), (".lefthook.yml", "git hooks (lefthook)"),
    ("lefthook-local.yml", "git hooks (lefthook)"),
    (".overcommit.yml", "git hooks (overcommit)"), (".husky/", "git hooks (husky)"), (".githooks/", "git hooks"),
    (".lintstagedrc*", "lint-staged commands (run on commit)"), ("lint-staged.config.*", "lint-staged commands (run on commit)"),
    # CI: runs on push.
    (".github/workflows/", "CI (runs on push)"), (".github/actions/", "CI actions (run on push)"),
    (".circleci/", "CI (runs on push)"),
    (".buildkite/", "CI (runs on push)"), (".gitea/workflows/", "CI (runs on push)"),
    (".forgejo/workflows/", "CI (runs on push)"),
    (".woodpecker/", "CI (runs on push)"), (".gitlab-ci.yml", "CI (runs on push)"), (".travis.yml", "CI (runs on push)"),
    ("Jenkinsfile", "CI (runs on push)"), ("azure-pipelines.yml", "CI (runs on push)"),
    ("bitbucket-pipelines.yml", "CI (runs on push)"),
    (".drone.yml", "CI (runs on push)"), (".woodpecker.yml", "CI (runs on push)"), ("appveyor.yml", "CI (runs on push)"),
    (".appveyor.yml", "CI (runs on push)"), (".cirrus.yml", "CI (runs on push)"), (".readthedocs.yaml", "CI (runs on push)"),
    # Editors, IDEs and dev containers: tasks, launch configurations, settings naming programs, containers.
    (".vscode/", "editor settings, tasks and launch configurations (VS Code runs them)"),
    (".idea/", "IDE project settings (run configurations, tools it runs)"), (".fleet/", "IDE run configurations"),
    (".zed/", "editor settings and tasks (Zed runs them)"), (".devcontainer/", "a dev container definition"),
    (".devcontainer.json", "a dev container definition"), ("*.code-workspace", "a VS Code workspace (settings and tasks)"),
    (".ycm_extra_conf.py", "editor settings (YouCompleteMe runs it)"), (".exrc", "vim settings (run with 'exrc')"),
    (".nvimrc", "neovim settings (run with 'exrc')"), (".nvim.lua", "neovim settings (run with 'exrc')"),
    (".dir-locals.el", "Emacs settings (eval forms)"), ("Vagrantfile", "a Vagrant file (a Ruby program)"),
    ("docker-compose.yml", "containers and what they mount (compose)"),
    ("docker-compose.yaml", "containers and what they mount (compose)"),
    ("compose.yml", "containers and what they mount (compose)"), ("compose.yaml", "containers and what they mount (compose)"),
)
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
    """A pattern table (RUNS_LATER's syntax) compiled once: exact names by dict, the rest by regex or
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


_LISTED = _Kinds(RUNS_LATER)
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
