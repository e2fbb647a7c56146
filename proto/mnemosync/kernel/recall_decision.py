"""Which of a prompt's search hits to inject: a small logistic regression over what the search computed.

An absolute cosine bar does not carry from one store to another: how similar
a prompt looks to memories depends on the store's vocabulary and on the
prompt's length and kind, and the fused `final` score is relative to the
candidates (the top hit scores the same for every prompt). So each candidate
is judged by features that say how far it stands out, for this prompt, in this
store (`features`):

* `similarity`: its cosine similarity to the prompt;
* `above_background`: similarity minus the store's background for this prompt
  (the mean similarity of the hits beyond the best three: how similar the
  prompt is to memories in general);
* `below_top`: how far under the best hit's similarity it is (0 for the best);
* `margin`: how far above the next most similar hit it is;
* `both_channels`: 1 when the keyword channel found it too;
* `coverage`: the IDF-weighted share of the prompt's searchable (rare) words it
  holds, as the search's fusion computes it, scaled down for prompts of fewer
  than `FULL_WORDS` topic words (one covered word of one proves little);
* the prompt's kind: `content_words` (log of 1 + the words left once stop
  words and conversational words are removed), `chat` (1 when none are left:
  "continue", "thanks, that worked"), `question`, `generic` (shaped like a
  textbook question: "explain X", "what is a Y", "difference between") and
  `ours` (it speaks of "we", "our", "the team", "the project").

The probability that the memory is one the prompt needs is the logistic
function of the standardised features' weighted sum; a candidate is injected
when it reaches the model's threshold, best first, at most `max_items`. A
candidate at least `sure_similarity` similar to the prompt is injected
whatever its probability: in a store of a handful of memories the relative
features say nothing (no background, no next hit, every word in every memory
so none is searchable), yet such a match is as good as certain. The
weights, the standardisation and the threshold are data
(`recall_model.json`, next to this module), fitted on the dev stores of the
labelled prompt set by `python -m ops.bench.fit_recall` and reported on the
held-out stores by `python -m ops.bench.bench_recall --decision`; the file
documents what it was fitted on and what it measured.

It lives in the kernel, not the MCP shim that runs it on every prompt, so the
agent's dashboard can show the same decision beside a search.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from mnemosync.kernel.search import STOP_WORDS, Hit, vector_earned

NOT_EARNED = "an automated agent's text, its vector not backed by its words"
"""The reason `Decision.judge` gives for a candidate the decision took but the hook does not inject."""
MODEL_PATH = Path(__file__).resolve().with_name("recall_model.json")
SEARCH_LIMIT = 10
"""Hits the prompt hook fetches for the decision to judge (the features are measured among them)."""
MIN_PROMPT_CHARS = 12
"""Shorter prompts ("ok", "go on") are not searched."""
FEATURES = ("similarity", "above_background", "below_top", "margin", "both_channels", "coverage", "content_words",
            "chat", "question", "generic", "ours")
FEATURE_DOCS = {
    "similarity": "cosine similarity of the memory to the prompt",
    "above_background": "similarity minus the mean similarity of the hits beyond the best three",
    "below_top": "the best hit's similarity minus this one's",
    "margin": "this similarity minus the next lower one among the hits",
    "both_channels": "1 when the keyword channel found the memory too",
    "coverage": "IDF-weighted share of the prompt's searchable words the memory holds, x min(1, topic words / 3)",
    "content_words": "log(1 + the prompt's words that are neither stop words nor conversational)",
    "chat": "1 when the prompt has no such word ('continue', 'thanks, that worked')",
    "question": "1 when the prompt asks (a question mark, or a question word first)",
    "generic": "1 when the prompt is shaped like a textbook question ('explain X', 'what is a Y')",
    "ours": "1 when the prompt speaks of we, our, us, the team or the project",
}
"""What each feature is, written into the model file beside its weight."""
BACKGROUND_FROM = 3
"""Hits beyond this many (by similarity) make the background."""
FULL_WORDS = 3
"""Topic words from which keyword coverage counts in full: covering the only word of "carry on" says little."""

CONVERSATIONAL = frozenset(
    """ok okay yes yeah yep no nope please thanks thank thx cheers great good nice perfect awesome cool fine sure
    continue go on ahead keep going proceed next step do it let lets try again undo revert stop wait hmm hi hello
    hey morning afternoon back lunch looks look sounds right wrong worked works working fixed trick mean meant
    that this it me you what did change changed last step explain walk through shorter concise more less
    approved done ship lgtm""".split())
"""Words that carry no topic in a conversational turn; a prompt made only of these (and stop words) is chat."""
_WORD = re.compile(r"[a-z0-9][a-z0-9_.\-/]*")
_GENERIC = re.compile(r"^(explain|define|describe)\b|\bdifference between\b|^what('s| is| are| does) (a|an)\b"
                      r"|^how (does|do) (a|an)\b|^how does .* work\b|\bin (simple terms|general|one paragraph)\b"
                      r"|^what is the (difference|big o|purpose)\b")
_OURS = re.compile(r"\b(we|our|ours|us|team|project)\b")
_QUESTION_START = ("what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "do", "does",
                   "can", "could", "should", "would", "will", "did", "has", "have")


def worth_searching(prompt: str) -> bool:
    """False for prompts too short to mean anything, and for slash commands."""
    text = prompt.strip()
    return len(text) >= MIN_PROMPT_CHARS and not text.startswith("/")


def topic_words(prompt: str) -> list[str]:
    """The prompt's words that can name a topic (neither stop words nor conversational ones)."""
    words = _WORD.findall(prompt.lower())
    return [w for w in words if w not in STOP_WORDS and w not in CONVERSATIONAL]


