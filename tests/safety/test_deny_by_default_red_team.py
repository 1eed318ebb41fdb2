"""Issue 41's own red team: new variants against the new defaults (the home's allow list, git config read
as git parses it, the runs-later rule). Each is tried for real (real bubblewrap, real git) and its outcome
checked where it happens; docs/security.md lists them with their outcomes, the ones that are limits too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sandbox.config import load_settings
from agent.sandbox.runner import BwrapRunner
from agent.undo.runs_later import runs_later
from tests.conftest import git
from tests.safety.sandbox_helpers import host_folder

MARK = "RBT41RED"


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with host_folder("ribbit-red41-") as folder:
        (folder / "home").mkdir()
        monkeypatch.setenv("HOME", str(folder / "home"))
        for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        yield folder / "home"


def plant(path: Path, text: str = f"{MARK}\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def sandboxed(root: Path, command: str) -> str:
    runner = BwrapRunner(root, load_settings())
    try:
        return runner.run(command, root, 60, threading.Event(), access="read-only").output
    finally:
        runner.close()


def test_a_link_in_a_shown_toolchain_folder_to_a_login_leads_nowhere(repo: Path, home: Path) -> None:
    plant(home / ".aws" / "credentials")
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "creds").symlink_to(home / ".aws" / "credentials")
    out = sandboxed(repo, "ls ~/.local/bin; cat ~/.local/bin/creds")
    assert "creds" in out and MARK not in out and "No such file" in out


def test_path_entries_that_are_the_home_or_a_login_folder_show_nothing(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant(home / ".ssh" / "id_ed25519")
    plant(home / "secrets.txt")
    monkeypatch.setenv("PATH", f"{home}{os.pathsep}{home / '.ssh'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("VIRTUAL_ENV", str(home))
    out = sandboxed(repo, "cat ~/.ssh/id_ed25519 ~/secrets.txt")
    assert MARK not in out and out.count("No such file") == 2
    assert "secrets.txt" not in sandboxed(repo, "ls -a ~")


def test_a_toolchain_folder_that_is_a_link_to_a_login_folder_is_not_shown(repo: Path, home: Path) -> None:
    plant(home / ".aws" / "credentials")
    (home / ".pyenv").symlink_to(home / ".aws")
    out = sandboxed(repo, "cat ~/.pyenv/credentials; cat ~/.aws/credentials")
    assert MARK not in out


def test_xdg_folders_outside_the_home_are_hidden_too(repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = home.parent / "xdg-config"
    plant(xdg / "gh" / "hosts.yml")
    plant(xdg / "git" / "config", "[ribbit]\n\tshown = Shown\n")  # git's settings there are a toolchain's
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    out = sandboxed(repo, "cat $XDG_CONFIG_HOME/gh/hosts.yml; git config ribbit.shown")
    assert MARK not in out and "Shown" in out


def test_a_login_inside_a_shown_toolchain_folder_stays_hidden(repo: Path, home: Path) -> None:
    plant(home / ".cargo" / "credentials.toml")
    plant(home / ".cargo" / "config.toml", f'[registries.x]\ntoken = "{MARK}"\n')  # only bin, registry, git are shown
    plant(home / ".cargo" / "bin" / "tool", "#!/bin/sh\necho tool-ran\n").chmod(0o755)
    out = sandboxed(repo, "cat ~/.cargo/credentials.toml ~/.cargo/config.toml; ~/.cargo/bin/tool")
    assert MARK not in out and "tool-ran" in out


def test_the_home_as_the_repository_keeps_its_logins_hidden(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(home, "init", "-q")
    plant(home / ".ssh" / "id_rsa")
    plant(home / ".config" / "gh" / "hosts.yml")
    out = sandboxed(home, "cat .ssh/id_rsa .config/gh/hosts.yml")
    assert MARK not in out  # .ssh by name; gh's folder too (DEFAULT_HIDDEN_IN_HOME lists it)


# -- git config, as git parses it -------------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [
    ("http.proxy", f"http://alice:{MARK}%40x@proxy:3128"),  # URL-encoded
    ("HTTP.Proxy", f"alice:{MARK}@proxy:3128"),  # any case: git lowercases
    ("http.https://x.example/.proxy", f"{MARK}@proxy:3128"),  # a bare token as the user name
    ("url.alice:" + MARK + "@host:.insteadOf", "x:"),  # scp-like userinfo in a section name
    ("remote.origin.url", f"bob:{MARK}@example.com:r.git"),  # scp-like with a password
    ("http.extraHeader", f"Cookie: s={MARK}"),
])
def test_credential_variants_in_git_config_are_masked(repo: Path, home: Path, key: str, value: str) -> None:
    git(repo, "config", key, value)
    out = sandboxed(repo, "cat .git/config; git config --list")
    assert MARK not in out and "***" in out


def test_a_conditional_include_git_evaluates_is_masked(repo: Path, home: Path) -> None:
    included = plant(home.parent / "when-remote.inc", f"[http]\n\tproxy = carol:{MARK}@proxy:3128\n")  # outside /tmp
    git(repo, "config", "remote.origin.url", "https://example.com/r.git")
    git(repo, "config", "includeIf.hasconfig:remote.*.url:https://example.com/**.path", str(included))
    out = sandboxed(repo, f"cat {included}; git config --list")
    assert MARK not in out and "proxy=***@proxy:3128" in out


def test_a_relative_cookie_file_in_the_work_tree_is_shown_empty(repo: Path, home: Path) -> None:
    plant(repo / "cookies.txt", f"example.com\tFALSE\t/\tTRUE\t0\ts\t{MARK}\n")
    git(repo, "config", "http.cookieFile", "cookies.txt")
    assert MARK not in sandboxed(repo, "cat cookies.txt")


# -- the runs-later rule ----------------------------------------------------------------------------------


def test_what_the_users_global_config_makes_git_run_counts(repo: Path, home: Path) -> None:
    plant(home / ".gitconfig", "[core]\n\thooksPath = .githooks\n")  # relative: each repository's own folder
    assert runs_later(".githooks/pre-push", repo) is not None


def test_git_config_paths_are_normalised_and_followed_through_includes(repo: Path, home: Path) -> None:
    git(repo, "config", "core.hooksPath", "./tools/../hooks/")
    plant(repo / "team.gitconfig", "[filter \"x\"]\n\tclean = ./scripts/clean.sh\n")
    git(repo, "config", "include.path", "../team.gitconfig")
    assert runs_later("hooks/post-checkout", repo) and runs_later("team.gitconfig", repo)
    assert runs_later("scripts/clean.sh", repo)
    assert runs_later("scripts/other.sh", repo) is None


@pytest.mark.parametrize("path", [
    ".VSCode/tasks.json",  # another case of a listed folder (a case-insensitive disk reads it as .vscode)
    ".config/tool.toml", ".somerc", ".tool/hooks/x", "web/.storybook/main.js", ".yarn/plugins/@scope/p.cjs",
    "sub/.envrc", "profile_default/startup/00.py",
])
def test_unlisted_and_case_variants_count(path: str) -> None:
    assert runs_later(path) is not None


@pytest.mark.parametrize("path", [
    "sub/.unknownrc",  # limit: a dotfile below the root, outside a dot-folder, is not taken by the rule
    "scripts/postinstall.js",  # limit: what a listed file runs (package.json's script) is not followed
    ".github/ISSUE_TEMPLATE/x.md", ".gitignore", ".env.example",
])
def test_what_the_rule_leaves_alone(path: str) -> None:
    assert runs_later(path) is None


def test_a_repository_inside_the_home_does_not_show_its_neighbours(home: Path) -> None:
    project = home / "work" / "client-a" / "app"
    project.mkdir(parents=True)
    git(project, "init", "-q")
    plant(home / "work" / "client-b" / ".env", f"API_KEY={MARK}\n")
    plant(project / "README.md", "client a\n")
    out = sandboxed(project, "cat README.md; cat ../../client-b/.env")
    assert "client a" in out and MARK not in out
    assert sandboxed(project, "ls -A ~/work").split() == ["client-a"]  # only the way to the repository
