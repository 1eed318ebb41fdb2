"""Who decides: the mode's policy says whether to ask; an Approver (TUI or stdin) answers."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from agent.diffs import Hunk
from agent.core.events import AgentEvent, ApprovalEvent, ModeChanged, NoticeEvent
from agent.sandbox.runner import Access

Mode = Literal["ask", "auto-edit", "full-auto", "review", "plan"]
MODES: tuple[Mode, ...] = ("ask", "auto-edit", "full-auto", "review", "plan")

# Plan mode: the agent explores and ends with a plan; nothing in the checkout may change (which tools it
# refuses is each tool's `allowed_in_plan_mode`, agent.core.tools.base.Tool).
PLAN_REFUSAL = (
    "{tool} is not available in plan mode: nothing may change in the repository. Keep exploring with "
    "{explore}, then end your turn with the plan (the files to change and how), without calling a tool."
)
PLAN_EXPLORE = {True: "Read, Glob and read-only Bash", False: "Read and Glob"}  # by: is there a sandbox
# Plan mode runs every command read-only, which only the sandbox can enforce (ApprovalPolicy.plan_bash).
PLAN_NO_SANDBOX_REFUSAL = (
    "Bash is not available in plan mode without a sandbox: nothing could keep a command from changing the "
    "repository. Keep exploring with Read and Glob, then end your turn with the plan, without calling a tool."
)
# What the model is told after the line saying another session holds the checkout.
HELD_ADVICE = ". Nothing was changed; tell the user, and go on only with reading."
# Added to each task sent in plan mode (not to the system prompt, so saved system-prompt states are shared).
PLAN_TASK_NOTE = (
    "Note: plan mode. Do not change anything: Write and Edit are refused and Bash runs with the repository "
    "read-only and no network. Explore with Read, Glob and Bash as needed, then end with a plan: a short "
    "numbered list of steps naming the files to change and what to change in each, and how to check the "
    "result. Do not call a tool in your final answer."
)
PLAN_TASK_NOTE_NO_SANDBOX = PLAN_TASK_NOTE.replace(
    "and Bash runs with the repository read-only and no network. Explore with Read, Glob and Bash as needed",
    "and so is Bash (there is no sandbox to keep a command read-only). Explore with Read and Glob",
)


class EditApprovalRequest(BaseModel):
    kind: Literal["edit"] = "edit"
    tool_call_id: str
    tool: str
    path: str
    is_new_file: bool
    diff: str
    hunks: list[Hunk]
    # Why the file holds code that runs later on the user's machine (agent.undo.runs_later), or None.
    runs_later: str | None = None


class BashApprovalRequest(BaseModel):
    kind: Literal["bash"] = "bash"
    tool_call_id: str
    command: str
    cwd: str
    sandboxed: bool
    description: str | None = None
    # What the command gets if approved: the repository writable (and, when sandboxed, nothing else).
    access: Access = "read-write"
    # True when the command ran read-only without asking and failed trying to write: the question
    # is whether to run it again with write access.
    tried_to_write: bool = False

    def where(self) -> str:
        """One line on what approving means, for any approver that prints the request."""
        if not self.sandboxed:
            return "NOT sandboxed: it can change anything you can"
        text = "sandboxed: the repository writable (not .git), no network"
        if self.tried_to_write:
            return "it tried to write when run read-only; run it again " + text.removeprefix("sandboxed: ")
        return text


class PatchHunkApprovalRequest(BaseModel):
    """Review mode: one hunk of the agent's finished patch, to apply to the live checkout or not.

    `tool`, `path` and `diff` have the same meaning as on an edit request, so an approver that
    shows those works unchanged; `kind` tells them apart.
    """

    kind: Literal["patch_hunk"] = "patch_hunk"
    tool_call_id: str = ""
    tool: str = "Review"
    path: str
    status: Literal["added", "modified", "deleted"]
    binary: bool = False
    hunk_index: int  # 0-based, within the file
    hunk_count: int
    diff: str


ApprovalRequest = EditApprovalRequest | BashApprovalRequest | PatchHunkApprovalRequest


class ApprovalDecision(BaseModel):
    approved: bool
    reason: str | None = None
    # For edits: indices of the hunks to apply; None means all of them.
    hunks: list[int] | None = None
    # "session": approve this and all further edits (switch to auto-edit);
    # "prefix": always allow this command's prefix in this repo.
    remember: Literal["session", "prefix"] | None = None


class Approver(Protocol):
    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Block until the user decides. Called from the agent's thread."""
        ...


class RejectAll:
    """Answers no to everything: the safe default when nobody can be asked."""

    def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        return ApprovalDecision(approved=False, reason="no one was available to approve")


