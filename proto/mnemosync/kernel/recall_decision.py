"""How relevant a search hit is to a prompt or query, as a calibrated chance, and which hits the prompt hook injects.

A logistic regression over a few features of each hit gives the estimated
chance that the memory is one the prompt needs (`Decision.probability`). That
one number is the relevance every surface shows: the prompt hook injects the
hits whose chance reaches the model's threshold (best first, at most
`max_items`, each on its own merit), the dashboard draws it as each result's
bar, MCP `search` returns it and drops the hits below `min_relevance`.

Every feature means the same in a store of one memory as in one of thousands
(issue 38), so none depends on the store's keyword statistics or needs other
hits to be defined:

* `similarity`: the cosine similarity of the memory to the prompt;
* `above_background`: the similarity minus the prompt's background, the mean
  similarity of the other hits shrunk towards a fixed prior
  (`BACKGROUND_PRIOR`, worth `BACKGROUND_WEIGHT` hits): with no other hit the
  background is the prior, with many it is theirs;
* `margin`: the similarity minus the best of the other hits and that
  background (how far it stands out from what else the prompt matches);
* `first`: 1 for the hit the hybrid search ranked first (its keyword channel
  weighs the words the store makes rare; in a store of one memory it is that
  memory);
* `overlap`: the share of the prompt's topic words (stemmed) the memory holds,
  counted in full from `FULL_WORDS` topic words (the only word of "carry on"
  proves little); computed from the two texts, not from the store's IDF;
* the prompt's kind: `content_words` (log of 1 + its topic words), `chat` (1
  when it has none: "thanks, that worked"), `question`, `generic` (shaped like
  a textbook question: "explain X", "what is a Y").

The weights, the standardisation, the threshold, the most items and the
relevance floor are data (`recall_model.json`, next to this module), fitted on
the dev stores of the labelled prompt sets at every store size by
`python -m ops.bench.fit_recall` and reported on the test stores by
`python -m ops.bench.bench_recall`; the file documents what it was fitted on.

It lives in the kernel, not the MCP shim that runs it on every prompt, so the
agent's dashboard and MCP results show the same numbers.
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
"""Hits the prompt hook fetches for the decision to judge."""
MIN_PROMPT_CHARS = 12
"""Shorter prompts ("ok", "go on") are not searched."""
FEATURES = ("similarity", "above_background", "margin", "first", "overlap", "content_words", "chat", "question",
            "generic")
FEATURE_DOCS = {
    "similarity": "cosine similarity of the memory to the prompt",
    "above_background": "similarity minus the mean similarity of the other hits, shrunk towards a fixed prior",
    "margin": "similarity minus the best of the other hits' similarities and that background",
    "first": "1 when the hybrid search ranked the memory first",
    "overlap": "share of the prompt's stemmed topic words the memory holds, x min(1, topic words / 3)",
    "content_words": "log(1 + the prompt's words that are neither stop words nor conversational)",
    "chat": "1 when the prompt has no such word ('continue', 'thanks, that worked')",
    "question": "1 when the prompt asks (a question mark, or a question word first)",
    "generic": "1 when the prompt is shaped like a textbook question ('explain X', 'what is a Y')",
}
"""What each feature is, written into the model file beside its weight and shown by `recall --explain`."""
BACKGROUND_PRIOR = 0.10
"""The similarity a memory unrelated to the prompt typically has (all-MiniLM-L6-v2): the background with no other
hit to measure it by."""
BACKGROUND_WEIGHT = 3.0
"""How many hits the prior counts for in the background."""
FULL_WORDS = 3
"""Topic words from which the overlap counts in full."""

CONVERSATIONAL = frozenset(
    """ok okay yes yeah yep no nope please thanks thank thx cheers great good nice perfect awesome cool fine sure
    continue go on ahead keep going proceed next step do it let lets try again undo revert stop wait hmm hi hello
    hey morning afternoon back lunch looks look sounds right wrong worked works working fixed trick mean meant
    that this it me you what did change changed last step explain walk through shorter concise more less
    approved done ship lgtm""".split())
"""Words that carry no topic in a conversational turn; a prompt made only of these (and stop words) is chat."""
_WORD = re.compile(r"[a-z0-9][a-z0-9_.\-/]*")
_PART = re.compile(r"[a-z0-9]+")
_GENERIC = re.compile(r"^(explain|define|describe)\b|\bdifference between\b|^what('s| is| are| does) (a|an)\b"
                      r"|^how (does|do) (a|an)\b|^how does .* work\b|\bin (simple terms|general|one paragraph)\b"
                      r"|^what is the (difference|big o|purpose)\b")
_QUESTION_START = ("what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "do", "does",
                   "can", "could", "should", "would", "will", "did", "has", "have")
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "es", "ed", "s", "ly")


def worth_searching(prompt: str) -> bool:
    """False for prompts too short to mean anything, and for slash commands."""
    text = prompt.strip()
    return len(text) >= MIN_PROMPT_CHARS and not text.startswith("/")


def topic_words(prompt: str) -> list[str]:
    """The prompt's words that can name a topic (neither stop words nor conversational ones)."""
    words = _WORD.findall(prompt.lower())
    return [w for w in words if w not in STOP_WORDS and w not in CONVERSATIONAL]


