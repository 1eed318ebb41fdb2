"""Issue 12, hole 5 and the sandbox's own rules: no side door from a Bash command to the host.

Real sessions (replay model, real git, real bubblewrap). Each test checks the outcome where it
happens: the secret is in no tool result, the socket saw no connection, the file is not on disk,
ribbit did not hang, its memory stayed bounded.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent.sandbox.runner import GIT_MOUNT_POINT_MODE, BwrapRunner
from tests.conftest import git, xml_call
from tests.safety.helpers import tool_outputs
from tests.safety.sandbox_helpers import (
    ScriptedApprover, UnixListener, everything_the_model_got, host_folder, session,
)

SECRETS = {
    "OPENAI_API_KEY": "sk-ribbit-test-openai-4f1d",
    "AWS_SECRET_ACCESS_KEY": "ribbit-test-aws-9c2e",
    "GITHUB_TOKEN": "ghp_ribbittest7a1b",
    "MY_DB_PASSWORD": "ribbit-test-db-3d5f",
    "ANTHROPIC_API_KEY": "ribbit-test-anthropic-8e0c",
}


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SSH_AUTH_SOCK", "/var/tmp/ribbit-test-agent.sock")
    monkeypatch.setenv("LANG", "C.UTF-8")
    return SECRETS


def _leaks(text: str) -> list[str]:
    return [name for name, value in SECRETS.items() if value in text]


# -- the environment -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["ask", "full-auto"])
def test_secrets_in_ribbits_environment_never_reach_a_command(
    repo: Path, tmp_path: Path, secret_env: dict[str, str], mode: str,
) -> None:
    commands = [
        "cat /proc/self/environ",  # allow-listed: runs unasked in ask mode
        "cat /proc/1/environ",  # the sandbox's init (bwrap itself)
        "env",
        "cat /proc/*/environ",
        "tr '\\0' '\\n' < /proc/$PPID/environ",
        "cat /proc/self/cmdline /proc/1/cmdline /proc/self/status",
    ]
    turns = [xml_call("Bash", command=c) for c in commands]
    workspace, recorder, _ = session(repo, tmp_path, *turns, "done", mode=mode, approver=ScriptedApprover(*[True] * 9))
    seen = everything_the_model_got(workspace, recorder)
    assert _leaks(seen) == [] and "SSH_AUTH_SOCK" not in seen
    # ... while what tests and builds need is there.
    env_output = tool_outputs(recorder)[2]
    for name in ("PATH=", "HOME=", "LANG=C.UTF-8", "TERM=dumb", "TMPDIR=/tmp"):
        assert name in env_output


def test_without_a_sandbox_commands_get_the_minimal_environment_too(
    repo: Path, tmp_path: Path, secret_env: dict[str, str],
) -> None:
    workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command="env"), "done", no_sandbox=True)
    assert not workspace.runner.sandboxed
    assert _leaks(everything_the_model_got(workspace, recorder)) == []
    assert "PATH=" in tool_outputs(recorder)[0]


def test_the_host_process_tree_is_out_of_sight(repo: Path, tmp_path: Path) -> None:
    """A new PID namespace: /proc shows the sandbox's processes only; its init has no visible parent."""
    turns = [xml_call("Bash", command="ls /proc | grep -c '^[0-9]'; grep PPid /proc/1/status; ls /proc/" + str(os.getpid()))]
    workspace, recorder, _ = session(repo, tmp_path, *turns, "done")
    output = tool_outputs(recorder)[0]
    count = int(output.splitlines()[0])
    assert count < 10 and "PPid:\t0" in output and "No such file or directory" in output