# Commands that run without a question in ask/auto-edit when the sandbox is on, with the repository
# read-only: the list is about what is worth not asking for, the sandbox about what cannot write.
DEFAULT_ALLOW = (
    "ls", "pwd", "cat", "head", "tail", "wc", "grep", "rg", "find", "tree", "file", "stat", "echo",
    "git status", "git diff", "git log", "git show", "git branch", "python --version", "which",
)
# Anything that chains, redirects or substitutes could smuggle another command past a prefix.
_SHELL_META = re.compile(r"[;&|<>`$(){}\n\\]")


# 'Always allow' remembers the narrowest prefix that still names the program and what it does: `python3 -m
# pytest`, `npm run test`, `git diff`, `cargo test` (not `python3 -m`, which would be every module).
INTERPRETERS = re.compile(r"(python|pypy)[0-9.]*|node|ruby|perl|php|bash|sh|zsh|dash")
# Programs that run another command given after them: the prefix goes on with that command's own.
RUNNERS = {"uv": "run", "poetry": "run", "pipenv": "run", "pdm": "run", "hatch": "run", "conda": "run",
           "pnpm": "exec", "bundle": "exec", "npx": "", "bunx": "", "pipx": "run"}
SCRIPT_RUNNERS = frozenset({"npm", "yarn", "pnpm", "bun"})  # `npm run test`: the script's name is the point
NESTED = {("uv", "pip"), ("docker", "compose"), ("go", "mod"), ("git", "stash"), ("git", "remote"),
          ("git", "submodule"), ("git", "worktree"), ("python", "pip")}
# Programs known to take a subcommand: an option before it leaves it unknown, so the whole command is kept.
HAS_SUBCOMMANDS = frozenset({"git", "cargo", "go", "uv", "npm", "yarn", "pnpm", "bun", "pip", "pip3", "docker",
                             "poetry", "pdm", "hatch", "make", "gradle", "mvn", "dotnet", "deno", "kubectl", "just",
                             "tox", "nox", "mix", "rake"})
_SUBCOMMAND = re.compile(r"[A-Za-z][A-Za-z0-9_:-]*")  # a word, not a path (no / or .) and not an option
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


def command_prefix(command: str) -> str:
    """The prefix 'always allow' remembers for `command`, or "" when none can be (a command that chains,
    redirects or substitutes is never run without asking, whatever the list holds)."""
    text = command.strip()
    if not text or _SHELL_META.search(text):
        return ""
    try:
        words = shlex.split(text)
    except ValueError:
        return ""
    return " ".join(shlex.quote(w) for w in _prefix_words(words)) if words else ""


def _prefix_words(words: list[str]) -> list[str]:
    lead = 0
    while lead < len(words) - 1 and _ASSIGNMENT.fullmatch(words[lead]):  # `FOO=1 pytest`: kept, then the program
        lead += 1
    head, words = words[:lead], words[lead:]
    program, rest = words[0], words[1:]
    name = program.rsplit("/", 1)[-1]
    if not rest:
        return head + words
    if INTERPRETERS.fullmatch(name):
        if rest[0] == "-m" and len(rest) > 1:  # `python3 -m pytest -q` -> `python3 -m pytest`
            return head + [program, "-m", *_prefix_words(rest[1:])]  # `-m pip install`: the module's subcommand too
        if rest[0].startswith("-"):
            return head + words  # `python -c CODE`, `bash -c ...`: the code is the command
        return head + [program, *_prefix_words(rest)]  # `python manage.py test`: the script and its subcommand
    if name in RUNNERS and (RUNNERS[name] == "" or rest[0] == RUNNERS[name]):
        runner = [program] if RUNNERS[name] == "" else [program, rest[0]]
        inner = rest[len(runner) - 1:]
        if not inner or inner[0].startswith("-"):
            return head + words
        return head + runner + _prefix_words(inner)
    if name in SCRIPT_RUNNERS and rest[0] in ("run", "run-script") and len(rest) > 1:
        return head + [program, rest[0], rest[1]]  # `npm run test`
    if not _SUBCOMMAND.fullmatch(rest[0]):
        # An option or a path first: for a program with subcommands it is unknown which one runs.
        return head + (words if name in HAS_SUBCOMMANDS and rest[0].startswith("-") else [program])
    taken = [program, rest[0]]
    if (name, rest[0]) in NESTED and len(rest) > 1 and _SUBCOMMAND.fullmatch(rest[1]):
        taken.append(rest[1])  # `uv pip install`, `docker compose up`
    return head + taken


