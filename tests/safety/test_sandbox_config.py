"""The sandbox's rules as data: the environment allow-list, the user's settings, hidden paths, sockets.

Pure where possible; the last tests run the real bubblewrap sandbox for the layouts that need mount
ordering right (a repository inside a hidden folder, a hidden folder inside the repository).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.sandbox.runner import BwrapRunner
from agent.sandbox.config import (
    SandboxConfigError,
    config_path,
    hidden_paths,
    host_socket_paths,
    load_settings,
    sandbox_env,
    SandboxSettings,
)
from tests.conftest import git, xml_call
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import UnixListener, host_folder, session


def test_only_allow_listed_variables_pass_and_the_fixed_ones_win() -> None:
    host = {
        "PATH": "/usr/bin", "HOME": "/home/u", "LANG": "de_DE.UTF-8", "LC_NUMERIC": "de_DE.UTF-8",
        "VIRTUAL_ENV": "/home/u/.venv", "OPENAI_API_KEY": "sk-x", "AWS_SESSION_TOKEN": "t", "SSH_AUTH_SOCK": "/run/s",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/bus", "XDG_RUNTIME_DIR": "/run/user/1", "GIT_DIR": "/elsewhere",
        "TERM": "xterm-256color", "PAGER": "less", "TMPDIR": "/host/tmp", "PIP_INDEX_URL": "https://u:tok@x",
        "LD_PRELOAD": "/evil.so", "BASH_ENV": "/evil.sh", "PROMPT_COMMAND": "evil",
    }
    env = sandbox_env(host, SandboxSettings(), tmpdir="/tmp")
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/home/u" and env["VIRTUAL_ENV"] == "/home/u/.venv"
    assert env["LANG"] == "de_DE.UTF-8" and env["LC_NUMERIC"] == "de_DE.UTF-8"
    assert env["TERM"] == "dumb" and env["PAGER"] == "cat" and env["TMPDIR"] == "/tmp" and env["LC_MESSAGES"] == "C"
    for name in ("OPENAI_API_KEY", "AWS_SESSION_TOKEN", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS",
                 "XDG_RUNTIME_DIR", "GIT_DIR", "PIP_INDEX_URL", "LD_PRELOAD", "BASH_ENV", "PROMPT_COMMAND"):
        assert name not in env
    # Unsandboxed, TMPDIR stays the host's.
    assert sandbox_env(host, SandboxSettings(), tmpdir=None)["TMPDIR"] == "/host/tmp"


def test_lc_all_cannot_override_english_messages() -> None:
    env = sandbox_env({"LC_ALL": "fr_FR.UTF-8", "LANG": "C"}, SandboxSettings(), tmpdir="/tmp")
    assert "LC_ALL" not in env and env["LANG"] == "fr_FR.UTF-8" and env["LC_MESSAGES"] == "C"


def test_user_patterns_pass_more_variables() -> None:
    host = {"MYAPP_URL": "u", "MYAPP_MODE": "m", "DATABASE_URL": "d", "OTHER": "o"}
    env = sandbox_env(host, SandboxSettings(env=["MYAPP_*", "DATABASE_URL"]), tmpdir="/tmp")
    assert {k: env[k] for k in ("MYAPP_URL", "MYAPP_MODE", "DATABASE_URL")} == {
        "MYAPP_URL": "u", "MYAPP_MODE": "m", "DATABASE_URL": "d"}
    assert "OTHER" not in env


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hide = \"~/.x\"\n", "hide: Input should be a valid list"),
        ("hidden = [\"~/.x\"]\n", "hidden: Extra inputs are not permitted"),
        ("tmp_size_mb = 0\n", "tmp_size_mb: Input should be greater than or equal to 1"),
        ("hide = [\n", "cannot read"),
        ("\udcff".encode("utf-8", "surrogateescape").decode("latin-1"), "cannot read"),
    ],
)
def test_a_bad_settings_file_is_one_clear_line(tmp_path: Path, text: str, expected: str) -> None:
    path = config_path({"XDG_CONFIG_HOME": str(tmp_path)})
    path.parent.mkdir(parents=True)
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(SandboxConfigError) as caught:
        load_settings({"XDG_CONFIG_HOME": str(tmp_path), "HOME": str(tmp_path)})
    message = str(caught.value)
    assert expected in message and "\n" not in message and str(path) in message


def test_environment_variables_add_to_the_file(tmp_path: Path) -> None:
    path = config_path({"XDG_CONFIG_HOME": str(tmp_path)})
    path.parent.mkdir(parents=True)
    path.write_text('hide = ["/a"]\nenv = ["X"]\n')
    settings = load_settings({
        "XDG_CONFIG_HOME": str(tmp_path), "RIBBIT_SANDBOX_HIDE": f"/b{os.pathsep}/c", "RIBBIT_SANDBOX_ENV": "Y, Z",
        "RIBBIT_SANDBOX_EXPOSE": "~/.ssh",
    })
    assert settings.hide == ["/a", "/b", "/c"] and settings.env == ["X", "Y", "Z"] and settings.expose == ["~/.ssh"]


def test_hidden_paths_are_resolved_outermost_first_and_exposed_ones_dropped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for rel in (".ssh", ".aws", ".config/gcloud", "vault/inner"):
        (home / rel).mkdir(parents=True)
    (home / ".netrc").write_text("x")
    (home / ".kube").symlink_to(home / "vault")  # a hidden link hides what it points to
    # By default the home is hidden whole: its credential folders need no mask of their own.
    found = hidden_paths(SandboxSettings(), {"HOME": str(home)})
    assert home in found and home / ".ssh" not in found
    # With the home shown again (`expose = ["~"]`) the named ones are hidden one by one.
    settings = SandboxSettings(hide=["~/vault/inner", "~/vault", "/nonexistent"], expose=["~", "~/.aws"])
    found = hidden_paths(settings, {"HOME": str(home)})
    assert home not in found and home / ".aws" not in found
    assert home / "vault" in found and home / "vault" / "inner" in found  # nested: the runner decides
    assert {home / ".ssh", home / ".netrc", home / ".config" / "gcloud"} <= set(found)
    assert found == sorted(found, key=lambda p: (len(p.parts), str(p)))
    assert Path("/nonexistent") not in found and home / ".kube" not in found


def test_socket_table_parsing(tmp_path: Path) -> None:
    import socket

    with host_folder("ribbit-sock-table-") as folder:
        spaced = folder / "with space.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(spaced))
        (folder / "plain-file.sock").write_text("not a socket")
        table = tmp_path / "unix"
        table.write_text(
            "Num       RefCount Protocol Flags    Type St Inode Path\n"
            f"0000: 00000002 00000000 00010000 0001 01 1 {spaced}\n"
            "0000: 00000002 00000000 00010000 0001 01 2 @abstract-name\n"
            "0000: 00000002 00000000 00000000 0001 03 3\n"
            f"0000: 00000002 00000000 00010000 0001 01 4 {folder / 'plain-file.sock'}\n"
            "0000: 00000002 00000000 00010000 0001 01 5 /gone/away.sock\n"
        )
        assert host_socket_paths(table) == [spaced]
        server.close()


def test_the_real_socket_table_is_read(tmp_path: Path) -> None:
    import socket

    with host_folder("ribbit-sock-real-") as folder:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(folder / "s.sock"))
        try:
            assert folder / "s.sock" in host_socket_paths()
        finally:
            server.close()


def test_a_repository_inside_a_hidden_folder_stays_usable_and_its_neighbours_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with host_folder("ribbit-hidden-parent-") as parent:
        repo = parent / "clients" / "acme"
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
        (repo / "main.py").write_text("print('acme')\n")
        (parent / "clients" / "other").mkdir()
        (parent / "clients" / "other" / "secret.txt").write_text("ribbit-neighbour-secret\n")
        (repo / "private").mkdir()
        (repo / "private" / "key.txt").write_text("ribbit-inner-secret\n")
        # Hidden: the folder around the repository, and a folder inside it (under both, the repository bind).
        monkeypatch.setenv("RIBBIT_SANDBOX_HIDE", os.pathsep.join([str(parent / "clients"), str(repo / "private")]))
        commands = [
            "cat main.py && echo new > new.py && cat new.py",
            f"cat {parent}/clients/other/secret.txt; ls {parent}/clients",
            "cat private/key.txt",
            "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('dev.sock'); print('CONNECTED')\"",
        ]
        listener = UnixListener(str(repo / "dev.sock"))  # shown again by the repository bind: masked too
        try:
            workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
        finally:
            listener.close()
        mine, neighbour, inner, connect = tool_outputs(recorder)
        assert "CONNECTED" not in connect and listener.connections == 0
        assert "print('acme')" in mine and (repo / "new.py").read_text() == "new\n"
        assert "ribbit-neighbour-secret" not in neighbour and "other" not in neighbour.splitlines()[-1]
        assert "ribbit-inner-secret" not in inner and "Exit code" in inner


def test_in_a_repository_that_is_the_home_folder_the_credentials_stay_hidden_and_unwritable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with host_folder("ribbit-home-repo-") as home:
        git(home, "init", "-q")
        (home / ".ssh").mkdir()
        (home / ".ssh" / "id_ed25519").write_text("ribbit-home-ssh-key\n")
        monkeypatch.setenv("HOME", str(home))
        commands = ["cat .ssh/id_ed25519", "echo key > .ssh/authorized_keys", "rm -rf .ssh", "echo ok > notes.txt"]
        # ribbit refuses the home folder as a repository (issue 32): that is the first line of defence ...
        import agent.session.workspace as workspace_module
        from agent.session import SetupError, check_repo

        with pytest.raises(SetupError, match="home folder"):
            check_repo(home)
        # ... and the sandbox is the second: with the refusal out of the way, the credentials stay hidden.
        monkeypatch.setattr(workspace_module, "unsuitable_folder", lambda root: None)
        workspace, recorder, _ = session(home, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
        outputs = tool_outputs(recorder)
        assert "ribbit-home-ssh-key" not in "".join(outputs)
        assert "Exit code" in outputs[1] and "Exit code" in outputs[2]
        assert sorted(p.name for p in (home / ".ssh").iterdir()) == ["id_ed25519"]
        assert (home / "notes.txt").read_text() == "ok\n"


def test_mounts_go_parents_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mount made before its parent's would be covered by it: the argument order must be outermost first."""
    with host_folder("ribbit-order-") as parent:
        repo = parent / "a" / "repo"
        (repo / "inner").mkdir(parents=True)
        monkeypatch.setenv("RIBBIT_SANDBOX_HIDE", os.pathsep.join([str(repo / "inner"), str(parent / "a")]))
        args = BwrapRunner(repo, load_settings()).wrap(["true"], repo, "read-write")

        def position(*words: object) -> int:
            text = [str(w) for w in words]
            return next(i for i in range(len(args)) if args[i:i + len(text)] == text)

        assert position("--tmpfs", parent / "a") < position("--bind", repo, repo) < position("--tmpfs", repo / "inner")
        assert position("--remount-ro", parent / "a") > position("--tmpfs", repo / "inner")


