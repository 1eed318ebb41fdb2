"""Hole 1: nothing a git config names (hooks, fsmonitor, filters, drivers, pager, gpg, helpers...)
ever runs through ribbit's own git calls, wherever that config comes from: a `.git` the agent made
mid-session, the repository's config and what it includes, the user's global/system config, the
environment. One mechanism per test; each plants a marker program that would create a file
outside the sandbox (its /tmp is private, so only a program run on the host can make it) and
asserts the file does not exist after a real session (replay model, real git, bubblewrap) that
makes every kind of git call: snapshots, Glob, the patch, /diff, /undo, `ribbit undo --list`,
`ribbit undo SESSION` and a review-mode session (worktree, proposal, apply)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent import git as gitcmd
from agent.git import GitError, GitRepo, find_repository
from agent.session.review import ReviewSession
from tests.conftest import git, xml_call
from tests.safety.helpers import HookedReplay, Recorder, start, tool_outputs, write_replay

ROOT = Path(__file__).resolve().parents[2]
HOOK_NAMES = (
    "reference-transaction", "post-index-change", "post-checkout", "pre-commit", "post-commit",
    "pre-auto-gc", "post-rewrite", "pre-push", "fsmonitor-watchman",
)


@dataclass
class Markers:
    folder: Path

    def command(self, name: str) -> str:
        """A shell command that leaves `name` behind if it ever runs on the host."""
        return f"touch {shlex.quote(str(self.folder / name))}"

    def left(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())


@pytest.fixture
def markers(tmp_path: Path) -> Markers:
    folder = tmp_path / "markers"
    folder.mkdir()
    return Markers(folder)


def plant(git_dir: Path, key: str, value: str, *, add: bool = False) -> None:
    """Write a config key straight into a repository's config file (as an attacker would)."""
    subprocess.run(
        ["git", "config", "--file", str(git_dir / "config"), *(["--add"] if add else []), key, value], check=True,
    )


def executable(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


@dataclass
class Exercised:
    outputs: list[str]
    glob: str  # what Glob answered
    patch: str
    stop_reason: str


def ribbit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=180)


def every_git_call(root: Path, tmp_path: Path, *setup: str, hooks: dict | None = None, review: bool = True) -> Exercised:
    """A session whose steps make ribbit run each kind of git call it has, then undo and review."""
    turns = [
        *setup,
        xml_call("Write", file_path="made/new.txt", content="new\n"),
        xml_call("Glob", pattern="**/*"),
        xml_call("Bash", command="echo more >> made/new.txt"),
        "done",
    ]
    workspace, recorder = start(root, write_replay(tmp_path / "session.jsonl", *turns), hooks=hooks)
    try:
        summary = workspace.session.run("go")
        patch = workspace.patch()
        workspace.journal.changed_since_start()  # the TUI's /diff
        workspace.undo_last()  # the TUI's /undo
        session_id = workspace.journal.session_id
    finally:
        workspace.close()
    listed = ribbit_cli("undo", "--list", "--repo", str(root))
    assert listed.returncode == 0 and session_id in listed.stdout, listed.stderr
    undone = ribbit_cli("undo", session_id, "--repo", str(root))
    assert undone.returncode == 0, undone.stderr
    assert not (root / "made" / "new.txt").exists()
    if review:
        review_turns = [xml_call("Write", file_path="reviewed.txt", content="r\n"), "done"]
        session = ReviewSession(HookedReplay(write_replay(tmp_path / "review.jsonl", *review_turns)), root, sink=Recorder())
        try:
            session.run("go")
            proposal = session.proposal()
            result = session.apply(proposal, proposal.all_items())
        finally:
            session.close()
        assert result.applied == {"reviewed.txt": [0]}
        assert (root / "reviewed.txt").read_text() == "r\n"
    outputs = tool_outputs(recorder)
    return Exercised(outputs=outputs, glob=outputs[len(setup) + 1], patch=patch, stop_reason=summary.stop_reason)


# -- a .git the agent creates mid-session -------------------------------------------------------