def project_allow_list(root: Path) -> AllowList:
    """The prefixes the user allowed in this project (`p` in a Bash question, `ribbit allow`), with the defaults."""
    from agent.paths import project_state

    return AllowList(project_state(root) / "allow.json")


class AllowList:
    """Command prefixes that run without asking; user additions persist per project."""

    def __init__(self, store: Path | None = None, defaults: tuple[str, ...] = DEFAULT_ALLOW) -> None:
        self.store = store
        self.defaults = defaults
        self.user: list[str] = []
        if store and store.exists():
            try:
                self.user = [str(p) for p in json.loads(store.read_text()).get("allow", [])]
            except (OSError, ValueError, AttributeError):
                self.user = []

    def allows(self, command: str) -> bool:
        text = command.strip()
        if not text or _SHELL_META.search(text):
            return False
        try:
            words = shlex.split(text)
        except ValueError:
            return False
        for prefix in (*self.defaults, *self.user):
            try:
                pwords = shlex.split(prefix)
            except ValueError:
                continue
            if pwords and words[: len(pwords)] == pwords:
                return True
        return False

    def add(self, prefix: str) -> None:
        if prefix and prefix not in self.user:
            self.user.append(prefix)
            self._save()

    def remove(self, prefix: str) -> bool:
        """Revoke a prefix the user allowed; False when it was not there (the defaults cannot be revoked)."""
        if prefix not in self.user:
            return False
        self.user.remove(prefix)
        self._save()
        return True

    def _save(self) -> None:
        if self.store:
            self.store.parent.mkdir(parents=True, exist_ok=True)
            temp = self.store.with_name(self.store.name + ".tmp")
            temp.write_text(json.dumps({"allow": self.user}, indent=2) + "\n")
            temp.replace(self.store)


class BashPlan(BaseModel):
    """How one Bash command goes: asked about first or not, and what it may write."""

    model_config = ConfigDict(frozen=True)

    ask: bool
    access: Access
    # A read-only run that fails on a write may ask the user to run it again writable.
    may_ask_to_write: bool = False
    # Why the command runs read-only although the mode would let it write (another session holds the checkout).
    held: str | None = None


ASK_THEN_WRITE = BashPlan(ask=True, access="read-write")
WRITE_WITHOUT_ASKING = BashPlan(ask=False, access="read-write")
READ_ONLY_THEN_ASK = BashPlan(ask=False, access="read-only", may_ask_to_write=True)
# Issue 14's `plan` mode: every command read-only, never a question.
READ_ONLY_ONLY = BashPlan(ask=False, access="read-only")


class ApprovalPolicy:
    """The mode table of docs/contract.md. Mutable: 'approve all' switches ask -> auto-edit."""

    def __init__(self, mode: Mode, allow: AllowList, sandboxed: bool) -> None:
        self.mode = mode
        self.allow = allow
        self.sandboxed = sandboxed

    def edit_needs_approval(self, runs_later: str | None = None) -> bool:
        """Ask mode asks for every change; auto-edit for a file that runs code later (a .pth, a Makefile...)."""
        return self.mode == "ask" or (self.mode == "auto-edit" and runs_later is not None)

    def plan_bash(self, command: str) -> BashPlan:
        """CONTRACT "What without asking may do": in ask and auto-edit a command runs without a question
        only if it cannot write, i.e. read-only in the sandbox; writing needs a yes. In plan mode every
        command runs read-only and none asks (without a sandbox none can run: the runner refuses)."""
        if self.mode == "plan":
            return READ_ONLY_ONLY
        if self.mode in ("full-auto", "review"):
            # Those modes only start without a sandbox when the user said --no-sandbox.
            return WRITE_WITHOUT_ASKING
        if not self.sandboxed:
            return ASK_THEN_WRITE  # nothing can make a command read-only: every one asks
        return READ_ONLY_THEN_ASK if self.allow.allows(command) else ASK_THEN_WRITE

    def bash_needs_approval(self, command: str) -> bool:
        return self.plan_bash(command).ask


@dataclass(frozen=True)
class EditNeed:
    """A Write/Edit: asks in ask mode, and in auto-edit for a file that runs code later; 'approve all'
    switches the session to auto-edit."""

    runs_later: str | None = None


@dataclass(frozen=True)
class CommandNeed:
    """A Bash command: asks as the mode's plan for it says (or when a read-only run tried to write);
    'always allow' remembers its prefix for this project."""

    command: str
    tried_to_write: bool = False


@dataclass(frozen=True)
class ReviewNeed:
    """Review mode: every hunk of the finished patch is asked about."""


ApprovalNeed = EditNeed | CommandNeed | ReviewNeed


