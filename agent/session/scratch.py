"""A scratch project for `ribbit tour`: files written into a new folder and committed to a new git repository,
as a user's own project would be (ribbit's git runs through agent.git, like every git command)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from agent.git import GitError, run_git

_IDENTITY = {"GIT_AUTHOR_NAME": "ribbit tour", "GIT_AUTHOR_EMAIL": "tour@ribbit.invalid",
             "GIT_COMMITTER_NAME": "ribbit tour", "GIT_COMMITTER_EMAIL": "tour@ribbit.invalid"}


class ScratchError(Exception):
    pass


def make_scratch_project(folder: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) into `folder` (new, or empty) and commit them on `main`.
    ScratchError (one line) where the folder is in use or git fails; returns the folder, resolved."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ScratchError(f"{folder} exists and is not an empty folder; name a new one")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            relative = PurePosixPath(name)
            if relative.is_absolute() or ".." in relative.parts:
                raise ScratchError(f"the tour's project names an unsafe path: {name!r}")
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        root = folder.resolve()
        run_git(["init", "-q", "-b", "main", "--template=", str(root)], cwd=root)
        run_git(["add", "-A"], cwd=root, work_tree=root)
        run_git(["commit", "-q", "-m", "the tour's starting point"], cwd=root, work_tree=root, env=_IDENTITY)
    except OSError as exc:
        raise ScratchError(f"cannot write the tour's project into {folder}: {exc.strerror or exc}") from None
    except GitError as exc:
        raise ScratchError(str(exc)) from None
    return root
