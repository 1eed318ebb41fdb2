"""Saved sessions: every TUI and `ribbit run` session is kept on disk as it goes, so it can be resumed
(`ribbit -c`, `--resume ID`, `ribbit run --continue`) and rewound (`/rewind`) without re-reading it.

One folder per session, in ribbit's state folder (which the Bash sandbox hides, so the agent cannot
tamper with it), per repository:

    $XDG_STATE_HOME/ribbit/projects/<repo>-<hash>/sessions/<ID>/session.json   the conversation, task starts
                                                             /latest.state      the model after the last run
                                                             /task-<N>.state    the model at task N's start

`session.json` holds the conversations (one per compaction: a rewind may go back past one), the user's
prompts with where each started (conversation, message count, journal snapshot, saved model state),
and the model identity the states belong to. The `.state` files are models.saved_points (llama.cpp
state + what it covers); all of them, over every repository, stay within STATE_BUDGET bytes: the least
recently used go first (a session whose state was evicted is re-read once when resumed).

The store is the one listing of a repository's sessions: a session that is not saved (eval, review,
bench) still leaves `journaled.json` (its ID, root and start) in its folder when its journal takes a
start snapshot, so `ribbit undo --list` finds it. The journal is given the session's ID and keeps only
snapshots, so undo goes on where the session left off. Anything read back is
validated: a corrupt or foreign file gives a one-line SessionError, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from agent.core.events import AgentEvent, CompactionEvent, MessageEvent, SummaryEvent, UsageEvent
from agent.core.tools.readstate import SavedRead
from agent.paths import project_state, state_home
from models.base import ChatModel
from models.chat import ChatMessage
from models.text import one_line
from models.saved_points import META_SUFFIX, SavesPoints, meta_path, prune_points

# Saved model states of all sessions together. FrogNano's state is ~50 MB of recurrent state plus
# 32 KiB per token of KV cache: a 10K-token conversation is ~370 MB, so 4 GiB holds about ten of them.
STATE_BUDGET = 4 << 30
SESSION_FILE = "session.json"
JOURNALED_FILE = "journaled.json"  # a session the journal holds, saved or not
LATEST = "latest.state"
MAX_TASKS = 100  # rewind points kept per session (the oldest go first)
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PROMPT_PREVIEW = 72


class SessionError(Exception):
    """One line for the user: why a saved session cannot be listed, resumed or rewound."""


class TaskStart(BaseModel):
    """Where one of the user's prompts started: the rewind point."""

    prompt: str
    epoch: int  # which conversation (each compaction starts a new one)
    messages: int  # messages of that conversation before the prompt
    journal_index: int  # the journal snapshot the files were at
    state: str | None = None  # the saved model state at that point (a file in the session folder)
    at: float = 0.0


class SavedSession(BaseModel):
    version: Literal[1] = 1
    session_id: str
    root: str
    model: str  # the model's name, for the picker
    identity: str | None = None  # what the saved states belong to (None: a backend without states)
    created: float
    updated: float
    epochs: list[list[ChatMessage]]
    tasks: list[TaskStart] = []
    state: str | None = None  # the saved model state of the conversation's latest point
    steps: int = 0
    reads: dict[str, SavedRead] = {}  # files read (paths relative to root), for Write/Edit after a resume

    @property
    def messages(self) -> list[ChatMessage]:
        return self.epochs[-1]

    def title(self) -> str:
        first = self.tasks[0].prompt if self.tasks else "(no prompt yet)"
        return preview(first)


def preview(text: str, limit: int = PROMPT_PREVIEW) -> str:
    return one_line(text, limit)


def sessions_folder(root: Path) -> Path:
    return project_state(root) / "sessions"


def check_session_id(session_id: str) -> str:
    if not SESSION_ID.fullmatch(session_id):
        raise SessionError(f"{session_id[:40]!r} is not a session ID (ribbit --resume lists them)")
    return session_id


def read_session(folder: Path, root: Path) -> SavedSession:
    """The session saved in `folder`, checked to belong to `root`; SessionError (one line) otherwise."""
    path = folder / SESSION_FILE
    try:
        if path.is_symlink() or not path.is_file():
            raise SessionError(f"saved session {folder.name} is missing or not a file")
        raw = path.read_bytes()
    except OSError as exc:
        raise SessionError(f"cannot read saved session {folder.name}: {exc.strerror or exc}") from None
    try:
        record = SavedSession.model_validate(json.loads(raw))
    except (ValueError, ValidationError, RecursionError):
        raise SessionError(f"saved session {folder.name} is corrupt (not a session file ribbit wrote)") from None
    if record.session_id != folder.name or not SESSION_ID.fullmatch(record.session_id):
        raise SessionError(f"saved session {folder.name} is corrupt (its ID does not match its folder)")
    if Path(record.root) != root.resolve():
        raise SessionError(f"saved session {folder.name} belongs to another repository ({record.root})")
    if not record.epochs or not record.epochs[-1] or record.epochs[-1][0].role != "system":
        raise SessionError(f"saved session {folder.name} is corrupt (no conversation)")
    for task in record.tasks:
        if not 0 <= task.epoch < len(record.epochs) or not 1 <= task.messages <= len(record.epochs[task.epoch]):
            raise SessionError(f"saved session {folder.name} is corrupt (a task start points nowhere)")
    for name in [record.state, *(t.state for t in record.tasks)]:
        if name is not None and not re.fullmatch(r"[a-z0-9-]{1,40}\.state", name):
            raise SessionError(f"saved session {folder.name} is corrupt (a state file name)")
    return record


