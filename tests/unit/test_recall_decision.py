"""`mnemosync.kernel.recall_decision`: what the decision sees of each hit and how it picks, and the shipped model."""

from __future__ import annotations

import json

import pytest
from test_recall import hit

from mnemosync.kernel.recall_decision import (
    BACKGROUND_PRIOR,
    BACKGROUND_WEIGHT,
    FEATURES,
    MODEL_PATH,
    NOT_EARNED,
    Decision,
    features,
    is_generic,
    stem,
    topic_words,
)


def test_features_measure_how_far_a_hit_stands_out_from_the_others_and_from_a_fixed_background():
    hits = [hit(1, 0.70), hit(2, 0.50), hit(3, 0.40), hit(4, 0.30), hit(5, 0.20)]
    rows = features("which package manager signs the JWTs for the auth service?", hits)
    assert rows[0]["similarity"] == pytest.approx(0.70)
    # the background: the other hits' mean shrunk towards the prior, worth BACKGROUND_WEIGHT hits
    background = (0.5 + 0.4 + 0.3 + 0.2 + BACKGROUND_WEIGHT * BACKGROUND_PRIOR) / (4 + BACKGROUND_WEIGHT)
    assert rows[0]["above_background"] == pytest.approx(0.70 - background)
    assert rows[0]["margin"] == pytest.approx(0.20) and rows[1]["margin"] == pytest.approx(-0.20)
    assert (rows[0]["first"], rows[1]["first"]) == (1.0, 0.0)
    assert rows[0]["overlap"] == pytest.approx(4 / 6)  # signs, JWTs, auth, service; not package, manager
    assert (rows[0]["question"], rows[0]["chat"], rows[0]["generic"]) == (1.0, 0.0, 0.0)


@pytest.mark.parametrize("others", [0, 1, 2, 3])
def test_with_fewer_than_four_hits_every_feature_is_defined_by_the_prior_and_the_hits_there_are(others):
    """Issue 37.13's fault class: the decision with fewer than four hits. A lone memory is measured against the
    prior; each further hit moves the background towards the hits and can become the rival."""
    hits = [hit(1, 0.60)] + [hit(n, 0.25) for n in range(2, 2 + others)]
    row = features("how are the JWT login tokens signed?", hits)[0]
    background = (0.25 * others + BACKGROUND_WEIGHT * BACKGROUND_PRIOR) / (others + BACKGROUND_WEIGHT)
    assert row["above_background"] == pytest.approx(0.60 - background)
    assert row["margin"] == pytest.approx(0.60 - (0.25 if others else BACKGROUND_PRIOR))
    assert row["first"] == 1.0 and row["overlap"] > 0


def test_a_paraphrase_in_a_store_of_one_memory_is_injected_and_an_unrelated_prompt_is_not():
    """No feature needs other memories: the one memory of a new project's store is judged as in a large one."""
    shipped = Decision.load()
    lone = shipped.decide("how do we sign the login tokens?", [hit(1, 0.55)])
    assert lone[0].injected and lone[0].probability >= shipped.threshold
    assert not shipped.decide("write a haiku about autumn leaves", [hit(1, 0.05)])[0].injected
    crowd = shipped.decide("how do we sign the login tokens?", [hit(1, 0.55)] + [hit(n, 0.2) for n in range(2, 11)])
    assert crowd[0].injected and abs(crowd[0].probability - lone[0].probability) < 0.25


def test_a_prompt_of_conversational_words_only_is_chat_and_one_covered_word_counts_for_little():
    assert topic_words("thanks, that worked! continue please") == []
    assert features("thanks, that worked! continue please", [hit(1, 0.3)])[0]["chat"] == 1.0
    assert features("carry on with the auth", [hit(1, 0.1)])[0]["overlap"] == pytest.approx(1 / 3)
    assert stem("retries") == "retry" and stem("signed") == "sign" and stem("webhooks") == "webhook"
    assert is_generic("explain the difference between TCP and UDP") and is_generic("what is a sealed class?")
    assert not is_generic("what is our minimum iOS version?")


def decision(threshold: float = 0.5, max_items: int = 2) -> Decision:
    """A decision that looks at similarity alone (probability 0.5 at similarity 0.5)."""
    return Decision(weights={f: (10.0 if f == "similarity" else 0.0) for f in FEATURES}, intercept=0.0,
                    mean={f: (0.5 if f == "similarity" else 0.0) for f in FEATURES},
                    scale={f: 1.0 for f in FEATURES}, threshold=threshold, max_items=max_items)


def test_the_decision_injects_the_most_probable_hits_over_the_threshold_up_to_its_items():
    judged = decision().decide("how do we deploy to production?", [hit(1, 0.55), hit(2, 0.9), hit(3, 0.7),
                                                                    hit(4, 0.45)])
    assert [c.hit.memory.num for c in judged] == [2, 3, 1, 4]
    assert [c.reason for c in judged] == ["injected", "injected", "over max items", "below threshold"]
    assert judged[0].probability > judged[1].probability > 0.5 > judged[3].probability


def test_a_memory_already_shown_in_the_session_is_skipped_unless_its_version_changed():
    shown = hit(2, 0.9).memory
    judged = decision(max_items=1).decide("how do we deploy to production?", [hit(2, 0.9), hit(3, 0.7)],
                                          seen={shown.id: shown.version})
    assert [(c.hit.memory.num, c.reason) for c in judged] == [(2, "already injected in this session"),
                                                              (3, "injected")]
    again = decision(max_items=1).decide("how do we deploy?", [hit(2, 0.9)], seen={shown.id: shown.version - 1})
    assert again[0].injected


def test_judge_is_decide_but_an_automated_agents_memory_needs_the_words_to_back_its_vector():
    """What the hook injects and the dashboard shows (`Decision.judge`): a memory whose text an authority 4 or
    weaker wrote is taken on its similarity only with a keyword match covering half of the prompt."""
    import dataclasses

    def weak(h):
        return dataclasses.replace(h, memory=dataclasses.replace(h.memory, authority=5, content_authority=5))

    prompt = "how do we deploy to production?"
    hits = [weak(hit(1, 0.95)), weak(hit(2, 0.9, coverage=0.6)), hit(3, 0.85)]
    assert [c.reason for c in decision(max_items=3).decide(prompt, hits)] == ["injected"] * 3
    judged = decision(max_items=3).judge(prompt, hits)
    assert [(c.hit.memory.num, c.injected, c.reason) for c in judged] == [
        (1, False, NOT_EARNED), (2, True, "injected"), (3, True, "injected")]


def test_the_shipped_model_names_every_feature_and_documents_what_it_was_fitted_on(tmp_path):
    shipped = Decision.load()
    assert set(shipped.weights) == set(FEATURES) and 0 < shipped.threshold < 1 and shipped.max_items >= 1
    assert "dev stores" in shipped.about["fitted_on"] and set(shipped.about["features"]) == set(FEATURES)
    broken = tmp_path / "model.json"
    data = json.loads(MODEL_PATH.read_text())
    del data["weights"]["margin"]
    broken.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no weight, mean or scale for margin"):
        Decision.load(broken)