def test_fsmonitor_in_a_git_the_agent_creates_mid_session_never_runs(tmp_path: Path, markers: Markers) -> None:
    """The issue's exact attack: full-auto in a plain folder, `git init` + core.fsmonitor, then Glob."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")
    command = markers.command("fsmonitor")
    attack = f"git init -q . && git config core.fsmonitor {shlex.quote(command + '; echo')}"

    def ensure_planted() -> None:  # if the sandbox refused to create .git, plant it from outside
        if not (folder / ".git" / "config").is_file():
            git(folder, "init", "-q")
        plant(folder / ".git", "core.fsmonitor", command + "; echo")

    result = every_git_call(folder, tmp_path, xml_call("Bash", command=attack), hooks={1: ensure_planted})
    assert "fsmonitor = " in (folder / ".git" / "config").read_text()  # the trap was set
    assert markers.left() == []
    assert result.stop_reason == "finished"
    assert "a.txt" in result.glob and "made/new.txt" in result.glob  # Glob kept working,
    assert ".git" not in result.glob  # from the view fixed at the start
    assert "+new" in result.patch and ".git/" not in result.patch


def test_a_nested_git_made_mid_session_is_never_used(tmp_path: Path, repo: Path, markers: Markers) -> None:
    def nested_repo() -> None:
        git(repo, "init", "-q", "sub")
        plant(repo / "sub" / ".git", "core.fsmonitor", markers.command("nested") + "; echo")
        executable(repo / "sub" / ".git" / "hooks" / "reference-transaction", markers.command("nested-hook"))
        (repo / "sub" / "inside.py").write_text("x = 1\n")

    result = every_git_call(repo, tmp_path, xml_call("Bash", command="true"), hooks={1: nested_repo})
    assert markers.left() == []
    assert "sub/inside.py" in result.patch  # its files are journaled like any others


# -- the repository's own config ----------------------------------------------------------------


def test_core_fsmonitor_in_the_repository_config_never_runs(tmp_path: Path, repo: Path, markers: Markers) -> None:
    plant(repo / ".git", "core.fsmonitor", markers.command("fsmonitor") + "; echo")
    every_git_call(repo, tmp_path)
    assert markers.left() == []


def test_hooks_in_the_repository_never_run(tmp_path: Path, repo: Path, markers: Markers) -> None:
    """reference-transaction runs on every update-ref, post-index-change on index writes,
    post-checkout on `git worktree add` (review mode)."""
    for name in HOOK_NAMES:
        executable(repo / ".git" / "hooks" / name, markers.command(name))
    every_git_call(repo, tmp_path)
    assert markers.left() == []
    git(repo, "update-ref", "refs/probe", "HEAD")  # the same hooks do run for plain git: the test can fail
    assert "reference-transaction" in markers.left()


def test_core_hooks_path_never_runs_hooks(tmp_path: Path, repo: Path, markers: Markers) -> None:
    hooks = tmp_path / "elsewhere-hooks"
    for name in HOOK_NAMES:
        executable(hooks / name, markers.command(name))
    plant(repo / ".git", "core.hooksPath", str(hooks))
    every_git_call(repo, tmp_path)
    assert markers.left() == []


def test_include_path_to_a_file_the_agent_writes_never_runs_what_it_names(
    tmp_path: Path, repo: Path, markers: Markers,
) -> None:
    """The config includes a work-tree file, which the agent (in the sandbox) fills with traps."""
    plant(repo / ".git", "include.path", "../evil.inc")
    hooks = "/var/tmp/never-a-hooks-dir"
    evil = (
        f"[core]\n\tfsmonitor = {markers.command('include-fsmonitor')}; echo\n\thooksPath = {hooks}\n"
        f"[filter \"x\"]\n\tclean = {markers.command('include-clean')}; cat\n"
        f"\tprocess = {markers.command('include-process')}\n"
        f"[diff \"x\"]\n\ttextconv = {markers.command('include-textconv')}; cat\n"
    )
    setup = xml_call("Bash", command=f"printf %s {shlex.quote(evil)} > evil.inc && printf '* filter=x diff=x\\n' > .gitattributes")
    seen: list[str] = []

    def trap_is_set() -> None:  # the included file now defines them, as plain git sees it
        seen.append(subprocess.run(["git", "-C", str(repo), "config", "core.fsmonitor"], capture_output=True, text=True).stdout)

    every_git_call(repo, tmp_path, setup, hooks={1: trap_is_set})
    assert "include-fsmonitor" in seen[0]
    assert markers.left() == []


def test_clean_smudge_and_process_filters_named_by_an_agent_written_gitattributes_never_run(
    tmp_path: Path, repo: Path, markers: Markers,
) -> None:
    """A driver the user configured (as git-lfs does), invoked by a .gitattributes the agent wrote."""
    for part in ("clean", "smudge"):
        plant(repo / ".git", f"filter.evil.{part}", markers.command(part) + "; cat")
    plant(repo / ".git", "filter.evil.process", markers.command("process"))
    plant(repo / ".git", "filter.evil.required", "true")
    setup = xml_call("Bash", command="printf '* filter=evil\\n' > .gitattributes && echo changed >> calc.py")
    result = every_git_call(repo, tmp_path, setup)
    assert markers.left() == []
    assert "+changed" in result.patch  # the bytes were journaled as they are, unfiltered


def test_textconv_and_diff_drivers_never_run(tmp_path: Path, repo: Path, markers: Markers) -> None:
    plant(repo / ".git", "diff.evil.textconv", markers.command("textconv") + "; cat")
    plant(repo / ".git", "diff.evil.command", markers.command("diff-command"))
    setup = xml_call("Bash", command="printf '* diff=evil\\n' > .gitattributes && echo changed >> calc.py")
    result = every_git_call(repo, tmp_path, setup)
    assert markers.left() == []
    assert "+changed" in result.patch


def test_external_diff_from_config_or_environment_never_runs(
    tmp_path: Path, repo: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant(repo / ".git", "diff.external", markers.command("diff-external"))
    external = tmp_path / "external-diff.sh"
    executable(external, markers.command("GIT_EXTERNAL_DIFF"))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(external))
    every_git_call(repo, tmp_path, xml_call("Bash", command="echo changed >> calc.py"))
    assert markers.left() == []


def test_commit_signing_and_signature_display_never_run_gpg(tmp_path: Path, repo: Path, markers: Markers) -> None:
    """commit-tree honours commit.gpgSign; `git show`/`log` honour log.showSignature."""
    program = tmp_path / "fake-gpg.sh"
    executable(program, markers.command("gpg") + "; exit 1")
    plant(repo / ".git", "commit.gpgSign", "true")
    plant(repo / ".git", "log.showSignature", "true")
    plant(repo / ".git", "gpg.program", str(program))
    plant(repo / ".git", "gpg.format", "openpgp")
    every_git_call(repo, tmp_path, xml_call("Bash", command="echo changed >> calc.py"))
    assert markers.left() == []


# -- the user's own config and environment ------------------------------------------------------


def test_global_and_system_config_are_not_read(
    tmp_path: Path, repo: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch,
) -> None:
    evil = tmp_path / "evil.gitconfig"
    evil.write_text(
        f"[core]\n\tfsmonitor = {markers.command('global-fsmonitor')}; echo\n\thooksPath = {tmp_path / 'global-hooks'}\n"
        f"[filter \"lfs\"]\n\tprocess = {markers.command('global-lfs')}\n\tclean = {markers.command('global-clean')}; cat\n"
    )
    for name in HOOK_NAMES:
        executable(tmp_path / "global-hooks" / name, markers.command("global-" + name))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(evil))
    monkeypatch.setenv("GIT_CONFIG_SYSTEM", str(evil))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (tmp_path / "xdg" / "git").mkdir(parents=True)
    (tmp_path / "xdg" / "git" / "config").write_text(evil.read_text())
    setup = xml_call("Bash", command="printf '* filter=lfs\\n' > .gitattributes")
    every_git_call(repo, tmp_path, setup)
    assert markers.left() == []


def test_git_variables_in_ribbits_environment_are_not_passed_on(
    tmp_path: Path, repo: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'core.fsmonitor'='{markers.command('parameters')}; echo'")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", markers.command("count") + "; echo")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nowhere"))
    every_git_call(repo, tmp_path, review=False)
    assert markers.left() == []


def test_a_git_program_the_agent_put_on_path_is_never_run(
    tmp_path: Path, repo: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PATH entries that are relative, or inside the repository, are skipped when finding git."""
    monkeypatch.setenv("PATH", f"bin:{repo / 'tools'}:{os.environ['PATH']}")
    setup = xml_call(
        "Bash",
        command=f"mkdir -p bin tools && printf '#!/bin/sh\\n{markers.command('fake-git')}\\n' | tee bin/git > tools/git && chmod +x bin/git tools/git",
    )
    planted: list[bool] = []
    every_git_call(repo, tmp_path, setup, review=False, hooks={1: lambda: planted.append((repo / "tools" / "git").exists())})
    assert planted == [True]
    assert markers.left() == []
    assert not gitcmd.git_executable(repo).startswith(str(repo))


