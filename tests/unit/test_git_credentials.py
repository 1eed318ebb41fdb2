"""The masked copy of a git config file: what git reads back from it, and what is masked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent.sandbox.credentials import mask_text, mask_value, parse_config, render_config

TRICKY = [
    ("core.bare", "false"),
    ("core.editor", None),  # a key with no value (true)
    ("user.name", 'A "quoted" \\ name'),
    ("user.note", "tab\there; semi # hash"),
    ("user.multi", "line one\nline two"),
    ("user.spaced", "  both ends  "),
    ("user.empty", ""),
    ('branch.we"ird\\name.x.remote', "origin"),
    ("url.https://tok:pw@example.com/.insteadof", "https://example.com/"),
    ("remote.origin.url", "https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r.git"),
    ("remote.origin.url", "ssh://git@example.com/o/r.git"),
    ("http.https://x.example/.extraheader", "Authorization: Bearer sekret-value"),
    ("credential.helper", "store --file ~/.my-creds"),
    ("credential.helper", "cache"),
    ("credential.https://example.com.username", "alice"),
    ("sendemail.smtppass", "hunter2"),
    ("hub.oauthtoken", "abcdef"),
    ("remote.api.url", "https://example.com/r.git?private_token=abc123&ref=main"),
]


def git_list(path: Path) -> list[tuple[str, str | None]]:
    out = subprocess.run(["git", "config", "--file", str(path), "--list", "--null"], capture_output=True, check=True).stdout
    entries: list[tuple[str, str | None]] = []
    for record in out.decode().split("\0")[:-1]:
        key, newline, value = record.partition("\n")
        entries.append((key, value if newline else None))
    return entries


def write_config(path: Path, entries: list[tuple[str, str | None]]) -> None:
    path.write_text("")
    for key, value in entries:
        if value is None:
            section, _, name = key.rpartition(".")
            with path.open("a") as handle:
                handle.write(f"[{section}]\n\t{name}\n")
        else:
            subprocess.run(["git", "config", "--file", str(path), "--add", key, value], check=True)


def test_git_reads_back_every_value_of_the_copy_masked(tmp_path: Path) -> None:
    real = tmp_path / "config"
    write_config(real, TRICKY)
    parsed = parse_config(real, tmp_path)
    assert parsed.entries == git_list(real)
    copy = tmp_path / "copy"
    copy.write_text(render_config(parsed.entries, "config"))
    back = git_list(copy)
    expected = [(mask_text(k), None if v is None else mask_value(k, v)) for k, v in git_list(real)]
    assert back == expected
    text = copy.read_text()
    for secret in ("tok:pw", "ghp_", "sekret-value", "hunter2", "abcdef", "abc123", "my-creds"):
        assert secret not in text
    shown = dict(back)
    assert shown["user.multi"] == "line one\nline two" and shown["user.spaced"] == "  both ends  "
    assert shown["http.https://x.example/.extraheader"] == "Authorization: ***"
    assert shown["credential.helper"] == "cache"  # the last one; a plain helper name stays
    assert shown["credential.https://example.com.username"] == "alice"
    assert ("remote.origin.url", "ssh://git@example.com/o/r.git") in back  # an ssh user name is no secret
    assert ("url.https://***@example.com/.insteadof", "https://example.com/") in back
    assert shown["remote.api.url"] == "https://example.com/r.git?private_token=***&ref=main"
    assert parsed.stores == [tmp_path / ".my-creds"]


def test_includes_are_followed_where_git_follows_them(tmp_path: Path) -> None:
    real = tmp_path / "dir" / "config"
    real.parent.mkdir()
    real.write_text('[include]\n\tpath = extra.inc\n\tpath = ~/home.inc\n[includeIf "gitdir:/x/"]\n\tpath = /abs/y.inc\n')
    assert parse_config(real, tmp_path / "home").includes == [
        tmp_path / "dir" / "extra.inc", tmp_path / "home" / "home.inc", Path("/abs/y.inc"),
    ]


def test_a_file_git_cannot_parse_is_shown_empty(tmp_path: Path) -> None:
    real = tmp_path / "config"
    real.write_text("[remote \"origin\"\n\turl = https://user:pw@host/r\n")
    parsed = parse_config(real, tmp_path)
    assert parsed.entries is None
    copy = tmp_path / "copy"
    copy.write_text(render_config(None, "config"))
    assert git_list(copy) == [] and "pw" not in copy.read_text()


@pytest.mark.parametrize(("text", "masked"), [
    ("fetch from https://user:pw@host/x", "fetch from https://***@host/x"),
    ("https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com", "https://***@github.com"),
    ("token glpat-abcdefghijklmnopqrstuv here", "token *** here"),
    ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ("ssh://deploy@host/r", "ssh://deploy@host/r"),
    ("ssh://deploy:pw@host/r", "ssh://***@host/r"),
])
def test_mask_text(text: str, masked: str) -> None:
    assert mask_text(text) == masked
