"""Slash commands as a table: name -> help -> handler. A new command is one row here (and its handler).

A row says whether the command needs an open session and whether it waits until the agent stops; the
dispatcher checks both, so handlers only do their work. The user's own commands (Markdown files:
agent.session.commands) come after the built-in ones in /help and completion; a built-in name wins.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agent.session import CommitError, CommitPlan, CustomCommand, ModeError, Workspace
from app.screens.commit import CommitScreen
from app.screens.main import MainScreen
from app.screens.sessions import RewindChoice, RewindScreen
from app.visible import visible
from models.base import ModelError


class CommandHost(Protocol):
    """What a command's handler may use of the app (RibbitApp is one): its view, its session, its workers."""

    main: MainScreen
    workspace: Workspace | None
    busy: bool
    setup_error: str | None
    model_failed: bool
    rewind_from: int
    custom_commands: dict[str, CustomCommand]

    def refresh_custom_commands(self) -> None: ...
    def retry_model(self, spec: str) -> None: ...
    def describe_model(self) -> str: ...
    def start_task(self, task: str, mentions: bool = True) -> None: ...
    def rewind_chosen(self, choice: RewindChoice | None) -> None: ...
    async def finish_side_work(self, text: str, level: str = "info") -> None: ...
    def action_quit_app(self) -> None: ...

    # Workers and Textual's own: read-only, whatever their exact signatures.
    @property
    def load_other_model(self) -> Callable[..., Any]: ...
    @property
    def show_session_diff(self) -> Callable[..., Any]: ...
    @property
    def undo(self) -> Callable[..., Any]: ...
    @property
    def compact(self) -> Callable[..., Any]: ...
    @property
    def preload(self) -> Callable[..., Any]: ...
    @property
    def push_screen(self) -> Callable[..., Any]: ...
    @property
    def call_from_thread(self) -> Callable[..., Any]: ...
    @property
    def call_later(self) -> Callable[..., Any]: ...
    @property
    def run_worker(self) -> Callable[..., Any]: ...


Handler = Callable[[CommandHost, str], Awaitable[None]]
MODE_ARGS = ("ask", "auto-edit", "full-auto", "plan")
LEEWAY = ("plan", "ask", "auto-edit", "full-auto")  # from the most careful to the least

KEYS_HELP = [
    "Keys: Enter send · Shift+Enter/Ctrl+J newline · Up/Down history · Tab complete /command or @path · "
    "Esc stop the model, tool or !command · Ctrl+C twice quit",
    "Review: y approve · n reject (type a reason) · space toggle hunk · j/k move · a approve all (auto-edit) · "
    "s split/unified",
    "Bash: y run · n don't · p run it, and from now on its program and subcommand here without asking "
    "(read-only; /allowed lists and revokes)",
    "In a prompt: @path hands the model a file as Read shows it (@dir/ a listing) · !command runs your own "
    "command here, its output shown and handed to the model with your next prompt",
]


@dataclass(frozen=True)
class SlashCommand:
    name: str  # with the slash
    help: str
    handler: Handler
    session: bool = True  # needs an open session
    idle: bool = True  # waits until the agent stops
    args: tuple[str, ...] = ()  # what Tab completes after the name


# -- handlers ------------------------------------------------------------------------------------


async def quit_app(app: CommandHost, arg: str) -> None:
    app.action_quit_app()


async def show_help(app: CommandHost, arg: str) -> None:
    app.refresh_custom_commands()
    await app.main.transcript.add_notice(help_text(app.custom_commands))


async def model(app: CommandHost, arg: str) -> None:
    transcript = app.main.transcript
    if not arg:
        await transcript.add_notice(app.describe_model())
    elif app.workspace is None and app.model_failed:
        app.retry_model(arg)
        await transcript.add_notice(f"loading {arg}…")
    elif app.workspace is None:
        await not_open(app)
    elif app.busy:
        await waits(app, "/model")
    else:
        await transcript.add_notice(f"loading {arg}…")
        app.main.status.activity = "loading model"
        app.load_other_model(arg)