class JournaledSession(BaseModel):
    """The store's entry for every session whose journal took a start snapshot."""

    session_id: str
    root: str
    created: float


class SessionStore:
    """The sessions of one repository: the saved ones (resumable) and every journaled one (undoable)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.folder = sessions_folder(self.root)

    def note_journaled(self, session_id: str) -> None:
        """Record that the journal holds this session (so `ribbit undo` lists it); a full disk loses only
        the listing: `ribbit undo ID` still finds the journal by the ID."""
        entry = JournaledSession(session_id=check_session_id(session_id), root=str(self.root), created=time.time())
        folder = self.folder / session_id
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            temp = folder / f"{JOURNALED_FILE}.{os.getpid()}.tmp"
            temp.write_text(entry.model_dump_json())
            os.replace(temp, folder / JOURNALED_FILE)
        except OSError:
            pass

    def session_ids(self) -> list[str]:
        """Every session recorded for this repository, saved or only journaled (in no particular order)."""
        try:
            folders = [p for p in self.folder.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return []
        found = []
        for folder in folders:
            if not SESSION_ID.fullmatch(folder.name):
                continue
            if (folder / SESSION_FILE).is_file() or self._journaled_here(folder):
                found.append(folder.name)
        return found

    def _journaled_here(self, folder: Path) -> bool:
        path = folder / JOURNALED_FILE
        try:
            if path.is_symlink() or not path.is_file():
                return False
            entry = JournaledSession.model_validate_json(path.read_bytes())
        except (OSError, ValueError, ValidationError):
            return False
        return entry.session_id == folder.name and Path(entry.root) == self.root

    def list(self) -> list[SavedSession]:
        """Readable sessions, most recently updated first (unreadable ones are left out)."""
        found = []
        try:
            folders = [p for p in self.folder.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return []
        for folder in folders:
            try:
                found.append(read_session(folder, self.root))
            except SessionError:
                continue
        return sorted(found, key=lambda s: (s.updated, s.session_id), reverse=True)

    def latest(self) -> SavedSession:
        sessions = self.list()
        if not sessions:
            raise SessionError(f"no saved session in {self.root} to continue")
        return sessions[0]

    def load(self, session_id: str) -> SavedSession:
        folder = self.folder / check_session_id(session_id)
        if not folder.is_dir():
            known = ", ".join(s.session_id for s in self.list()[:3]) or "none"
            raise SessionError(f"no saved session {session_id} in {self.root} (recent: {known})")
        return read_session(folder, self.root)


class SessionRecorder:
    """Keeps one live session's record on disk: an event sink plus hooks the workspace calls."""

    def __init__(self, record: SavedSession, folder: Path, model: ChatModel, budget: int = STATE_BUDGET) -> None:
        self.record = record
        self.folder = folder
        self.model = model
        self.budget = budget
        self.messages: list[ChatMessage] | None = None  # the live session's list (AgentSession.messages)
        self.journal_index = lambda: 0
        self.reads: Callable[[], dict[str, SavedRead]] = dict  # the live session's read record (Workspace)
        self._lock = threading.RLock()
        self._latest_fresh = False  # latest.state holds the model's current point

    @classmethod
    def start(cls, root: Path, session_id: str, model: ChatModel) -> SessionRecorder:
        """A new session's record (its conversation follows once attach() is called)."""
        now = time.time()
        record = SavedSession(
            session_id=check_session_id(session_id), root=str(root.resolve()), model=model.info.name,
            identity=model.state_identity() if isinstance(model, SavesPoints) else None,
            created=now, updated=now, epochs=[[]],
        )
        return cls(record, sessions_folder(root) / session_id, model)

    @classmethod
    def resume(cls, record: SavedSession, model: ChatModel) -> SessionRecorder:
        """Go on recording a saved session (its states stay valid only for the model they came from)."""
        recorder = cls(record.model_copy(deep=True), sessions_folder(Path(record.root)) / record.session_id, model)
        identity = model.state_identity() if isinstance(model, SavesPoints) else None
        if identity != record.identity:
            recorder.use_model(model)
        return recorder

    # -- hooks ----------------------------------------------------------------------------------

    def attach(self, messages: list[ChatMessage]) -> None:
        """Follow the live session's conversation (AgentSession.messages) from now on."""
        with self._lock:
            self.messages = messages
            self._sync()
            self.write()

    def use_model(self, model: ChatModel) -> None:
        """`/model`: states saved from now on belong to this model; the old ones no longer apply."""
        with self._lock:
            self.model = model
            self.record.model = model.info.name
            self.record.identity = model.state_identity() if isinstance(model, SavesPoints) else None
            self.record.state = None
            for task in self.record.tasks:
                task.state = None
            self._latest_fresh = False
            self.write()

    def before_task(self, prompt: str) -> None:
        """A prompt is about to join the conversation: remember where, with the model's state there."""
        with self._lock:
            self._sync()
            index = len(self.record.tasks)
            name = f"task-{index}.state"
            state = self._save_state(name)
            self.record.tasks.append(TaskStart(
                prompt=prompt, epoch=len(self.record.epochs) - 1, messages=len(self.record.messages),
                journal_index=self.journal_index(), state=state, at=time.time(),
            ))
            self._drop_old_tasks()
            self.write()

    def __call__(self, event: AgentEvent) -> None:
        """The session's events: the record follows the conversation; a run's end saves the model."""
        if self.messages is None:
            return  # not attached yet (the system prompt, while the session is being built)
        with self._lock:
            if isinstance(event, MessageEvent):
                self._sync()
                if event.message.role != "user":
                    self.write()
            elif isinstance(event, UsageEvent):
                self._latest_fresh = False
                self.record.steps += 1
            elif isinstance(event, CompactionEvent):
                self._sync()  # a new conversation: the old one stays, for rewinds past the compaction
                self.write()
            elif isinstance(event, SummaryEvent):
                self._sync()
                self.record.state = self._save_state(LATEST) if not self._latest_fresh else self.record.state
                self.write()

    # -- rewind ---------------------------------------------------------------------------------

    def rewind(self, index: int) -> TaskStart:
        """Forget task `index` and everything after it; returns where it started."""
        with self._lock:
            task = self.record.tasks[index]
            self.record.epochs = self.record.epochs[: task.epoch + 1]
            self.record.epochs[-1] = self.record.epochs[-1][: task.messages]
            self.record.tasks = self.record.tasks[:index]
            self.record.state = task.state
            self._latest_fresh = False
            self.write()
            return task

    # -- disk -----------------------------------------------------------------------------------

    def state_path(self, name: str) -> Path:
        return self.folder / name

    def write(self) -> None:
        """session.json, atomically; a full disk costs the saved session, never the live one."""
        self.record.updated = time.time()
        self.record.reads = self.reads()
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            temp = self.folder / f"{SESSION_FILE}.{os.getpid()}.tmp"
            temp.write_text(self.record.model_dump_json())
            os.replace(temp, self.folder / SESSION_FILE)
        except OSError:
            pass

    def _sync(self) -> None:
        """Follow the live conversation: it grew (the same conversation), or it was replaced (a compaction,
        `/clear`): then it is a new one, and the old one is kept for the rewind points in it."""
        if self.messages is None:
            return
        live, current = self.messages, self.record.epochs[-1]
        if not current or live[: len(current)] == current:
            self.record.epochs[-1] = list(live)
        else:
            self.record.epochs.append(list(live))

    def _save_state(self, name: str) -> str | None:
        """Save the model's current point as `name` (sharing latest.state's file when that is current)."""
        if not isinstance(self.model, SavesPoints) or self.messages is None:
            return None
        target = self.state_path(name)
        latest = self.state_path(LATEST)
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self._latest_fresh and name != LATEST and latest.is_file():
                for suffix_src, suffix_dst in ((latest, target), (meta_path(latest), meta_path(target))):
                    suffix_dst.unlink(missing_ok=True)
                    os.link(suffix_src, suffix_dst, follow_symlinks=False)
                return name
        except OSError:
            pass
        if not self.model.save_point(target):
            return None
        if name == LATEST:
            self._latest_fresh = True
        prune_points(state_home() / "projects", self.budget, keep=[target])
        return name

    def _drop_old_tasks(self) -> None:
        excess = len(self.record.tasks) - MAX_TASKS
        if excess <= 0:
            return
        for task in self.record.tasks[:excess]:
            if task.state:
                for path in (self.state_path(task.state), self.state_path(task.state).with_suffix(META_SUFFIX)):
                    path.unlink(missing_ok=True)
        del self.record.tasks[:excess]