def test_doctor_says_what_the_sandbox_allows(repo: Path, tmp_path: Path) -> None:
    with host_folder("ribbit-doctor-home-") as home:
        (home / ".ssh").mkdir()
        (home / ".config" / "ribbit").mkdir(parents=True)
        (home / ".config" / "ribbit" / "sandbox.toml").write_text('hide = ["~/private"]\nexpose = ["~/notes"]\ntmp_size_mb = 64\n')
        (home / "private").mkdir()
        (home / "notes").mkdir()
        (home / ".cargo" / "bin").mkdir(parents=True)
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
               "OPENAI_API_KEY": "sk-doctor-secret-value", "RIBBIT_SANDBOX_ENV": "OPENAI_API_KEY"}
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--repo", str(repo)], capture_output=True,
                             text=True, cwd=root, env=env, timeout=120).stdout
    lines = {line.split()[1]: line for line in out.splitlines() if line[3:].startswith("sandbox")}
    writes = next(line for line in out.splitlines() if "sandbox writes" in line)
    hides = next(line for line in out.splitlines() if "sandbox hides" in line)
    shows = next(line for line in out.splitlines() if "sandbox shows" in line)
    env_line = next(line for line in out.splitlines() if "sandbox env" in line)
    assert lines and str(repo) in writes and "/tmp (64 MiB)" in writes and "read-only" in writes and "no network" in writes
    # The home folder is hidden whole (its .ssh and the hidden ~/private with it), but for its toolchains.
    assert str(home) in hides.split("(empty but for the toolchains below)")[0] and "/run" in hides and "socket" in hides
    assert "~/.cargo/bin" in shows and "~/notes" in shows and ".ssh" not in shows and "private" not in shows
    assert "PATH" in env_line and "OPENAI_API_KEY" in env_line and "sk-doctor-secret-value" not in out