# -- mechanisms no session path reaches: the module itself refuses them ---------------------------


def test_pager_and_editor_are_never_programs_from_config(tmp_path: Path, repo: Path, markers: Markers, monkeypatch: pytest.MonkeyPatch) -> None:
    plant(repo / ".git", "core.pager", markers.command("pager"))
    plant(repo / ".git", "pager.diff", markers.command("pager-diff"))
    plant(repo / ".git", "core.editor", markers.command("editor"))
    monkeypatch.setenv("GIT_PAGER", markers.command("GIT_PAGER"))
    monkeypatch.setenv("GIT_EDITOR", markers.command("GIT_EDITOR"))
    found = find_repository(repo)
    assert found is not None
    assert found.text("var", "GIT_PAGER").strip() == "cat"
    assert found.text("var", "GIT_EDITOR").strip() == ":"
    assert markers.left() == []


def test_ssh_ext_and_other_transports_never_run_a_program(tmp_path: Path, repo: Path, markers: Markers) -> None:
    plant(repo / ".git", "core.sshCommand", markers.command("ssh"))
    plant(repo / ".git", "protocol.ext.allow", "always")
    plant(repo / ".git", "protocol.allow", "always")
    plant(repo / ".git", "remote.origin.url", "ssh://example.invalid/repo")
    found = find_repository(repo)
    assert found is not None
    for url in ("ssh://example.invalid/repo", "origin", f"ext::sh -c {markers.command('ext').replace(' ', '% ')}"):
        with pytest.raises(GitError):
            found.run("ls-remote", url)
    assert markers.left() == []
    plain = subprocess.run(  # without ribbit's hardening the ext:: URL does run a program
        ["git", "-C", str(repo), "ls-remote", f"ext::sh -c {markers.command('ext').replace(' ', '% ')}"],
        capture_output=True,
    )
    assert plain.returncode != 0 and markers.left() == ["ext"]


