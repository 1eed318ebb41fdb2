"""Draft tokens for speculative decoding, and how many to draft.

Decoding on a CPU is bound by memory bandwidth: checking k drafted tokens in one batch costs little more
than one token, so every accepted draft is a token nearly for free. Two sources:

- `LookupDrafter` (prompt lookup): a coding agent copies text it has seen — an Edit's old_string from a
  Read, a Write of a file it just read, a test name from Bash output. The longest suffix of the stream
  that occurred earlier proposes what followed it there.
- FrogNano's MTP head (models.llama_runtime.MtpContext) where the GGUF has one.

Both proposals are deterministic (a point mass on the drafted token). The backend verifies them by
sampling the target at each drafted position with the turn's own sampler and accepting while the
sample equals the draft. For a point-mass proposal that *is* the standard speculative-sampling rule:
the draft x is accepted with probability p(x), and on rejection the sample is distributed as p with x
removed and renormalised — so every emitted token has exactly the target's distribution (and greedy
output is the target's greedy output). `DraftBudget` keeps drafting only where it pays.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Literal

import numpy as np
from pydantic import BaseModel

DraftMode = Literal["none", "lookup", "mtp", "auto"]
DRAFT_MODES: tuple[DraftMode, ...] = ("none", "lookup", "mtp", "auto")
# The most tokens verified in one batch besides the sampled one; also the recurrent snapshots kept.
MAX_DRAFT = 8
MIN_MATCH = 2  # tokens of context that must match before a lookup draft is proposed
LONG_MATCH = 8  # a match this long is as good as any longer one
SHORT_MATCH_DRAFT = {2: 1, 3: 3}  # tokens drafted after a match of so few tokens (LookupDrafter.draft_length)
LOOKUP_CHUNK = 4096  # candidate match ends compared per vectorised step, newest first (LookupDrafter.propose)
# DraftBudget's acceptance: what earlier outcomes still weigh at each new one, and how many trials the prior
# is worth. Replayed without a model, 0.6 did as well as any of 0.6-0.8 on 23 greedy copy turns of the
# embedded model and on bench.session's recorded task; against the average of each outcome's rate it
# replaced, the six copy turns of bench.engine ran 1.00-1.17x faster (one process, 5 rotated rounds).
ACCEPTANCE_MEMORY = 0.6
PRIOR_TRIALS = 5.0


class DraftStats(BaseModel):
    """Counts over the backend's life, per source."""

    proposals: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


