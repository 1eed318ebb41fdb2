"""The sandbox: running a command the model asked for.

runner (CommandRunner, its results, bubblewrap and the local runner, the write quota), config
(sandbox.toml: what is hidden, exposed, allowed), caps (memory and process caps), seccomp, credentials
(git's credentials masked as git reads them), output_spool (cut command outputs kept for the model).
Never imports agent.undo: the session puts the two together."""
