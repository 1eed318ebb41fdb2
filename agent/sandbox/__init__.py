"""The sandbox: running a command the model asked for.

runner (CommandRunner, its results, the local, bubblewrap and macOS runners, the write quota), bwrap
(bubblewrap's command line: the mount layout of what a command sees), config
(sandbox.toml: what is hidden, exposed, allowed), caps (memory and process caps), seccomp, credentials
(git's credentials masked as git reads them), output_spool (cut command outputs kept for the model).
Never imports agent.undo: the session puts the two together."""
