"""Undo: what changed in the checkout, and putting it back.

worktree (the work tree as a git tree, from the exact bytes on disk), journal (snapshots and steps as
commits under refs/ribbit/, the session patch), restore (the undo plan: check the disk, put files
back), ignored (git-ignored files and the journal's budget), runs_later and git_runs_later (files that
run code later), watcher (changes made outside the agent).
Never imports agent.sandbox: the session puts the two together."""