def test_kernel_settings_under_proc_sys_cannot_be_changed_from_a_command(repo: Path, tmp_path: Path) -> None:
    """Run as root, a fresh /proc let a command write the kernel's global settings: kernel.core_pattern
    (`|/repo/evil` runs as root on the host at the next crash) or kernel.modprobe. Here the command
    flips a harmless one, kernel.core_uses_pid, and re-writes core_pattern's own value (a no-op if it
    were allowed); the host's values must not move and both writes must fail."""
    knob = Path("/proc/sys/kernel/core_uses_pid")
    before = knob.read_text()
    other = "0" if before.strip() == "1" else "1"
    pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    turns = [xml_call(
        "Bash", command=f"echo {other} > {knob} && echo FLIPPED; cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern"
        " && echo PATTERN-WRITABLE; cat /proc/sys/kernel/ostype",
    )]
    try:
        workspace, recorder, _ = session(repo, tmp_path, *turns, "done")
        output = tool_outputs(recorder)[0]
        assert knob.read_text() == before
        assert Path("/proc/sys/kernel/core_pattern").read_text() == pattern
        assert "FLIPPED" not in output and "PATTERN-WRITABLE" not in output
        assert output.count("Read-only file system") == 2 or os.geteuid() != 0, output
        assert Path("/proc/sys/kernel/ostype").read_text().strip() in output  # still readable
    finally:
        if knob.read_text() != before and os.geteuid() == 0:
            knob.write_text(before)  # the hole was open: put the shared machine's setting back


# -- hidden folders and the user's settings ---------------------------------------------------------