async def allowed(app: CommandHost, arg: str) -> None:
    """`/allowed`: the command prefixes allowed here; `/allowed revoke N|PREFIX` forgets one."""
    assert app.workspace is not None
    transcript, prefixes = app.main.transcript, app.workspace.allowed_prefixes()
    verb, _, target = arg.partition(" ")
    if not verb:
        if not prefixes:
            await transcript.add_notice("no command prefixes allowed in this project ('p' in a Bash question adds one)")
            return
        listed = "\n".join(f"{n:>3}. {visible(p, one_line=True)}" for n, p in enumerate(prefixes, start=1))
        await transcript.add_notice("run here without asking, read-only (/allowed revoke N forgets one):\n" + listed)
        return
    target = target.strip()
    if verb != "revoke" or not target:
        await transcript.add_notice("/allowed lists; /allowed revoke N (or the prefix) forgets one", "error")
        return
    if target.isdigit() and 1 <= int(target) <= len(prefixes):
        target = prefixes[int(target) - 1]
    try:
        removed = app.workspace.revoke_prefix(target)
    except OSError as exc:
        await transcript.add_notice(f"/allowed: cannot save the list: {exc.strerror or exc}", "error")
        return
    if removed:
        await transcript.add_notice(f"revoked: commands starting {visible(target, one_line=True)!r} ask again")
    else:
        await transcript.add_notice(f"{visible(target, one_line=True)!r} is not among the allowed prefixes", "error")


async def set_mode(app: CommandHost, mode: str) -> None:
    assert app.workspace is not None
    transcript, workspace = app.main.transcript, app.workspace
    if not mode:
        await transcript.add_notice(f"mode is {workspace.mode}; choose one of: {', '.join(MODE_ARGS)}")
        return
    try:
        app.main.status.mode = workspace.set_mode(mode)
    except ModeError as exc:
        choose = "" if mode in MODE_ARGS else f"; choose one of: {', '.join(MODE_ARGS)}"
        await transcript.add_notice(f"{exc}{choose}", "error")
        return
    await transcript.add_notice(f"mode is now {mode}")


async def set_reasoning(app: CommandHost, arg: str) -> None:
    """`/think on|off`: applies from the next turn (the running task's too); nothing is read again."""
    assert app.workspace is not None
    transcript, workspace = app.main.transcript, app.workspace
    info = workspace.model_info
    no_switch = workspace.no_reasoning_switch()
    if not arg:
        state = workspace.reasoning_state()
        if info.reasoning is None:
            await transcript.add_notice(no_switch)
        elif state is None:
            await transcript.add_notice("reasoning is as the server's default; /think on|off asks the server to switch it")
        else:
            await transcript.add_notice(f"reasoning is {'on' if state else 'off'}; /think on|off switches it")
        return
    if arg not in ("on", "off"):
        await transcript.add_notice(f"/think takes on or off, not {arg!r}", "error")
        return
    if not workspace.set_reasoning(arg == "on"):
        await transcript.add_notice(no_switch + f"; /think {arg} applies to a model you switch to with /model", "warning")
        return
    app.main.status.reasoning = "on" if workspace.reasoning_state() else "off"
    await transcript.add_notice(f"reasoning {arg} from the next turn (the conversation so far is not read again)")


async def diff(app: CommandHost, arg: str) -> None:
    app.show_session_diff()


async def undo(app: CommandHost, arg: str) -> None:
    if arg.strip() not in ("", "uncertain"):
        await app.main.transcript.add_notice(f"undo: unknown argument {arg.strip()!r}: /undo, or /undo uncertain", "error")
        return
    app.undo(uncertain_too=arg.strip() == "uncertain")


async def compact(app: CommandHost, arg: str) -> None:
    app.busy = True
    app.main.status.activity = "compacting"
    app.compact(arg)


async def rewind(app: CommandHost, arg: str) -> None:
    assert app.workspace is not None
    prompts = app.workspace.prompts()[app.rewind_from:]
    if not prompts:
        await app.main.transcript.add_notice("nothing to rewind: no prompt in this conversation yet", "warning")
    else:
        app.push_screen(RewindScreen(prompts), callback=app.rewind_chosen)


async def init(app: CommandHost, arg: str) -> None:
    await app.main.transcript.add_user("/init")
    await app.main.transcript.add_notice("asking the model to draft AGENTS.md; its Write is shown as a diff like any other")
    app.start_task(Workspace.INIT_TASK, mentions=False)


async def clear(app: CommandHost, arg: str) -> None:
    assert app.workspace is not None
    await app.main.transcript.clear()
    app.workspace.clear()  # keeps the system prompt; the next task starts a new conversation
    # /rewind goes back within this conversation only; the gauge shows what the next turn reads.
    app.rewind_from = len(app.workspace.prompts())
    app.main.status.context_used = app.workspace.prompt_tokens()
    app.preload()  # back to just the system prompt, read (or restored) before the next task
    app.main.status.step = 0