def is_question(prompt: str) -> bool:
    """True for a prompt that asks (ends with a question mark or starts like a question)."""
    text = prompt.strip().lower()
    return text.endswith("?") or text.split(" ", 1)[0] in _QUESTION_START


def is_generic(prompt: str) -> bool:
    """True for a prompt shaped like a textbook question ("explain X", "what is a Y", "difference between")."""
    return bool(_GENERIC.search(prompt.strip().lower()))


def similarity(hit: Hit) -> float:
    """The hit's cosine similarity to the prompt (0 when the vector channel did not find it)."""
    return 1.0 - hit.vector_distance if hit.vector_rank else 0.0


def features(prompt: str, hits: Sequence[Hit]) -> list[dict[str, float]]:
    """Each hit's features, in the order of `hits` (see the module docstring)."""
    sims = [similarity(h) for h in hits]
    ordered = sorted(sims, reverse=True)
    rest = ordered[BACKGROUND_FROM:]
    background = sum(rest) / len(rest) if rest else (ordered[-1] if ordered else 0.0)
    top = ordered[0] if ordered else 0.0
    words = topic_words(prompt)
    lowered = prompt.lower()
    kind = {"content_words": math.log1p(len(words)), "chat": float(not words), "question": float(is_question(prompt)),
            "generic": float(is_generic(prompt)), "ours": float(bool(_OURS.search(lowered)))}
    shrink = min(1.0, len(words) / FULL_WORDS)
    rows = []
    for hit, sim in zip(hits, sims, strict=True):
        below = [s for s in ordered if s < sim]
        rows.append({"similarity": sim, "above_background": sim - background, "below_top": top - sim,
                     "margin": sim - below[0] if below else 0.0,
                     "both_channels": float(bool(hit.vector_rank and hit.keyword_rank)),
                     "coverage": (hit.keyword_coverage if hit.keyword_rank else 0.0) * shrink, **kind})
    return rows


@dataclass(frozen=True)
class Candidate:
    """One hit as the decision saw it: its features, its probability, and whether (and why not) it is injected.

    Attributes:
        reason: "injected", "below threshold", "over max items", "already injected in this session", or
            `NOT_EARNED` (`Decision.judge` only).
    """

    hit: Hit
    features: Mapping[str, float]
    probability: float
    injected: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the memory's id, version and start of its content, the features and the decision."""
        m = self.hit.memory
        return {"id": m.id, "version": m.version, "content": " ".join(m.content.split())[:160],
                "features": {k: round(v, 4) for k, v in self.features.items()},
                "probability": round(self.probability, 4), "injected": self.injected, "reason": self.reason}