def test_credential_helpers_never_run(tmp_path: Path, repo: Path, markers: Markers) -> None:
    plant(repo / ".git", "credential.helper", f"!{markers.command('helper')}")
    plant(repo / ".git", "credential.https://example.invalid.helper", f"!{markers.command('url-helper')}")
    found = find_repository(repo)
    assert found is not None
    found.run("credential", "fill", input=b"protocol=https\nhost=example.invalid\n\n", check=False)
    assert markers.left() == []


def test_a_driver_name_containing_an_equals_sign_is_still_overridden(tmp_path: Path, repo: Path, markers: Markers) -> None:
    """`-c filter.a=b.clean=` would set key `filter.a`: overrides go through GIT_CONFIG_KEY_n."""
    plant(repo / ".git", "filter.a=b.clean", markers.command("equals") + "; cat")
    setup = xml_call("Bash", command="printf '* filter=a=b\\n' > .gitattributes && echo changed >> calc.py")
    every_git_call(repo, tmp_path, setup, review=False)
    assert markers.left() == []


def test_every_program_naming_key_in_the_config_gets_a_harmless_value(repo: Path) -> None:
    for key, value in [
        ("filter.x.clean", "a"), ("filter.x.smudge", "a"), ("filter.x.process", "a"), ("diff.y.textconv", "a"),
        ("diff.y.command", "a"), ("merge.z.driver", "a"), ("credential.helper", "a"), ("gpg.ssh.program", "a"),
        ("protocol.ext.allow", "always"), ("remote.o.vcs", "a"), ("remote.o.uploadpack", "a"), ("hook.h.command", "a"),
        ("uploadpack.packObjectsHook", "a"), ("gpg.ssh.defaultKeyCommand", "a"), ("core.alternateRefsCommand", "a"),
    ]:
        plant(repo / ".git", key, value)
    found = find_repository(repo)
    assert found is not None
    for key in ("filter.x.clean", "filter.x.smudge", "filter.x.process", "diff.y.textconv", "diff.y.command",
                "merge.z.driver", "gpg.ssh.program", "remote.o.vcs", "remote.o.uploadpack", "hook.h.command",
                "uploadpack.packobjectshook", "gpg.ssh.defaultkeycommand", "core.alternaterefscommand"):
        assert found.text("config", "--get", key).strip() == "", key
    assert found.text("config", "--get", "protocol.ext.allow").strip() == "never"
    assert found.text("config", "--get", "core.hooksPath").strip() == "/dev/null"
    assert found.text("config", "--get", "core.fsmonitor").strip() == "false"
    assert found.text("config", "--get-all", "credential.helper").splitlines()[-1] == ""


