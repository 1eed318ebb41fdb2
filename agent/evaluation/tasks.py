"""Task files cross a boundary, so they are pydantic models; every problem is a one-line TaskFileError.

Accepted forms (TASKS on the command line):
- a task folder: `task.json` (+ usually `repo/` with the files and `hidden/` with the hidden tests);
- a folder of task folders (the starter set);
- a `.jsonl` file: one task per line, either ribbit tasks or SWE-bench instances
  (`instance_id`, `repo`, `base_commit`, `problem_statement`, `FAIL_TO_PASS`, `PASS_TO_PASS`, `test_patch`);
- a `.json` file holding one task or a list of tasks.
Relative paths inside a task file are relative to the file's folder.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.paths import unsuitable_folder

TASK_FILE = "task.json"
DEFAULT_TIME_LIMIT_S = 1800.0
# For SWE-bench instances, which carry no test command: run pytest on the files the test patch touches.
SWEBENCH_TEST_COMMAND = "python -m pytest -rA -p no:cacheprovider {test_files}"
TASK_REPO_ADVICE = "a task's repository must be a project's own folder (or a git bundle)"


class TaskFileError(Exception):
    """A task file that cannot be used; the message is one line for the user."""


class EvalTask(BaseModel):
    """One task: a repository at a base commit, a problem statement, and the tests that decide it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$", max_length=200)
    # A git repository (folder), a git bundle file, or a plain folder of files (made into a git repo).
    repo: Path
    # None: the repository's HEAD (for a plain folder, the fixed commit the runner makes from it).
    base_commit: str | None = None
    problem_statement: str = Field(min_length=1)
    test_commands: list[str] = Field(min_length=1)
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    # Hidden tests, applied to the clean worktree after the model's patch: a unified diff...
    test_patch: str = ""
    # ...and/or a folder whose files are copied over the worktree.
    hidden_tests: Path | None = None
    time_limit_s: float | None = Field(default=None, gt=0)
    # Where the task came from (file and line), for error messages.
    source: str = ""

    @field_validator("test_commands")
    @classmethod
    def _commands_not_blank(cls, value: list[str]) -> list[str]:
        if any(not c.strip() for c in value):
            raise ValueError("a test command is empty")
        return value

    def test_patch_files(self) -> list[str]:
        return patch_files(self.test_patch)

    def named_test_files(self) -> list[str]:
        """Files that hold the named tests (pytest node ids name theirs)."""
        return test_files_of([*self.fail_to_pass, *self.pass_to_pass])


def test_file_of(name: str) -> str | None:
    """The file a pytest node id names (`tests/test_x.py::T::test_y[p]` -> `tests/test_x.py`), else None."""
    path, sep, _ = name.partition("::")
    return path if sep and path.endswith(".py") else None


def test_files_of(names: Sequence[str]) -> list[str]:
    files: list[str] = []
    for name in names:
        path = test_file_of(name)
        if path and path not in files:
            files.append(path)
    return files


def patch_files(patch: str) -> list[str]:
    """Paths a unified diff touches: both sides of a rename, the old side of a deletion.

    Read from each file's `---` / `+++` / `rename` header lines (names with spaces, git's quoted names),
    falling back to the `diff --git` line for binary and mode-only changes.
    """
    files: list[str] = []

    def add(name: str | None) -> None:
        if name and name not in files:
            files.append(name)

    for block in re.split(r"^(?=diff --git )", patch, flags=re.MULTILINE):
        if not block.startswith("diff --git "):
            continue
        header = block.split("\n@@", 1)[0]
        renamed = [_unquote(m) for m in re.findall(r"^rename (?:from|to) (.+)$", header, flags=re.MULTILINE)]
        sides = [
            _unquote(m.group(2)) for m in re.finditer(r"^(---|\+\+\+) (?!/dev/null$)(.+)$", header, flags=re.MULTILINE)
        ]
        sides = [n for n in sides if n != "/dev/null"]
        names = renamed or [_strip_side(n) for n in sides] or _git_line_names(block.split("\n", 1)[0])
        for name in names:
            add(name)
    return files