@dataclass(frozen=True)
class Decision:
    """A fitted logistic regression over `FEATURES` and the threshold at which a candidate is injected.

    Attributes:
        weights: Feature name -> weight, on standardised features.
        intercept: The bias.
        mean, scale: Each feature's standardisation ((x - mean) / scale), from the dev stores.
        threshold: The probability at which a candidate is injected.
        max_items: Most memories injected into one prompt.
        sure_similarity: The cosine similarity at which a candidate is injected whatever its probability.
        about: The model file's documentation (what it was fitted on, what it measured).
    """

    weights: Mapping[str, float]
    intercept: float
    mean: Mapping[str, float]
    scale: Mapping[str, float]
    threshold: float
    max_items: int = 3
    sure_similarity: float = 0.65
    about: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> Decision:
        """The decision stored at `path` (the shipped `recall_model.json` by default).

        Raises:
            ValueError: the file does not name every feature, or a number is missing.
        """
        data = json.loads(path.read_text(encoding="utf-8"))
        missing = [f for f in FEATURES if f not in data["weights"] or f not in data["mean"] or f not in data["scale"]]
        if missing:
            raise ValueError(f"{path}: the recall model has no weight, mean or scale for {', '.join(missing)}")
        return cls(weights=data["weights"], intercept=float(data["intercept"]), mean=data["mean"],
                   scale=data["scale"], threshold=float(data["threshold"]), max_items=int(data["max_items"]),
                   sure_similarity=float(data["sure_similarity"]), about=data.get("about", {}))

    def probability(self, row: Mapping[str, float]) -> float:
        """The probability that a candidate with these features is one the prompt needs."""
        z = self.intercept + sum(self.weights[f] * (row[f] - self.mean[f]) / (self.scale[f] or 1.0)
                                 for f in FEATURES)
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def decide(self, prompt: str, hits: Sequence[Hit], *, seen: Mapping[str, int] | None = None) -> list[Candidate]:
        """Every hit judged, most probable first; the injected ones are those with `injected` set.

        Args:
            seen: Memory id -> version already injected in this session; such a memory is not injected again
                unless its version changed.
        """
        seen = seen or {}
        judged = sorted(((h, row, self.probability(row)) for h, row in zip(hits, features(prompt, hits),
                                                                           strict=True)),
                        key=lambda t: (t[1]["similarity"] < self.sure_similarity, -t[2]))
        out, taken = [], 0
        for hit, row, p in judged:
            if p < self.threshold and row["similarity"] < self.sure_similarity:
                reason = "below threshold"
            elif seen and seen.get(hit.memory.id) == hit.memory.version:
                reason = "already injected in this session"
            elif taken >= self.max_items:
                reason = "over max items"
            else:
                reason = "injected"
                taken += 1
            out.append(Candidate(hit, row, p, reason == "injected", reason))
        return out

    def judge(self, prompt: str, hits: Sequence[Hit], *, seen: Mapping[str, int] | None = None
              ) -> list[Candidate]:
        """What the prompt hook injects, every hit judged: `decide`, then an automated agent's memory whose words
        do not bear out its vector (`mnemosync.kernel.search.vector_earned`, issue 33) is not injected after all
        (reason `NOT_EARNED`): its similarity may have been chosen rather than earned. The hook
        (`mnemosync.shim.recall`) and the dashboard's search both call this, so they agree."""
        return [c if not c.injected or vector_earned(c.hit) else replace(c, injected=False, reason=NOT_EARNED)
                for c in self.decide(prompt, hits, seen=seen)]


@cache
def shipped() -> Decision:
    """The decision fitted and checked in (`recall_model.json`), read once per process."""
    return Decision.load()