def test_the_macos_profile_follows_the_same_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sandbox-exec cannot run here: check the Seatbelt profile it would get (untested on macOS)."""
    from agent.sandbox.runner import SandboxExecRunner

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / 'odd"name').mkdir()
    monkeypatch.setenv("HOME", str(home))
    runner = SandboxExecRunner(tmp_path, SandboxSettings(hide=['~/odd"name'], writable=["~/cache"]))
    try:
        writable, read_only = runner.profile("read-write"), runner.profile("read-only")
        denied = next(line for line in writable.splitlines() if line.startswith("(deny file-read*"))
        assert f'(subpath "{home / ".ssh"}")' in denied
        assert writable.index("(allow file-read*)") < writable.index("(deny file-read*")  # the later rule wins
        assert f'(subpath "{home}/odd\\"name")' in denied  # quoted, not a way to end the string
        assert '(allow file-write* (subpath (param "ROOT")))' in writable and "ROOT" not in read_only
        write_rule = f'(allow file-write* (subpath "{home / "cache"}"))'
        assert write_rule in writable and write_rule not in read_only
        # The home is denied whole, the repository read again after it, and what is hidden inside it denied again.
        rules = writable.splitlines()
        again = next(i for i, line in enumerate(rules) if line.startswith("(allow file-read* (subpath"))
        assert f'(subpath "{home}")' in denied and f'(subpath "{tmp_path}")' in rules[again]
        assert f'(subpath "{home / ".ssh"}")' in "".join(rules[again + 1:])
        assert "(deny network*)" in read_only and '(deny file-write* (subpath (param "GITDIR"))' in read_only
        assert "OPENAI_API_KEY" not in runner.environment()
    finally:
        runner.close()


def test_without_tmpfs_size_caps_tmp_is_a_private_folder_on_disk_emptied_after_each_command(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bubblewrap 0.6 (Ubuntu 22.04) has no --size: an uncapped tmpfs could take half the RAM."""
    import agent.sandbox.runner as sandbox

    monkeypatch.setattr(sandbox, "bwrap_can_cap_tmpfs", lambda: False)
    commands = [
        "echo one > /tmp/a && echo shm > /dev/shm/b && cat /tmp/a /dev/shm/b && df --output=fstype /tmp | tail -1",
        "ls -A /tmp /dev/shm; echo made > inrepo.txt",
    ]
    workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
    first, second = tool_outputs(recorder)
    assert first.splitlines()[:2] == ["one", "shm"] and "tmpfs" not in first
    assert "a" not in second.split() and "b" not in second.split()  # emptied between commands
    assert (repo / "inrepo.txt").read_text() == "made\n"
    assert not list(Path("/var/tmp").glob("ribbit-sandbox-tmp-*"))  # removed with the session


def test_doctor_runs_the_real_layout_and_says_when_it_fails(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.session.diagnostics import agent_checks
    from agent.sandbox.runner import BwrapRunner

    assert "sandbox probe" not in {c.name for c in agent_checks(repo)}  # this layout works here
    real_wrap = BwrapRunner.wrap
    def broken(self: BwrapRunner, argv: list[str], cwd: Path, access: str, fds: list[int] | None = None) -> list[str]:
        return ["bwrap", "--no-such-option", *real_wrap(self, argv, cwd, access, fds)[1:]]  # type: ignore[arg-type]

    monkeypatch.setattr(BwrapRunner, "wrap", broken)
    probe = {c.name: c for c in agent_checks(repo)}["sandbox probe"]
    assert not probe.ok and "no-such-option" in probe.detail