def stem(word: str) -> str:
    """`word` without a common English suffix ("retries" -> "retry", "signed" -> "sign"), so a paraphrase's
    inflections meet the memory's."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
    return word


def _stems(text: str) -> set[str]:
    return {stem(p) for w in topic_words(text) for p in _PART.findall(w) if len(p) > 1 and p not in STOP_WORDS}


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
    """Each hit's features, in the order of `hits`, which is the search's (see the module docstring)."""
    sims = [similarity(h) for h in hits]
    total = sum(sims)
    asked = _stems(prompt)
    words = topic_words(prompt)
    kind = {"content_words": math.log1p(len(words)), "chat": float(not words), "question": float(is_question(prompt)),
            "generic": float(is_generic(prompt))}
    shrink = min(1.0, len(words) / FULL_WORDS)
    rows = []
    for i, (hit, sim) in enumerate(zip(hits, sims, strict=True)):
        background = (total - sim + BACKGROUND_WEIGHT * BACKGROUND_PRIOR) / (len(sims) - 1 + BACKGROUND_WEIGHT)
        rival = max([background, *sims[:i], *sims[i + 1:]])
        held = len(asked & _stems(hit.memory.content)) / len(asked) if asked else 0.0
        rows.append({"similarity": sim, "above_background": sim - background, "margin": sim - rival,
                     "first": float(i == 0), "overlap": held * shrink, **kind})
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
    """A fitted logistic regression over `features` and the threshold at which a candidate is injected.

    Attributes:
        weights: Feature name -> weight, on standardised features (the features the model reads).
        intercept: The bias.
        mean, scale: Each feature's standardisation ((x - mean) / scale), from the dev stores.
        threshold: The probability at which a candidate is injected.
        max_items: Most memories injected into one prompt.
        sure_similarity: A cosine similarity at which a candidate is injected whatever its probability (None: no
            such rule).
        min_relevance: The probability under which a search result is dropped by default (MCP `search`).
        about: The model file's documentation (what it was fitted on, what it measured).
    """

    weights: Mapping[str, float]
    intercept: float
    mean: Mapping[str, float]
    scale: Mapping[str, float]
    threshold: float
    max_items: int = 3
    sure_similarity: float | None = None
    min_relevance: float = 0.0
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
        sure = data.get("sure_similarity")
        return cls(weights=data["weights"], intercept=float(data["intercept"]), mean=data["mean"],
                   scale=data["scale"], threshold=float(data["threshold"]), max_items=int(data["max_items"]),
                   sure_similarity=None if sure is None else float(sure),
                   min_relevance=float(data.get("min_relevance", 0.0)), about=data.get("about", {}))

    def features(self, prompt: str, hits: Sequence[Hit]) -> list[dict[str, float]]:
        """Each hit's features (`features` of this module)."""
        return features(prompt, hits)

    def probability(self, row: Mapping[str, float]) -> float:
        """The probability that a candidate with these features is one the prompt needs."""
        z = self.intercept + sum(w * (row[f] - self.mean[f]) / (self.scale[f] or 1.0) for f, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))

    def relevance(self, prompt: str, hits: Sequence[Hit]) -> list[float]:
        """Each hit's estimated chance of being what `prompt` needs, in the order of `hits`."""
        return [self.probability(row) for row in self.features(prompt, hits)]

    def _sure(self, row: Mapping[str, float]) -> bool:
        return self.sure_similarity is not None and row["similarity"] >= self.sure_similarity

    def decide(self, prompt: str, hits: Sequence[Hit], *, seen: Mapping[str, int] | None = None) -> list[Candidate]:
        """Every hit judged, most probable first; the injected ones are those with `injected` set. Each injected
        memory reaches the threshold on its own; a store of one memory is judged as one of thousands.

        Args:
            seen: Memory id -> version already injected in this session; such a memory is not injected again
                unless its version changed.
        """
        seen = seen or {}
        judged = sorted(((h, row, self.probability(row)) for h, row in zip(hits, self.features(prompt, hits),
                                                                           strict=True)),
                        key=lambda t: (not self._sure(t[1]), -t[2]))
        out, taken = [], 0
        for hit, row, p in judged:
            if p < self.threshold and not self._sure(row):
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


def relevance(query: str, hits: Sequence[Hit], *, mode: str = "hybrid") -> list[float | None]:
    """Each hit's calibrated relevance to `query` by the shipped model (`Decision.relevance`), in the order of
    `hits` as the search returned them; None for every hit of a keyword search, which measures no similarity.
    MCP search results and the dashboard's bars show these numbers; the prompt hook injects by them."""
    if mode == "keyword":
        return [None] * len(hits)
    return list(shipped().relevance(query, hits))


@cache
def shipped() -> Decision:
    """The decision fitted and checked in (`recall_model.json`), read once per process."""
    return Decision.load()
