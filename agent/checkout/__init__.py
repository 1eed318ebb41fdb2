"""The live-checkout safety layer: atomic apply, the edit gate, diffs, read state, the undo journal,
git, watcher, sandbox, review mode, and the Workspace (the session API) that wires them."""