async def commit(app: CommandHost, arg: str) -> None:
    """`/commit`: the model drafts a message for the session's files (a worker), the user edits or accepts it
    in a dialog, and another worker commits exactly those files."""
    workspace = app.workspace
    assert workspace is not None
    app.busy = True
    app.main.status.activity = "drafting the commit message"
    plan: CommitPlan | None = None
    shown = ""

    def draft() -> None:
        nonlocal plan, shown
        try:
            plan = workspace.plan_commit()  # git: a diff a step of the session
        except CommitError as exc:
            app.call_from_thread(app.finish_side_work, f"commit: {exc}", "warning")
            return
        shown = ", ".join(visible(p, one_line=True) for p in plan.shown)
        app.call_from_thread(app.main.transcript.add_notice, f"commit: the model drafts a message for {shown}")
        try:
            text = workspace.draft_commit_message(plan)
        except (ModelError, OSError) as exc:
            text = ""
            app.call_from_thread(app.main.transcript.add_notice,
                                 f"commit: the model could not draft a message ({exc}); write one", "warning")
        app.call_from_thread(ask, text)

    async def ask(text: str) -> None:
        assert plan is not None
        await app.finish_side_work("commit: edit the message, Ctrl+S commits it, Esc cancels")
        app.push_screen(CommitScreen(text, plan.shown), callback=chosen)

    def chosen(message: str | None) -> None:
        if message is None:
            app.call_later(app.main.transcript.add_notice, "commit: cancelled; nothing was committed")
            return
        app.busy = True
        app.main.status.activity = "committing"
        app.run_worker(lambda: make(message), thread=True, exclusive=True, group="agent")

    def make(message: str) -> None:
        assert plan is not None
        try:
            commit_id = workspace.commit(plan, message)
        except CommitError as exc:
            app.call_from_thread(app.finish_side_work, f"commit: {exc}", "error")
            return
        subject = visible(message.strip().splitlines()[0], one_line=True)
        app.call_from_thread(app.finish_side_work, f"committed {commit_id[:12]} {subject!r}: {shown}")

    app.run_worker(draft, thread=True, exclusive=True, group="agent")


async def user_command(app: CommandHost, command: str) -> None:
    """`!command`: the user's own command, run here as they would run it (a worker); Esc stops it."""
    transcript = app.main.transcript
    await transcript.add_user("!" + command)
    workspace = app.workspace
    if workspace is None:
        await not_open(app)
        return
    if app.busy:
        await transcript.add_notice("the agent is still working; press Esc to stop it first", "warning")
        return
    app.busy = True
    app.main.status.activity = "running your command (Esc stops it)"

    def run() -> None:
        try:
            result = workspace.run_user_command(command)
        except Exception as exc:  # it could not start (no bash, a sandbox error): one line
            app.call_from_thread(app.finish_side_work, f"!{command}: {type(exc).__name__}: {exc}", "error")
            return
        text = f"$ {command}  ({result.status()}; the model reads it with your next prompt)\n{result.handed}"
        app.call_from_thread(app.finish_side_work, text, "info" if result.exit_code == 0 else "warning")

    app.run_worker(run, thread=True, exclusive=True, group="agent")


async def run_custom(app: CommandHost, command: CustomCommand, arg: str) -> None:
    """A command of the user's own: its prompt, with what was typed after it, goes out like a typed prompt."""
    assert app.workspace is not None
    transcript = app.main.transcript
    await transcript.add_user(f"/{command.name} {arg}".rstrip())
    where = "the project's" if command.scope == "project" else "your"
    cut = " (cut to its first 8,000 bytes)" if command.cut else ""
    await transcript.add_notice(f"/{command.name}: {where} command, {visible(str(command.path), one_line=True)}{cut}")
    if command.mode is not None and command.mode != app.workspace.mode:
        if command.scope == "project" and LEEWAY.index(command.mode) > LEEWAY.index(app.workspace.mode):
            # The repository's file may ask for more care, never for less: a clone must not switch you to full-auto.
            await transcript.add_notice(
                f"/{command.name} (the project's) asks for {command.mode} mode, which asks you less than "
                f"{app.workspace.mode}: not sent; /mode {command.mode} first if you want it", "error")
            return
        try:
            app.main.status.mode = app.workspace.set_mode(command.mode)
        except ModeError as exc:
            await transcript.add_notice(f"/{command.name} asks for {command.mode} mode: {exc}; not sent", "error")
            return
        await transcript.add_notice(f"mode is now {command.mode} (/{command.name} sets it)")
    app.start_task(command.expand(arg))