class LookupDrafter:
    """Proposes the continuation of the longest earlier match of the stream's tail (numpy, no index:
    a few vectorised compares over the stream per proposal, well under a millisecond at 100K tokens)."""

    def __init__(self, min_match: int = MIN_MATCH, long_match: int = LONG_MATCH, chunk: int = LOOKUP_CHUNK) -> None:
        self.min_match = min_match
        self.long_match = long_match
        self.chunk = chunk

    def propose(self, stream: np.ndarray, last: int, n_max: int, stop: Collection[int] = ()) -> list[int]:
        """Drafts to follow `stream` + [`last`] (`last` sampled, not yet in the stream)."""
        n = len(stream)
        if n_max <= 0 or n < self.min_match:
            return []
        # Candidate ends p (stream[p] == last) that leave at least one token to copy after them.
        ends = np.flatnonzero(stream[: n - 1] == last)
        best, end = 0, -1
        # Newest candidates first, a chunk at a time: the winner is the most recent of the longest
        # matches, so the first chunk holding a match of `long_match` decides. A model repeating itself
        # (every position a full match) costs one chunk, not the whole stream (3-4 ms at 100K tokens).
        for top in range(ends.size, 0, -self.chunk):
            chunk = ends[max(0, top - self.chunk): top]
            length = self._match_lengths(stream, chunk)
            longest = int(length.max())
            if longest > best:  # an older chunk's equal match is not more recent
                best, end = longest, int(chunk[np.flatnonzero(length == longest)[-1]])
            if best >= self.long_match:
                break
        if best < self.min_match:
            return []
        drafts: list[int] = []
        for source in range(end + 1, end + 1 + min(n_max, self.draft_length(best))):
            # A match close to the tail runs into the text being drafted (a repetition): keep copying it.
            token = int(stream[source]) if source < n else (last if source == n else drafts[source - n - 1])
            if token in stop:
                break
            drafts.append(token)
        return drafts

    def _match_lengths(self, stream: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """How many tokens (up to `long_match`) end at each of `ends` as they end the stream + [last]."""
        n = len(stream)
        length = np.ones(ends.size, dtype=np.int32)
        alive = np.ones(ends.size, dtype=bool)
        for back in range(1, self.long_match):
            if n - back < 0:
                break
            earlier = ends - back
            ok = alive & (earlier >= 0)
            ok[ok] = stream[earlier[ok]] == stream[n - back]
            length += ok
            alive = ok
            if not alive.any():
                break
        return length

    def draft_length(self, match: int) -> int:
        """Longer matches earn longer drafts. A 2-token match is often a coincidence (`format_` went on
        as `line` where the text had `numbered`): one token; a 3-token match, three; 4 or more, the most.
        Against drafting 4 / 6 after 2- / 3-token matches, replayed without a model over 17 greedy copy
        turns of the embedded model (verify costs measured on it) the median expected speed-up went from
        1.77x to 1.82x, and over bench.session's recorded task (real-size costs) from 1.31x to 1.37x."""
        return SHORT_MATCH_DRAFT.get(match, MAX_DRAFT)


# Verify costs are kept per band of context depth: attention over more tokens makes both a single
# decode and a batch slower, and not at the same rate (real size, KV f16 + flash attention, 2 cores:
# 1 + 2 tokens cost ~2.2 single decodes at 2K deep but ~4 at 7K; bench.session).
DEPTH_BAND = 2048
# Where drafting does not pay, one decode in this many still verifies a 1-token draft (~1-2 % of decode
# time at real size), so that costs measured once are measured again.
RETIME_EVERY = 64


class VerifyCost:
    """What verifying 1 + k tokens in one batch costs, in single-token decodes, as measured on this
    machine and model while decoding, per band of context depth (an exponential average of each batch
    size's decode time, and of a single decode's, in the band where it was timed).

    It is not a constant: on a memory-bound machine a batch of 9 costs little more than one token, but on
    2 cores FrogNano-shaped Q4_K_M is compute-bound and a batch of 1 + k costs ~1 + 0.85k (bench.engine,
    section 6), more as the context deepens. A band that has not timed a batch size yet borrows the
    nearest shallower band's figure (cheaper: so drafting is tried there and the band measures its own),
    and before any, PRIOR_COST (optimistic, so that drafting gets tried); either no lower than a straight
    line through the sizes the band did time. A batch never counts as cheaper than a smaller one timed
    in the same band.
    """

    def __init__(self, prior: tuple[float, ...] | None = None) -> None:
        self.prior = prior or PRIOR_COST
        self.seconds: dict[tuple[int, int], float] = {}  # (band, batch size) -> seconds
        self.samples: dict[tuple[int, int], int] = {}

    def record(self, n_tokens: int, seconds: float, depth: int = 0) -> None:
        if n_tokens < 1 or seconds <= 0:
            return
        key = (depth // DEPTH_BAND, n_tokens)
        old = self.seconds.get(key)
        self.seconds[key] = seconds if old is None else 0.8 * old + 0.2 * seconds
        self.samples[key] = self.samples.get(key, 0) + 1

    def __call__(self, k: int, depth: int = 0) -> float:
        if k == 0:
            return 1.0
        band = depth // DEPTH_BAND
        own = self._measured(band, k + 1)
        smaller = [(j, c) for j in range(1, k) if (c := self._measured(band, j + 1)) is not None]
        if own is not None:  # a bigger batch never counts as cheaper than a smaller one in the band
            return max([own] + [c for _, c in smaller])
        # Not timed in this band: the nearest shallower band's figure, or the prior; but no cheaper than
        # a straight line through what this band did time (batches grow about linearly when compute-bound).
        borrowed = next((c for b in range(band - 1, -1, -1) if (c := self._measured(b, k + 1)) is not None), None)
        guess = borrowed if borrowed is not None else self.prior[min(k, len(self.prior) - 1)]
        return max([guess] + [1.0 + (c - 1.0) * k / j for j, c in smaller])

    def _measured(self, band: int, size: int) -> float | None:
        """Batch time over single-decode time, both timed (twice at least) in `band`."""
        if self.samples.get((band, size), 0) >= 2 and self.samples.get((band, 1), 0) >= 2:
            return max(1.0, self.seconds[(band, size)] / self.seconds[(band, 1)])
        return None

    def singles(self, depth: int) -> int:
        """Single decodes timed in the band of `depth`."""
        return self.samples.get((depth // DEPTH_BAND, 1), 0)

    def measured(self) -> dict[int, dict[int, float]]:
        """{band: {k: cost}} for every band and k timed there (bench.session prints it)."""
        found: dict[int, dict[int, float]] = {}
        for band, size in sorted(self.seconds):
            cost = self._measured(band, size) if size > 1 else None
            if cost is not None:
                found.setdefault(band, {})[size - 1] = cost
        return found


class DraftBudget:
    """How many tokens a source may draft now: its measured acceptance against the verify cost.

    With per-token acceptance a, a draft of k tokens yields 1 + a + ... + a^k tokens per verified batch;
    the batch costs `cost(k)` single-token decodes (VerifyCost, measured while decoding). Drafting k
    tokens is chosen only where it yields more tokens per unit of time than decoding one at a time; a
    source whose drafts keep failing is paused and tried again now and then.

    Acceptance is learned only from outcomes, so a budget that declined to draft would never see a copy
    start (a 135M model declined 128 of 300 tokens of a copy turn after two misses). While it declines,
    a *shadow* proposal — what the source would have drafted — is checked against the tokens sampled
    instead and recorded as if drafted: acceptance keeps being measured at no decode cost (a lookup per
    token: well under a millisecond).
    """

    def __init__(self, cost: VerifyCost | None = None, prior: float = 0.6, pause_after: int = 6) -> None:
        self.cost = cost or VerifyCost()
        # Per-token acceptance = accepted / trials, both decayed per outcome (ACCEPTANCE_MEMORY). The
        # prior counts as PRIOR_TRIALS trials.
        self.accepted = prior * PRIOR_TRIALS
        self.trials = PRIOR_TRIALS
        self.pause_after = pause_after
        self.failures = 0
        self.skipped = 0
        self.declined = 0
        self.shadowed: list[int] = []  # a proposal not drafted, being checked against the sampled tokens
        self.matched = 0
        self.shadows = 0  # shadow proposals settled (bench figures)

    def length(self, n_max: int, depth: int = 0) -> int:
        """Tokens to draft now (0: decode one token), `depth` tokens into the context."""
        if self.cost.singles(depth) < 2:
            return 0  # a new depth band: time single decodes first, the yardstick of every batch there
        if self.failures >= self.pause_after:
            self.skipped += 1
            if self.skipped % 32:
                return 0
        best_k, best_rate = 0, 1.0
        a = self.acceptance
        for k in range(1, min(n_max, MAX_DRAFT) + 1):
            expected = sum(a**i for i in range(k + 1))
            rate = expected / self.cost(k, depth)
            if rate > best_rate * 1.02:
                best_k, best_rate = k, rate
        if best_k == 0 and n_max >= 1:
            # Costs change (other programs come and go; a timing can be an outlier): now and then a small
            # batch is timed again, so one bad measurement does not switch drafting off for good.
            self.declined += 1
            if self.declined % RETIME_EVERY == 0:
                return 1
        return best_k

    @property
    def shadowing(self) -> bool:
        return bool(self.shadowed)

    def draft_or_shadow(self, room: int, depth: int, propose: Callable[[int], list[int]]) -> list[int]:
        """The drafts to verify now ([]: decode one token), from `propose(n)`, a source's proposal of at
        most n tokens. A proposal declined is followed as a shadow (one at a time)."""
        n = self.length(room, depth)
        if not n and self.shadowing:
            return []
        drafts = propose(n or room)
        if n and drafts:
            self.drop()  # these positions are measured by the drafts themselves
            return drafts
        self.shadow(drafts)
        return []

    def shadow(self, drafts: list[int]) -> None:
        """Follow `drafts`, proposed and not drafted, with observe() from the next sampled token on."""
        if drafts and not self.shadowed:
            self.shadowed, self.matched = list(drafts), 0

    def drop(self) -> None:
        """Forget a pending shadow unrecorded: a turn ended (its next tokens are another context's), or
        real drafts now measure the same positions."""
        self.shadowed = []

    def observe(self, token: int) -> None:
        """The next token sampled after a shadow proposal's last match: settle it once it parts or ends."""
        if not self.shadowed:
            return
        if token == self.shadowed[self.matched]:
            self.matched += 1
            if self.matched < len(self.shadowed):
                return
        self.record(len(self.shadowed), self.matched)
        self.shadows += 1
        self.shadowed = []

    @property
    def acceptance(self) -> float:
        return self.accepted / self.trials

    def record(self, drafted: int, accepted: int) -> None:
        if drafted <= 0:
            return
        # Each drafted token up to the first rejection is a trial: 7 of 7 kept is seven successes, 1 of 1
        # one. (An average of each outcome's rate weighed them alike, so a copy's drafts stayed short
        # for several batches after one miss.)
        trials = accepted + (1 if accepted < drafted else 0)
        self.accepted = ACCEPTANCE_MEMORY * self.accepted + accepted
        self.trials = ACCEPTANCE_MEMORY * self.trials + trials
        self.failures = self.failures + 1 if accepted == 0 else 0


# Before a batch size has been timed: what a memory-bound decode looks like (the embedded model on 2
# cores: a batch of 9 costs ~1.7 tokens), so drafting is tried; VerifyCost replaces it once measured.
PRIOR_COST: tuple[float, ...] = (1.0, 1.09, 1.17, 1.26, 1.34, 1.43, 1.52, 1.61, 1.70)