def test_git_dir_is_fixed_at_start_even_if_a_new_git_appears_at_the_root(tmp_path: Path) -> None:
    """A plain folder's journal stays private after a `.git` appears in it; `ribbit undo` finds it."""
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "a.txt").write_text("one\n")

    def agent_made_a_repo() -> None:
        git(folder, "init", "-q")

    turns = [xml_call("Bash", command="echo two > a.txt"), xml_call("Glob", pattern="*"), xml_call("Bash", command="echo three > a.txt"), "done"]
    workspace, recorder = start(folder, write_replay(tmp_path / "r.jsonl", *turns), hooks={1: agent_made_a_repo})
    try:
        workspace.session.run("go")
        assert workspace.journal.private and (folder / ".git").is_dir()
        assert "a.txt" in tool_outputs(recorder)[1]
        assert "+three" in workspace.patch()
        sid = workspace.journal.session_id
    finally:
        workspace.close()
    assert not GitRepo(git_dir=folder / ".git", work_tree=folder).text("for-each-ref", "refs/ribbit/").strip()
    undone = ribbit_cli("undo", sid, "--repo", str(folder))
    assert undone.returncode == 0, undone.stderr
    assert (folder / "a.txt").read_text() == "one\n"


def test_project_instructions_status_runs_nothing_the_config_names(tmp_path: Path, repo: Path, markers: Markers) -> None:
    """Loading AGENTS.md asks git which instruction files are uncommitted, on the host, before any
    session: a clean filter or fsmonitor in the repository's config must not run there either."""
    from agent.core.instructions import load_instructions

    (repo / "AGENTS.md").write_text("Run the tests with pytest.\n")
    plant(repo / ".git", "core.fsmonitor", markers.command("fsmonitor") + "; echo")
    plant(repo / ".git", "filter.x.clean", markers.command("clean") + "; cat")
    (repo / ".gitattributes").write_text("* filter=x\n")
    loaded = load_instructions(repo, environ={"HOME": str(tmp_path / "home")})
    assert markers.left() == []
    assert loaded.uncommitted == ["AGENTS.md"]  # git still answered
    subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, check=True)
    assert markers.left() != []  # plain git runs them: the test can fail
