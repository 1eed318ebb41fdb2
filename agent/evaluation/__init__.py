"""`ribbit eval`: run candidate models in one harness on your own tasks.

tasks   task files (ribbit task folders / JSONL, SWE-bench instance JSONL) -> EvalTask
repos   git plumbing: a private cache repo per task, worktrees, applying patches
testlog per-test outcomes from pytest / unittest output
runner  one job = (task, model): agent phase, then the hidden-test phase; resumable runs
grading what the test phase decides: the agent's test edits put back, named tests reached, the outcome
compare two models on the same tasks: paired difference, its 95 % interval, a verdict in words
report  resolved rates, Markdown / JSON reports, SWE-bench predictions JSONL

Nothing here imports textual or app/.
"""