class ToolTraits(Protocol):
    """What approvals read of a tool (agent.core.tools.base.Tool declares it)."""

    @property
    def name(self) -> str: ...
    @property
    def runs_commands(self) -> bool: ...
    @property
    def allowed_in_plan_mode(self) -> bool: ...


class ApprovalOrchestrator:
    """The one place every tool's approval is decided: policy, then ask, then remember (as codex's tool
    orchestrator). A tool declares what it needs and how to build the request; the request (a diff,
    say) is only built when someone is asked. The mode lives here, and every change is an event."""

    def __init__(self, policy: ApprovalPolicy, approver: Approver, emit: Callable[[AgentEvent], None]) -> None:
        self.policy = policy
        self.approver = approver
        self.emit = emit
        # Why this session may not change the checkout now (another session holds it), else None; the
        # session sets it (agent.session.checkout_lock), asking takes the checkout when it is free.
        self.checkout_held: Callable[[], str | None] = lambda: None

    @property
    def mode(self) -> Mode:
        return self.policy.mode

    def set_mode(self, mode: Mode) -> None:
        if mode != self.policy.mode:
            self.policy.mode = mode
            self.emit(ModeChanged(mode=mode))

    def plan_command(self, command: str) -> BashPlan:
        plan = self.policy.plan_bash(command)
        if plan.access == "read-write" and self.policy.sandboxed and (held := self.checkout_held()) is not None:
            return BashPlan(ask=False, access="read-only", held=held)  # refusal() covers Bash without a sandbox
        return plan

    def refusal(self, tool: ToolTraits) -> str | None:
        """Why the mode refuses this tool outright (the `Error:` text for the model), or None."""
        if self.policy.mode == "plan" and not tool.allowed_in_plan_mode:
            return PLAN_REFUSAL.format(tool=tool.name, explore=PLAN_EXPLORE[self.policy.sandboxed])
        if self.policy.mode == "plan" and tool.runs_commands and not self.policy.sandboxed:
            return PLAN_NO_SANDBOX_REFUSAL
        # A tool plan mode refuses changes files; a command without a sandbox may too (with one it runs read-only).
        writes = not tool.allowed_in_plan_mode or (tool.runs_commands and not self.policy.sandboxed)
        if self.policy.mode != "plan" and writes:
            held = self.checkout_held()
            if held is not None:
                return held + HELD_ADVICE
        return None

    def task_note(self) -> str:
        """What goes with each task in this mode (plan mode's note, as the sandbox allows), else ""."""
        if self.policy.mode != "plan":
            return ""
        return PLAN_TASK_NOTE if self.policy.sandboxed else PLAN_TASK_NOTE_NO_SANDBOX

    def decide(self, need: ApprovalNeed, request: Callable[[], ApprovalRequest]) -> ApprovalDecision | None:
        """None when the policy lets it through without asking; else the user's decision, recorded in the
        transcript and remembered as they asked."""
        if isinstance(need, EditNeed) and self.policy.mode == "plan":
            # The loop refuses Write/Edit first; this holds too if the mode changed mid-step.
            return ApprovalDecision(approved=False, reason="plan mode changes nothing")
        if not self._asks(need):
            return None
        asked = request()
        decision = self.approver.decide(asked)
        self.emit(
            ApprovalEvent(
                tool_call_id=asked.tool_call_id,
                decision="approved" if decision.approved else "rejected",
                reason=decision.reason,
            )
        )
        self._remember(need, decision)
        return decision

    def _asks(self, need: ApprovalNeed) -> bool:
        if isinstance(need, EditNeed):
            return self.policy.edit_needs_approval(need.runs_later)
        if isinstance(need, CommandNeed):
            return need.tried_to_write or self.policy.plan_bash(need.command).ask
        return True

    def _remember(self, need: ApprovalNeed, decision: ApprovalDecision) -> None:
        if isinstance(need, EditNeed) and decision.remember == "session":
            self.set_mode("auto-edit")
        elif isinstance(need, CommandNeed) and decision.approved and decision.remember == "prefix":
            # 'Always allow': the prefix runs without asking from now on, read-only.
            prefix = command_prefix(need.command)
            if not prefix:
                return
            try:
                self.policy.allow.add(prefix)
            except OSError as exc:
                self.emit(NoticeEvent(level="warning", text=f"could not save the allowed prefix {prefix}: {exc.strerror or exc}"))
                return
            self.emit(NoticeEvent(level="info", text=(
                f"allowed in this project from now on, read-only and without asking: commands starting {prefix!r} "
                "(/allowed or `ribbit allow` lists and revokes)")))
