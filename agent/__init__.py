"""The agent, UI-free: the loop that drives a model through the five tools (core), undo (the journal and
the watcher) and sandbox (running commands), the session API that puts them together (session);
evaluation/ runs whole tasks for `ribbit eval`."""
