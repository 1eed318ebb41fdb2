"""The agent, UI-free: the loop that drives a model through the five tools (core), undo (the journal and
the watcher) and sandbox (running commands), the session API that puts them together (session);
evaluation/ runs whole tasks for `ribbit eval`. At the bottom, used by all of them: git (every git
command), diffs, fs (confined opens, atomic writes), paths (ribbit's folders, session ids), text and
glob_pattern."""
