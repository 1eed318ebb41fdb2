"""Resume and rewind a saved session (agent.session.store) on a live one, without re-reading it.

- Resume: the saved conversation comes back; with the same model (identity: file and the settings that
  change its state) its saved state is loaded, so nothing of the old conversation is evaluated again; with
  another model, or when the state was evicted, the next turn reads the conversation once (with progress).
- Rewind: back to before one of the user's prompts: the files from the journal (refused, with nothing
  restored, where the journal refuses: someone else's later work), the conversation from the state saved
  at that prompt. A model that keeps state (llama.cpp) never re-reads a conversation for it: without a
  saved state for that point the conversation part is refused and the files can still go back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core.events import NoticeEvent
from agent.undo.journal import Journal
from agent.session.store import SavedSession, SessionError, SessionRecorder, TaskStart, preview
from models.chat import ChatMessage
from models.saved_points import SavesPoints, read_meta

if TYPE_CHECKING:
    from agent.core.loop import AgentSession


class SessionResume:
    """The saved-session operations of one live session (held by the Workspace)."""

    def __init__(self, session: AgentSession, journal: Journal, recorder: SessionRecorder) -> None:
        self.session = session
        self.journal = journal
        self.recorder = recorder

    @property
    def session_id(self) -> str:
        return self.recorder.record.session_id

    def prompts(self) -> list[str]:
        return [task.prompt for task in self.recorder.record.tasks]

    # -- resume ---------------------------------------------------------------------------------

    def restore(self, record: SavedSession) -> None:
        """Put the saved conversation into the fresh session, and the model state where it can."""
        s = self.session
        messages = [m.model_copy() for m in record.messages]
        model = s.model
        same_model = isinstance(model, SavesPoints) and record.identity == model.state_identity()
        if not same_model:
            messages[0] = s.messages[0]  # this model's own system prompt (its dialect, its tools)
        s.messages[:] = messages
        s.total_steps = max(s.total_steps, record.steps)  # new tool-call ids stay unique
        done = f"resumed session {record.session_id} ({len(record.tasks)} prompts, {len(messages)} messages)"
        reason = self._load_state(record.state, messages) if same_model else "it was saved with another model"
        if reason is None:
            s.sink(NoticeEvent(level="info", text=done + ": the model's saved state is restored, nothing is read again"))
        elif isinstance(model, SavesPoints):
            s.sink(NoticeEvent(level="info", text=done + f": the conversation is read again once, before the next turn ({reason})"))
        else:
            s.sink(NoticeEvent(level="info", text=done))

    def _load_state(self, name: str | None, messages: list[ChatMessage]) -> str | None:
        model = self.session.model
        if not isinstance(model, SavesPoints):
            return "this model keeps no state"
        if name is None:
            return "no model state was saved"
        return model.load_point(self.recorder.state_path(name), messages)

    # -- rewind ---------------------------------------------------------------------------------

    def rewind(self, index: int, *, files: bool = True, conversation: bool = True) -> str:
        """Back to before prompt `index`. Returns one line; raises SessionError / JournalError (one line)
        where it refuses, having changed nothing."""
        tasks = self.recorder.record.tasks
        if not 0 <= index < len(tasks):
            raise SessionError(f"there is no prompt {index + 1} to rewind to (this session has {len(tasks)})")
        if not files and not conversation:
            raise SessionError("nothing to rewind: choose the files, the conversation, or both")
        task = tasks[index]
        if conversation:
            problem = self._conversation_problem(task)
            if problem:
                raise SessionError(f"cannot rewind the conversation: {problem}; the files alone can go back")
        done = []
        if files:
            result = self.journal.rewind_to(task.journal_index)  # JournalError: nothing restored
            done.append(result.summary() if result.undone != "nothing" else "files: nothing to put back")
        if conversation:
            done.append(self._rewind_conversation(index, task))
        return "; ".join(done)

    def _conversation_problem(self, task: TaskStart) -> str | None:
        """Why the conversation cannot go back to `task` without a re-read (None: it can)."""
        model = self.session.model
        messages = self.recorder.record.epochs[task.epoch][: task.messages]
        if not isinstance(model, SavesPoints) or len(messages) <= 1:
            return None  # a stateless backend, or the bare system prompt (its saved state is restored)
        if task.state is None:
            return "no model state was saved at that prompt"
        meta = read_meta(self.recorder.state_path(task.state))
        if isinstance(meta, str):
            return meta
        if meta.identity != model.state_identity():
            return "its state was saved with another model"
        return None

    def _rewind_conversation(self, index: int, task: TaskStart) -> str:
        s = self.session
        messages = [m.model_copy() for m in self.recorder.record.epochs[task.epoch][: task.messages]]
        self.recorder.rewind(index)
        s.messages[:] = messages
        s.forget_recent_calls()
        line = f"conversation back to before prompt {index + 1} ({preview(task.prompt, 40)})"
        if len(messages) > 1 and task.state is not None:
            reason = self._load_state(task.state, messages)
            if reason is not None:  # checked just before; a file that changed since: say so
                return line + f", read again at the next turn ({reason})"
        return line
