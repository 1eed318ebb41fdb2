"""agent.undo.runs_later: which changed files run code on the user's machine later (issue 28, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.undo.runs_later import RUNS_LATER, runs_later

RUN_LATER = [
    "Makefile", "sub/GNUmakefile", "rules.mk", "CMakeLists.txt", "setup.py", "setup.cfg", "pyproject.toml",
    "package.json", "web/package.json", "build.rs", "Cargo.toml", "justfile", "Taskfile.yml", "Taskfile.yaml",
    ".envrc", ".vscode/settings.json", ".vscode/tasks.json", ".idea/runConfigurations/Run.xml", ".idea/workspace.xml",
    ".github/workflows/ci.yml", ".github/actions/setup/action.yml", ".gitlab-ci.yml", ".gitattributes",
    ".gitmodules", ".pre-commit-config.yaml", "tests/conftest.py", "tox.ini", "noxfile.py", "sitecustomize.py",
    "usercustomize.py", "lib/evil.pth", ".bashrc", ".zshenv", "flake.nix", "shell.nix", ".pylintrc", ".pdbrc",
    "vite.config.ts", "lefthook.yml", "app.gemspec", "rust-toolchain.toml", "docker-compose.yml",
    ".venv/lib/python3.11/site-packages/pkg/__init__.py", "node_modules/left-pad/index.js", "src/__pycache__/m.cpython-311.pyc",
    # issue 41: the families that were missing, and the rule for unlisted dotfiles
    ".yarn/plugins/p.cjs", ".yarn/releases/yarn-4.cjs", ".pnpmfile.cjs", "gradle/wrapper/gradle-wrapper.properties",
    ".mvn/extensions.xml", ".vscode/launch.json", ".devcontainer/devcontainer.json", ".pythonrc",
    ".ipython/profile_default/startup/00.py", ".jupyter/jupyter_server_config.py", "mypy.ini", ".coveragerc",
    "pyrightconfig.json", "jest.config.json", "vitest.config.ts", "karma.conf.js", ".npmrc", ".yarnrc.yml",
    ".bunfig.toml", ".cargo/config.toml", "rust-toolchain", "go.work", ".tool-versions", ".nvmrc", ".gitconfig",
    ".newtoolrc", ".config/x/settings.toml", "docs/.vuepress/config.js",
]
DO_NOT = [
    "src/app.py", "README.md", "docs/index.md", ".github/ISSUE_TEMPLATE/bug.md", "go.mod", "main.go",  # go:generate runs only on `go generate`
    "tests/test_app.py", "data/config.json", ".gitignore", "Makefile.txt", "src/setup.py.orig", "notes/makefile.md",
    ".editorconfig", ".env.example", ".github/CODEOWNERS", ".prettierrc", "app/startup/init.py", "src/.gitkeep",
]


@pytest.mark.parametrize("path", RUN_LATER)
def test_named(path: str) -> None:
    assert runs_later(path)


@pytest.mark.parametrize("path", DO_NOT)
def test_not_named(path: str) -> None:
    assert runs_later(path) is None


def test_a_virtualenv_under_any_name_is_named(tmp_path: Path) -> None:
    (tmp_path / "env2" / "bin").mkdir(parents=True)
    (tmp_path / "env2" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert runs_later("env2/bin/activate", tmp_path)
    assert runs_later("env3/bin/activate", tmp_path) is None


def test_each_pattern_is_listed_under_one_kind() -> None:
    patterns = [pattern for kind in RUNS_LATER.values() for pattern in kind]
    assert len(patterns) == len(set(patterns))


@pytest.mark.parametrize(("path", "kind"), [
    ("jest.config.js", "jest settings"), ("babel.config.js", "Babel settings"), ("Directory.Build.props", "MSBuild settings"),
    (".github/actions/setup/.gitlab-ci.yml", "CI actions"),
])
def test_the_earlier_kind_wins_where_two_match(path: str, kind: str) -> None:
    """`jest.config.js` is also a `*.config.js`: the table's order decides, as a scan from the top would."""
    assert (runs_later(path) or "").startswith(kind)