def _strip_side(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _git_line_names(line: str) -> list[str]:
    """`diff --git a/P b/P` -> [P] (the two halves are the same path when nothing is renamed)."""
    rest = line[len("diff --git ") :].rstrip("\r")
    if rest.startswith('"'):
        quoted = re.findall(r'"(?:[^"\\]|\\.)*"', rest)
        return [_strip_side(_unquote(q)) for q in quoted[:1]]
    half = (len(rest) - 1) // 2
    first, second = rest[:half], rest[half + 1 :]
    if first.startswith("a/") and second.startswith("b/") and first[2:] == second[2:]:
        return [first[2:]]
    return []


def _unquote(name: str) -> str:
    """git's C-style quoted path (`"a/\\303\\251.py"`) as text; unquoted names as they are."""
    name = name.rstrip("\r").split("\t", 1)[0]
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    try:
        raw = ast.literal_eval("b" + name)
    except (ValueError, SyntaxError):
        return name
    return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else name


def load_tasks(target: Path, *, repos_dir: Path | None = None, test_command: str | None = None) -> list[EvalTask]:
    """All tasks under `target`, ids unique, in a stable order."""
    target = target.expanduser()
    if not target.exists():
        raise TaskFileError(f"{target} does not exist")
    if target.is_dir():
        if (target / TASK_FILE).is_file():
            tasks = [load_task_folder(target)]
        else:
            folders = sorted(p for p in target.iterdir() if (p / TASK_FILE).is_file())
            jsonl = sorted(target.glob("*.jsonl"))
            if not folders and not jsonl:
                raise TaskFileError(f"{target} holds no tasks (no */{TASK_FILE} and no *.jsonl)")
            tasks = [load_task_folder(p) for p in folders]
            for path in jsonl:
                tasks += load_jsonl(path, repos_dir=repos_dir, test_command=test_command)
    elif target.suffix == ".jsonl":
        tasks = load_jsonl(target, repos_dir=repos_dir, test_command=test_command)
    elif target.suffix == ".json":
        data = _read_json(target)
        items = data if isinstance(data, list) else [data]
        tasks = [
            _task_from_record(item, target.parent, f"{target}[{i}]", repos_dir, test_command)
            for i, item in enumerate(items)
        ]
    else:
        raise TaskFileError(f"{target}: expected a task folder, a .jsonl or a .json file")
    seen: dict[str, str] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskFileError(f"task id {task.id!r} appears twice ({seen[task.id]} and {task.source})")
        seen[task.id] = task.source
    if not tasks:
        raise TaskFileError(f"{target} holds no tasks")
    return tasks


def load_task_folder(folder: Path) -> EvalTask:
    path = folder / TASK_FILE
    data = _read_json(path)
    if not isinstance(data, dict):
        raise TaskFileError(f"{path}: expected a JSON object")
    data = dict(data)
    data.setdefault("id", folder.name)
    if "repo" not in data and (folder / "repo").is_dir():
        data["repo"] = "repo"
    if "hidden_tests" not in data and (folder / "hidden").is_dir():
        data["hidden_tests"] = "hidden"
    return _task_from_record(data, folder, str(path), None, None)


def load_jsonl(path: Path, *, repos_dir: Path | None = None, test_command: str | None = None) -> list[EvalTask]:
    tasks = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFileError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        tasks.append(_task_from_record(record, path.parent, f"{path}:{number}", repos_dir, test_command))
    return tasks


def _task_from_record(
    record: Any, base: Path, where: str, repos_dir: Path | None, test_command: str | None
) -> EvalTask:
    if not isinstance(record, dict):
        raise TaskFileError(f"{where}: expected a JSON object")
    if "instance_id" in record:
        record = swebench_record(record, where, repos_dir or base, test_command)
    else:
        record = dict(record)
        if test_command and "test_commands" not in record:
            record["test_commands"] = [test_command]
    for key in ("repo", "hidden_tests"):
        if isinstance(record.get(key), str):
            record[key] = _resolve(base, record[key])
    record["source"] = where
    try:
        task = EvalTask.model_validate(record)
    except ValidationError as exc:
        raise TaskFileError(f"{where}: {_first_problem(exc)}") from None
    if not task.repo.exists():
        raise TaskFileError(f"{where}: task {task.id}: repository {task.repo} does not exist")
    if task.repo.is_dir() and (why := unsuitable_folder(task.repo, advice=TASK_REPO_ADVICE)):
        # Its files are committed into the agent's worktree: a home folder's keys would be the model's to read.
        raise TaskFileError(f"{where}: task {task.id}: {why}")
    if task.hidden_tests is not None and not task.hidden_tests.is_dir():
        raise TaskFileError(f"{where}: task {task.id}: hidden tests folder {task.hidden_tests} does not exist")
    return task


def swebench_record(record: dict[str, Any], where: str, repos_dir: Path, test_command: str | None) -> dict[str, Any]:
    """A SWE-bench instance as a ribbit task; the repository must be available locally.

    `repo` ("owner/name") is looked up in `repos_dir` as owner__name, name or owner/name
    (a git repository, or a .bundle file with one of those names).
    """
    missing = [k for k in ("instance_id", "repo", "base_commit", "problem_statement") if not record.get(k)]
    if missing:
        raise TaskFileError(f"{where}: SWE-bench instance lacks {', '.join(missing)}")
    name = str(record["repo"])
    repo = find_local_repo(repos_dir, name)
    if repo is None:
        raise TaskFileError(
            f"{where}: repository {name} is not available locally "
            f"(looked in {repos_dir} for {name.replace('/', '__')}, {name.split('/')[-1]} and {name}; see --repos)"
        )
    test_patch = str(record.get("test_patch") or "")
    fail_to_pass = _test_list(record.get("FAIL_TO_PASS"), where, "FAIL_TO_PASS")
    pass_to_pass = _test_list(record.get("PASS_TO_PASS"), where, "PASS_TO_PASS")
    command = test_command or SWEBENCH_TEST_COMMAND
    # The files the test patch touches and the files holding named tests: PASS_TO_PASS tests often live
    # in files the test patch never touches, and they must run too.
    files = [*patch_files(test_patch)]
    files += [f for f in test_files_of([*fail_to_pass, *pass_to_pass]) if f not in files]
    commands = record.get("test_commands") or [
        command.replace("{test_files}", " ".join(shlex.quote(f) for f in files)).strip()
    ]
    return {
        "id": record["instance_id"],
        "repo": str(repo),
        "base_commit": record["base_commit"],
        "problem_statement": record["problem_statement"],
        "test_commands": commands,
        "fail_to_pass": fail_to_pass,
        "pass_to_pass": pass_to_pass,
        "test_patch": test_patch,
    }


def find_local_repo(repos_dir: Path, name: str) -> Path | None:
    owner, _, short = name.rpartition("/")
    stems = [name.replace("/", "__"), short, name] if owner else [name]
    for stem in stems:
        for candidate in (repos_dir / stem, repos_dir / f"{stem}.bundle", repos_dir / f"{stem}.git"):
            if candidate.exists():
                return candidate
    return None


def _test_list(value: Any, where: str, key: str) -> list[str]:
    """SWE-bench stores FAIL_TO_PASS / PASS_TO_PASS as a JSON string of a list, or as a list."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise TaskFileError(f"{where}: {key} is not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskFileError(f"{where}: {key} must be a list of test names")
    return value


def _resolve(base: Path, text: str) -> str:
    path = Path(text).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TaskFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TaskFileError(f"{path}: not UTF-8 text") from None
    except ValueError as exc:
        raise TaskFileError(f"{path}: not valid JSON ({exc})") from None


def _first_problem(exc: ValidationError) -> str:
    errors = exc.errors()
    err = errors[0]
    where = ".".join(str(p) for p in err["loc"]) or "task"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}: {err['msg']}{more}"


def select(tasks: Sequence[EvalTask], ids: Sequence[str]) -> list[EvalTask]:
    """Only the tasks named in `ids` (for --task); unknown names are an error."""
    if not ids:
        return list(tasks)
    known = {t.id for t in tasks}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise TaskFileError(f"no task named {', '.join(unknown)}")
    return [t for t in tasks if t.id in set(ids)]