# -- the table -----------------------------------------------------------------------------------


BUILTIN: dict[str, SlashCommand] = {c.name: c for c in (
    SlashCommand("/help", "show keys and commands", show_help, session=False, idle=False),
    SlashCommand("/diff", "everything this session changed, file by file", diff),
    SlashCommand("/undo", "revert the last applied change (/undo uncertain: files a command outside the overlay changed too)", undo),
    SlashCommand("/rewind", "back to before an earlier prompt: its files, the conversation, or both", rewind),
    SlashCommand("/commit", "commit the files this session changed, with a message the model drafts and you edit",
                 commit),
    SlashCommand("/compact", "summarise the conversation to free the context: /compact [what to focus on]", compact),
    SlashCommand("/clear", "clear the transcript and start a new conversation", clear),
    SlashCommand("/mode", "show or set the approval mode: /mode ask|auto-edit|full-auto|plan", set_mode,
                 idle=False, args=MODE_ARGS),
    SlashCommand("/model", "show the model in use, or switch to another: /model SPEC", model, session=False, idle=False),
    SlashCommand("/allowed", "command prefixes that run here without asking: /allowed, /allowed revoke N", allowed,
                 idle=False),
    SlashCommand("/think", "reasoning on or off from the next turn: /think on|off", set_reasoning, idle=False,
                 args=("on", "off")),
    SlashCommand("/init", "ask the model to draft an AGENTS.md for this repository (shown as a diff)", init),
    SlashCommand("/quit", "quit ribbit", quit_app, session=False, idle=False),
)}


HANDED_MARKS = ("\n\nThe user attached @", "\n\nThe user ran `")  # what Workspace.run appends to a prompt


def typed_part(content: str) -> str:
    """A prompt as the user typed it, for the transcript of a resumed or rewound conversation: the files and
    command outputs handed over with it are named, not shown again."""
    cut = min((i for mark in HANDED_MARKS if (i := content.find(mark)) >= 0), default=-1)
    if cut < 0:
        return content
    handed = content.count("\n\nThe user attached @") + content.count("\n\nThe user ran `")
    return content[:cut] + f"\n(+ {handed} attachment{'' if handed == 1 else 's'}, as the model read them)"


def command_list(custom: Mapping[str, CustomCommand]) -> dict[str, str]:
    """Every command's name and help line: the built-in ones, then the user's own (for /help and completion)."""
    listed = {name: row.help for name, row in BUILTIN.items()}
    for name, command in sorted(custom.items()):
        listed.setdefault(f"/{name}", f"{visible(command.description, one_line=True)} ({command.scope})")
    return listed


def command_args() -> dict[str, tuple[str, ...]]:
    return {name: row.args for name, row in BUILTIN.items() if row.args}


def help_text(custom: Mapping[str, CustomCommand]) -> str:
    width = max(len(name) for name in command_list(custom))
    return "\n".join([*KEYS_HELP, *(f"{name:<{width}} {text}" for name, text in command_list(custom).items())])


async def not_open(app: CommandHost) -> None:
    await app.main.transcript.add_notice(f"no session: {app.setup_error}" if app.setup_error else
                                         "the session is not open yet", "warning")


async def waits(app: CommandHost, name: str) -> None:
    await app.main.transcript.add_notice(f"{name} waits until the agent stops; press Esc to stop it", "warning")


async def run_command(app: CommandHost, text: str) -> None:
    """Dispatch `/name arg` through the table (or to the user's own command of that name)."""
    name, _, arg = text.strip().partition(" ")
    arg = arg.strip()
    row = BUILTIN.get(name)
    custom = None if row is not None else app.custom_commands.get(name[1:])
    if row is None and custom is None and app.workspace is not None:
        app.refresh_custom_commands()  # a file added since the last look
        custom = app.custom_commands.get(name[1:])
    if row is None and custom is None:
        await app.main.transcript.add_notice(f"unknown command {visible(name, one_line=True)}; /help lists them", "error")
        return
    if (row is None or row.session) and app.workspace is None:
        await not_open(app)
        return
    if (row is None or row.idle) and app.busy:
        await waits(app, name)
        return
    if row is not None:
        await row.handler(app, arg)
    elif custom is not None:
        await run_custom(app, custom, arg)