@pytest.fixture
def fake_home(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A home folder outside /tmp (which the sandbox replaces), with credentials and one ordinary file."""
    with host_folder("ribbit-home-") as home:
        files = {
            ".ssh/id_ed25519": "ribbit-secret-ssh-key",
            ".aws/credentials": "ribbit-secret-aws",
            ".config/gcloud/credentials.db": "ribbit-secret-gcloud",
            ".netrc": "machine example.com password ribbit-secret-netrc",
            ".git-credentials": "https://u:ribbit-secret-gitcred@example.com",
            ".docker/config.json": '{"auths": "ribbit-secret-docker"}',
            ".kube/config": "ribbit-secret-kube",
            ".gnupg/private-keys-v1.d/k.key": "ribbit-secret-gpg",
            ".local/share/keyrings/login.keyring": "ribbit-secret-keyring",
            "work/other-client/.env": "ribbit-secret-other-project",
            "visible.txt": "ribbit-visible-file",
        }
        for rel, text in files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(text + "\n")
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        yield home


def test_credential_folders_are_hidden(repo: Path, tmp_path: Path, fake_home: Path) -> None:
    (fake_home / ".local" / "bin").mkdir(parents=True)
    (fake_home / ".local" / "bin" / "tool.txt").write_text("ribbit-toolchain-file\n")
    commands = [
        "cat ~/.local/bin/tool.txt",  # control: a toolchain folder of the home is readable
        "cat ~/.ssh/id_ed25519 ~/.aws/credentials ~/.netrc ~/.git-credentials ~/.kube/config",
        "grep -r ribbit- ~",
        "find ~ -type f",
        "ls -la ~/.ssh ~/.gnupg",
    ]
    workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done", mode="ask")
    seen = everything_the_model_got(workspace, recorder)
    outputs = tool_outputs(recorder)
    assert "ribbit-toolchain-file" in outputs[0]
    assert "ribbit-secret-ssh" not in seen and "ribbit-secret-aws" not in seen and "ribbit-secret-netrc" not in seen
    assert "ribbit-secret-gitcred" not in seen and "ribbit-secret-kube" not in seen
    assert "ribbit-secret-gpg" not in seen and "ribbit-secret-docker" not in seen and "ribbit-secret-keyring" not in seen
    assert "ribbit-secret-gcloud" not in seen
    assert "id_ed25519" not in outputs[3]  # hidden folders look empty
    # Not on any list either: the home is hidden but for its toolchains (issue 41), so are these.
    assert "ribbit-secret-other-project" not in seen and "ribbit-visible-file" not in seen
    assert (fake_home / "work" / "other-client" / ".env").exists()


def test_the_users_settings_hide_and_expose_more(
    repo: Path, tmp_path: Path, fake_home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = fake_home / ".config" / "ribbit" / "sandbox.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('hide = ["~/work"]\nexpose = ["~/.aws"]\nenv = ["RIBBIT_TEST_PASSED_*"]\n')
    monkeypatch.setenv("RIBBIT_SANDBOX_HIDE", str(fake_home / "visible.txt"))
    monkeypatch.setenv("RIBBIT_TEST_PASSED_VAR", "passed-on-request")
    monkeypatch.setenv("RIBBIT_TEST_OTHER_VAR", "not-passed")
    commands = ["grep -r ribbit- ~", "env"]
    workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
    grep, env = tool_outputs(recorder)
    assert "ribbit-secret-aws" in grep  # exposed on request
    assert "ribbit-secret-other-project" not in grep and "ribbit-visible-file" not in grep  # hidden on request
    assert "ribbit-secret-ssh" not in grep  # the defaults still hold
    assert "RIBBIT_TEST_PASSED_VAR=passed-on-request" in env and "not-passed" not in env


def test_a_broken_settings_file_stops_ribbit_with_one_line(repo: Path, tmp_path: Path, fake_home: Path) -> None:
    config = fake_home / ".config" / "ribbit" / "sandbox.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('hide = "~/.ssh"\n')
    env = dict(os.environ)
    replay = tmp_path / "r.jsonl"
    replay.write_text('{"text": "done"}\n')
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "x", "--repo", str(repo), "--model", f"replay:{replay}"],
        capture_output=True, text=True, cwd=root, env=env, timeout=120,
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr
    lines = [line for line in run.stderr.splitlines() if "sandbox.toml" in line]
    assert len(lines) == 1 and "hide" in lines[0]
    doctor = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--repo", str(repo)], capture_output=True,
                            text=True, cwd=root, env=env, timeout=120)
    assert "!! sandbox config" in doctor.stdout


# -- host sockets ------------------------------------------------------------------------------------


# Slow tier, though quick: the socket it plants on the host is one every sandbox started meanwhile masks,
# and a concurrent test's command fails when the socket goes between its scan and bubblewrap's start
# (`pytest -m quick -n 2`). That race is the product's too (a host socket that vanishes in those
# milliseconds fails one command): noted in docs/security.md.
@pytest.mark.slow
def test_host_unix_sockets_cannot_be_connected(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with host_folder("ribbit-sockets-") as folder:
        runtime = folder / "runtime"
        runtime.mkdir()
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
        listeners = [
            UnixListener(str(folder / "service.sock")),  # anywhere on the host, under a read-only bind
            UnixListener(str(runtime / "bus")),  # the user's runtime folder
            UnixListener(str(repo / "dev.sock")),  # inside the (writable) repository
            UnixListener(f"\0ribbit-test-abstract-{os.getpid()}"),  # abstract: no path at all
        ]
        try:
            probe = (
                "import socket, sys\n"
                "for a in sys.argv[1:]:\n"
                "    s = socket.socket(socket.AF_UNIX)\n"
                "    try:\n"
                "        s.connect(a.replace('@', chr(0), 1)); print('CONNECTED', a)\n"
                "    except OSError as e:\n"
                "        print('refused', a, e.strerror)\n"
            )
            (repo / "probe.py").write_text(probe)
            addresses = " ".join(
                "'" + (("@" + lst.address[1:]) if lst.address.startswith("\0") else lst.address) + "'" for lst in listeners
            )
            workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command=f"python3 probe.py {addresses}"), "done")
            output = tool_outputs(recorder)[0]
            assert "CONNECTED" not in output
            assert len([line for line in output.splitlines() if line.startswith("refused")]) == 4
            assert [lst.connections for lst in listeners] == [0, 0, 0, 0]
            # Control: the sockets were alive all along.
            for lst in listeners:
                import socket

                with socket.socket(socket.AF_UNIX) as client:
                    client.connect(lst.address)
        finally:
            for lst in listeners:
                lst.close()


# -- /tmp, /dev/shm, /dev ----------------------------------------------------------------------------


def test_tmp_and_shm_are_private_and_size_capped(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with host_folder("ribbit-config-") as config_home:
        (config_home / "ribbit").mkdir()
        (config_home / "ribbit" / "sandbox.toml").write_text("tmp_size_mb = 8\nshm_size_mb = 4\n")
        monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
        commands = [
            "head -c 64M /dev/zero > /tmp/big; stat -c %s /tmp/big",
            "head -c 64M /dev/zero > /dev/shm/big; stat -c %s /dev/shm/big",
            "echo x > /dev/ribbit-test",
            "df -B1 --output=size /tmp /dev/shm | tail -2",
        ]
        workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
    tmp, shm, dev, sizes = tool_outputs(recorder)
    assert "No space left on device" in tmp and int(tmp.splitlines()[1]) <= 8 * 2**20
    assert "No space left on device" in shm and int(shm.splitlines()[1]) <= 4 * 2**20
    assert "Read-only file system" in dev
    assert [int(x) for x in sizes.split()[:2]] == [8 * 2**20, 4 * 2**20]


def test_default_tmp_caps(repo: Path, tmp_path: Path) -> None:
    workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command="df -B1 --output=size /tmp /dev/shm | tail -2"), "done")
    assert [int(x) for x in tool_outputs(recorder)[0].split()] == [1024 * 2**20, 256 * 2**20]


# -- the shell's way back to ribbit (no scratch folder) -----------------------------------------------


@pytest.mark.parametrize("plant", ["symlink", "fifo", "dev_zero"])
def test_nothing_the_shell_hands_back_is_a_file_the_command_can_replace(
    repo: Path, tmp_path: Path, plant: str,
) -> None:
    """The old runner read the final cwd from a file in a scratch folder the sandbox could write
    (`trap -p EXIT` named it): replace it by a link to a host secret, a FIFO, /dev/zero."""
    with host_folder("ribbit-outside-") as outside:
        secret = outside / "secret.txt"
        secret.write_text("ribbit-host-secret\n")
        replace = {
            "symlink": f'ln -sf {secret} "$p"',
            "fifo": 'mkfifo "$p"',
            "dev_zero": 'ln -sf /dev/zero "$p"',
        }[plant]
        attack = (
            "trap -p EXIT; for p in $(trap -p EXIT | grep -o '/[^ \"]*' | tr -d \"'\"); do "
            f'rm -f "$p"; {replace}; done; ls -la /tmp; echo planted'
        )
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command=attack), xml_call("Bash", command="pwd"), "done")
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outputs = tool_outputs(recorder)
    assert "ribbit-host-secret" not in everything_the_model_got(workspace, recorder)
    assert outputs[1].strip() == str(repo)  # the session went on, in the repository
    assert rss_after - rss_before < 200 * 1024  # KiB: no read of /dev/zero into memory


@pytest.mark.slow  # floods the channel back to its bound: ~6 s
def test_the_channel_back_is_bounded_and_checked(repo: Path, tmp_path: Path) -> None:
    """The cwd pipe is inherited by the command: flooding it, closing it or lying on it changes nothing."""
    (repo / "sub").mkdir()
    fd = "fd=$(trap -p EXIT | grep -o '>&[0-9]*' | tr -d '>&'); "
    commands = [
        fd + "cd sub; head -c 50M /dev/zero >&$fd",  # fills the pipe, then blocks: only its own timeout
        "pwd",
        fd + "printf '/etc\\0' >&$fd; eval \"exec $fd>&-\"",  # a path outside, then no channel at all
        "pwd",
        fd + "cd sub; trap - EXIT; printf '%s\\0' /usr >&$fd",  # its own answer instead of ribbit's
        "pwd",
    ]
    turns = [xml_call("Bash", command=c, timeout=5) for c in commands]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workspace, recorder, _ = session(repo, tmp_path, *turns, "done")
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outputs = tool_outputs(recorder)
    assert "timed out" in outputs[0]
    assert outputs[1].strip() == str(repo)  # unknown after a timeout: stays where it was
    assert outputs[3].strip() == str(repo)
    assert "reset to the root" in outputs[4] and outputs[5].strip() == str(repo)
    assert rss_after - rss_before < 200 * 1024


def test_huge_output_keeps_ribbit_memory_bounded(repo: Path, tmp_path: Path) -> None:
    """`ribbit run` as its own process: peak memory with 2 GB of output vs with one line."""
    root = Path(__file__).resolve().parents[2]

    def peak_rss_kib(command: str) -> tuple[int, str]:
        replay = tmp_path / "flood.jsonl"
        import json

        replay.write_text(json.dumps({"text": xml_call("Bash", command=command, timeout=300)}) + "\n")
        transcript = tmp_path / "t.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "run", "x", "--repo", str(repo), "--model", f"replay:{replay}",
             "--mode", "full-auto", "--transcript", str(transcript)],
            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        assert proc.returncode == 0
        return usage.ru_maxrss, transcript.read_text()

    small, _ = peak_rss_kib("echo one line")
    big, transcript = peak_rss_kib("head -c 1500M /dev/zero; yes ribbit | head -c 500M")
    assert "lines cut" in transcript
    assert big - small < 256 * 1024, (small, big)  # KiB


# -- .git: never writable, never creatable -----------------------------------------------------------


ATTEMPTS_ON_A_MISSING_GIT = [
    "git init -q .",
    "mkdir .git",
    "printf 'gitdir: /var/tmp/x\\n' > .git",
    "git init -q /tmp/r && mv /tmp/r/.git .git",
    "git init -q /tmp/r2 && cp -r /tmp/r2/.git .git",
    "mkdir sub && ln -s sub .git",
    "mkdir -p sub && mv sub .git",
]


@pytest.mark.parametrize("mode", ["full-auto", "ask"])
def test_a_folder_that_is_not_a_repository_never_gets_a_git(tmp_path: Path, mode: str) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "main.py").write_text("print('hi')\n")
    turns = [xml_call("Bash", command=c) for c in ATTEMPTS_ON_A_MISSING_GIT]
    workspace, recorder, _ = session(
        folder, tmp_path, *turns, xml_call("Bash", command="ls -la .git"), "done", mode=mode,
        approver=ScriptedApprover(*[True] * 20),
    )
    outputs = tool_outputs(recorder)
    for attempt, output in zip(ATTEMPTS_ON_A_MISSING_GIT, outputs[: len(ATTEMPTS_ON_A_MISSING_GIT)], strict=True):
        assert "Exit code" in output, (attempt, output)
    # While a command runs, `.git` is at most an empty, read-only mount point.
    assert outputs[-1].startswith("ls:") or len(outputs[-1].splitlines()) == 3
    # Nothing is left: no .git (not even an empty one), and git finds no repository here.
    assert not os.path.lexists(folder / ".git")
    assert sorted(p.name for p in folder.iterdir()) == ["main.py", "sub"]
    check = subprocess.run(["git", "-C", str(folder), "rev-parse", "--git-dir"], capture_output=True, text=True,
                           env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)})
    assert check.returncode != 0


def test_an_existing_git_cannot_be_removed_replaced_or_reconfigured(repo: Path, tmp_path: Path) -> None:
    config = (repo / ".git" / "config").read_bytes()
    commands = [
        "rm -rf .git",
        "mv .git moved",
        "git config core.fsmonitor 'touch /var/tmp/ribbit-pwned'",
        "echo x > .git/hooks/pre-commit",
        "git commit -q --allow-empty -m x",
    ]
    workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
    assert all("Exit code" in o for o in tool_outputs(recorder))
    assert (repo / ".git" / "config").read_bytes() == config and not (repo / "moved").exists()
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert len(git(repo, "log", "--format=%H").split()) == 1


def test_a_git_file_pointing_inside_the_repository_protects_its_target(tmp_path: Path) -> None:
    root = tmp_path / "sep"
    subprocess.run(["git", "init", "-q", f"--separate-git-dir={root / '.realgit'}", str(root)], check=True)
    assert (root / ".git").is_file()
    config = (root / ".realgit" / "config").read_bytes()
    commands = ["echo '[core]\n\tfsmonitor = touch /var/tmp/ribbit-pwned' >> .realgit/config", "rm -rf .realgit"]
    session(root, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
    assert (root / ".realgit" / "config").read_bytes() == config


def test_a_left_over_mount_point_from_a_killed_ribbit_is_removed_and_nothing_else(tmp_path: Path) -> None:
    left = tmp_path / "left"
    (left / ".git").mkdir(parents=True, mode=GIT_MOUNT_POINT_MODE)
    os.chmod(left / ".git", GIT_MOUNT_POINT_MODE)
    BwrapRunner(left)
    assert not (left / ".git").exists()
    users = tmp_path / "users"
    (users / ".git").mkdir(parents=True)  # an empty .git the user made: not ribbit's marker mode
    BwrapRunner(users)
    assert (users / ".git").is_dir()
    assert stat.S_IMODE((users / ".git").stat().st_mode) != GIT_MOUNT_POINT_MODE


def test_a_command_still_running_when_ribbit_is_asked_to_stop_leaves_no_mount_point(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    runner = BwrapRunner(folder)
    cancel = threading.Event()
    timer = threading.Timer(1.0, cancel.set)
    timer.start()
    result = runner.run("sleep 60", folder, 120, cancel)
    timer.cancel()
    assert result.cancelled and not os.path.lexists(folder / ".git")


# -- a submodule's .git: replaced, the user's next `git status` would run the agent's program ---------


@pytest.mark.parametrize("initialised", [True, False])
def test_a_submodules_git_cannot_be_replaced_to_run_a_program_at_the_users_next_git_status(
    repo: Path, tmp_path: Path, initialised: bool,
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q"); (lib / "a").write_text("a\n"); git(lib, "add", "a")
    git(lib, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "a")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "lib")
    git(repo, "commit", "-qm", "submodule")
    if not initialised:
        shutil.rmtree(repo / "lib"); (repo / "lib").mkdir()
    with host_folder("ribbit-marker-") as markers:
        marker = markers / "PWNED"
        plant = (
            f"mkdir lib/evil && cp -r {repo}/.git/modules/lib/. lib/evil/ && git config -f lib/evil/config --unset core.worktree"
            f" && git config -f lib/evil/config core.fsmonitor 'touch {marker}; echo' && echo 'gitdir: evil' > lib/.git"
            if initialised else f"cd lib && git init -q && git config core.fsmonitor 'touch {marker}; echo'"
        )
        for command in (plant, f"mv lib lib2 && mkdir lib && cd lib && git init -q && git config core.fsmonitor 'touch {marker}; echo'"):
            session(repo, tmp_path, xml_call("Bash", command=command), "done")
            subprocess.run(["git", "status"], cwd=repo, capture_output=True)  # what the user does next
            assert not marker.exists()
            # Prevented, not cleaned up after: the submodule and its `.git` are where and what they were.
            assert not (repo / "lib2").exists() and (repo / "lib").is_dir()
            assert (repo / "lib" / ".git").read_text() == "gitdir: ../.git/modules/lib\n" if initialised \
                else not os.path.lexists(repo / "lib" / ".git")


def _submodule(repo: Path, tmp_path: Path, path: str, name: str = "lib") -> None:
    """A one-file repository added to `repo` as a submodule at `path`, committed."""
    source = tmp_path / f"source-{name}"
    if not source.exists():
        source.mkdir()
        git(source, "init", "-q"); (source / "a").write_text("a\n"); git(source, "add", "a")
        git(source, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "a")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), path)
    git(repo, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", f"submodule {path}")


def test_a_nested_submodule_and_the_folders_above_it_are_guarded_too(repo: Path, tmp_path: Path) -> None:
    """vendor/lib is a submodule holding its own submodule `inner`: moving `vendor` away (then making a
    new vendor/lib/.git) or replacing vendor/lib/inner/.git would plant a repository git enters."""
    _submodule(repo, tmp_path, "vendor/lib")
    _submodule(repo / "vendor" / "lib", tmp_path, "inner", name="inner")
    inner_git = repo / "vendor" / "lib" / "inner" / ".git"
    before = inner_git.read_bytes()
    with host_folder("ribbit-marker-") as markers:
        marker = markers / "PWNED"
        evil = f"git init -q evil && git -C evil config core.fsmonitor 'touch {marker}; echo'"
        commands = [
            f"{evil} && echo 'gitdir: ../../../evil/.git' > vendor/lib/inner/.git",
            f"mv vendor v2; mv vendor/lib/inner/.git y; rm -rf vendor/lib/inner; {evil}2 && mv evil2/.git vendor/lib/inner/.git",
        ]
        workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
        outputs = tool_outputs(recorder)
        subprocess.run(["git", "status"], cwd=repo, capture_output=True)
        subprocess.run(["git", "status"], cwd=repo / "vendor" / "lib", capture_output=True)
        assert not marker.exists()
    assert "Read-only file system" in outputs[0] and "Device or resource busy" in outputs[1]
    assert inner_git.read_bytes() == before and not (repo / "v2").exists()  # (mv copies a mount point it cannot move)


def test_a_submodule_folder_missing_at_the_start_gets_no_git_from_a_command(repo: Path, tmp_path: Path) -> None:
    """Nothing to mount when the folder is not there: the `.git` a command makes there is removed after it,
    and the model is told."""
    _submodule(repo, tmp_path, "lib")
    shutil.rmtree(repo / "lib")
    with host_folder("ribbit-marker-") as markers:
        marker = markers / "PWNED"
        commands = [
            f"mkdir lib && git init -q lib && git -C lib config core.fsmonitor 'touch {marker}; echo'",
            "ls -A lib; git init -q lib",  # the folder exists now: an empty read-only `.git` while it runs
        ]
        workspace, recorder, _ = session(repo, tmp_path, *[xml_call("Bash", command=c) for c in commands], "done")
        subprocess.run(["git", "status"], cwd=repo, capture_output=True)
        assert not marker.exists()
    outputs = tool_outputs(recorder)
    assert "Error: lib/.git belongs to a submodule" in outputs[0] and "removed it" in outputs[0]
    assert outputs[1].startswith(".git\n") and "Exit code" in outputs[1]
    assert (repo / "lib").is_dir() and not os.path.lexists(repo / "lib" / ".git")


# -- a repository the agent makes: the user's git-aware prompt would run its config on `cd` -----------


def test_a_repository_the_agent_made_is_named_at_the_end_of_the_task(repo: Path, tmp_path: Path) -> None:
    """`ribbit run`'s stderr and the notice channel the TUI shows name the agent's new repositories,
    not the user's own nested one, and only once."""
    (repo / "own").mkdir()
    git(repo / "own", "init", "-q")
    (repo / "own" / "f").write_text("f\n")
    plant = "git init -q deep/er/evil && git -C deep/er/evil config core.fsmonitor 'touch /var/tmp/x; echo'"
    replay = tmp_path / "r.jsonl"
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in (xml_call("Bash", command=plant), "done")))
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-m", "app.cli", "run", "x", "--repo", str(repo), "--model", f"replay:{replay}", "--mode", "full-auto"],
        capture_output=True, text=True, cwd=root, timeout=180,
    )
    assert run.returncode == 0, run.stderr
    named = [line for line in run.stderr.splitlines() if "made a git repository" in line]
    assert len(named) == 1 and named[0].startswith("ribbit: warning:") and "deep/er/evil/" in named[0]
    assert "own/" not in named[0]
    assert (repo / "deep" / "er" / "evil" / ".git" / "config").is_file()  # named, left for the user to judge

    # In a session (what the TUI's transcript shows): named after the task that made it, not again after the next.
    workspace, recorder, _ = session(repo, tmp_path, xml_call("Bash", command="git init -q two"), "done")
    notices = [e.text for e in recorder.of_type("notice") if "made a git repository" in e.text]  # type: ignore[attr-defined]
    assert notices == [notices[0]] and "two/" in notices[0] and "deep/er/evil" not in notices[0]
    workspace.session.run("again")
    assert len([e for e in recorder.of_type("notice") if "made a git repository" in e.text]) == 1  # type: ignore[attr-defined]
