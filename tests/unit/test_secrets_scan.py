"""`mnemosync.kernel.secrets_scan` at the intake gate: credentials refused in every text field of every operation,
naming the kind (never the value); look-alikes, prose and code stored; secrets masked on the way out.

The cases are `tests/data/secrets/corpus.jsonl` (see the README there); the prose sample is the bench's
conversations and memories and this repository's manual (`ops.manual.pages`), the code sample
`tests/data/secrets/code_sample.jsonl`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mnemosync.kernel import secret_disguises, secrets_scan
from mnemosync.v1 import memory_pb2 as pb
from ops import manual

from helpers import fake_vector, refused

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "secrets"
MARK = "‖"


def _corpus() -> list[dict]:
    return [{**case, "text": case["text"].replace(MARK, "")}
            for case in map(json.loads, (DATA / "corpus.jsonl").read_text(encoding="utf-8").splitlines())]


CORPUS = _corpus()
SECRETS = [c for c in CORPUS if c["secret"]]
LOOK_ALIKES = [c for c in CORPUS if not c["secret"]]


def _jsonl(path: Path, key: str) -> list[str]:
    return [json.loads(line)[key] for line in path.read_text(encoding="utf-8").splitlines()]


def _prose() -> list[str]:
    bench = ROOT / "ops" / "bench" / "data"
    readme = [p for page in manual.pages() for p in page.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return (_jsonl(bench / "conversations" / "turns.jsonl", "text")
            + _jsonl(bench / "retrieval" / "memories.jsonl", "content") + readme)


def _code() -> list[str]:
    return _jsonl(DATA / "code_sample.jsonl", "text")


def _case_ids(cases: list[dict]) -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for c in cases:
        seen[c["case"]] = seen.get(c["case"], 0) + 1
        ids.append(f"{c['case']}-{seen[c['case']]}")
    return ids


def test_the_corpus_covers_at_least_60_kinds_each_with_a_secret_and_a_look_alike():
    kinds = {c["case"] for c in SECRETS}
    assert len(kinds) >= 60
    assert kinds == {c["case"] for c in LOOK_ALIKES}


@pytest.mark.parametrize("case", SECRETS, ids=_case_ids(SECRETS))
def test_every_secret_of_the_corpus_is_found_named_and_masked(case):
    found = secrets_scan.find(case["text"])
    assert found is not None and found.kind == case["kind"]
    masked = secrets_scan.mask(case["text"])
    assert f"[secret: {case['kind'].split(' (')[0]}" in masked and secrets_scan.find(masked) is None


@pytest.mark.parametrize("case", LOOK_ALIKES, ids=_case_ids(LOOK_ALIKES))
def test_no_look_alike_of_the_corpus_is_taken_for_a_secret(case):
    assert secrets_scan.find(case["text"]) is None
    assert secrets_scan.mask(case["text"]) == case["text"]


@pytest.mark.parametrize("sample", [_prose, _code], ids=["prose", "code"])
def test_ordinary_prose_and_code_raise_no_false_alarm(sample):
    units = sample()
    flagged = [(secrets_scan.find(u).kind, u[:160]) for u in units if secrets_scan.find(u)]
    assert len(units) > 2000
    assert flagged == [], f"{len(flagged)} of {len(units)} false positives"


def _add(**fields) -> pb.Operation:
    content = fields.pop("content", "Deploy notes")
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
        **{"scope": "user", "content": content, "embedding": fake_vector(content), **fields}))


def _on(memory_id: str, **op) -> pb.Operation:
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=1, **op)


FIELDS: dict[str, Callable[[str], pb.Operation]] = {
    "op_id": lambda s: pb.Operation(op_id=s, memory_id=str(uuid.uuid4()), restore=pb.RestoreOp()),
    "memory_id": lambda s: pb.Operation(op_id=str(uuid.uuid4()), memory_id=s, restore=pb.RestoreOp()),
    "scope": lambda s: _add(scope=s),
    "type": lambda s: _add(type=s),
    "tags": lambda s: _add(tags=["deploy", s]),
    "content": lambda s: _add(content=f"Notes for the deploy. {s} (do not lose)"),
    "trust": lambda s: _add(trust=s),
    "quote": lambda s: _add(trust="principle", quote=f"as Ana said: {s}"),
    "update content": lambda s: _on(str(uuid.uuid4()), update=pb.UpdateOp(content=s, embedding=fake_vector(s))),
    "update tags": lambda s: _on(str(uuid.uuid4()), update=pb.UpdateOp(tags=[s], replace_tags=True)),
    "reason": lambda s: _on(str(uuid.uuid4()), forget=pb.ForgetOp(reason=f"replaced by {s}")),
    "relation": lambda s: pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                                       link=pb.LinkOp(target_id=str(uuid.uuid4()), relation=s)),
    "unlink relation": lambda s: pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                                              unlink=pb.UnlinkOp(target_id=str(uuid.uuid4()), relation=s)),
    "link reason": lambda s: pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), link=pb.LinkOp(
        target_id=str(uuid.uuid4()), relation="semantic", reason=f"both mention {s}")),
    "target_id": lambda s: pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                                        link=pb.LinkOp(target_id=s, relation="semantic")),
    "merged_content": lambda s: _on(str(uuid.uuid4()), resolve_conflict=pb.ResolveConflictOp(
        conflict_id=1, merged_content=s, embedding=fake_vector(s))),
    "note": lambda s: _on(str(uuid.uuid4()), resolve_conflict=pb.ResolveConflictOp(
        conflict_id=1, keep_revision=1, note=f"kept it; {s}")),
    "redaction reason": lambda s: _on(str(uuid.uuid4()), redact=pb.RedactOp(reason=f"leaked {s}")),
}


def test_every_text_field_of_every_operation_refuses_every_secret_of_the_corpus(agents):
    a = agents("agent-a")
    missed = []
    for field, make in FIELDS.items():
        name = field.split()[-1]
        for case in SECRETS:
            try:
                a.append(make(case["text"]))
                code, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as err:
                code, details = err.code(), err.details()
            secretish = max(case["text"].replace("'", " ").replace('"', " ").split(), key=len)
            if (code != grpc.StatusCode.INVALID_ARGUMENT
                    or f"intake-no-secrets: {name} contains what looks like {case['kind']}" not in details
                    or secretish[-12:] in details):
                missed.append((field, case["case"], code.name, details[:120]))
    assert missed == []
    assert a.sync(0) == []


def test_a_key_id_in_a_tag_is_refused_before_tags_are_lower_cased(agents):
    a = agents("agent-a")
    key_id = next(c["text"].split()[-1] for c in SECRETS if c["case"] == "aws-access-key-id")
    code, details = refused(lambda: a.add("Deploy notes", tags=[key_id]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "tags contains what looks like an AWS access key id" in details
    assert key_id.lower() not in details and key_id not in details


@pytest.mark.parametrize("case", LOOK_ALIKES[::4], ids=_case_ids(LOOK_ALIKES)[::4])
def test_a_look_alike_is_stored_as_written(agents, case):
    a = agents("agent-a")
    result = a.add(case["text"])
    assert a.get(result.memory_id).content == case["text"]


_HINTS = sorted({h for rule in secrets_scan.RULES for h in rule.hints})


@given(st.lists(st.one_of(st.sampled_from(_HINTS), st.text(max_size=6)), max_size=12))
@settings(max_examples=300, deadline=None)
def test_the_one_pass_hint_lookup_runs_exactly_the_rules_whose_hints_a_text_holds(parts):
    lowered = "".join(parts).lower()
    held = set(secrets_scan._ALL.hints_in(lowered))
    for rules in (secrets_scan._ALL, secrets_scan._ANCHORED):
        assert rules.candidates(lowered) == [r for r in rules.rules if r.may_match(lowered)] == rules.of_hints(held)


def _pieces(text: str, heads) -> list[tuple]:
    return [(r.text, r.label, r.starts, [r.where(i) for i in range(len(r.text))])  # type: ignore[misc]
            for r in (secret_disguises.pieces(text, heads) if heads is not None else ())]


_KEYISH = st.text("ABCXYZ0123456789abcxyz_-.", min_size=1, max_size=12)


@given(st.lists(st.one_of(st.sampled_from(_HINTS), st.sampled_from([h.upper() for h in _HINTS]), _KEYISH,
                          st.sampled_from([" ", " and ", "\n", "\u212a", "\u017f", "é"]), st.text(max_size=4)),
                max_size=16))
@example(["note ", "\u017fk", "0123ABCdef", " and later ", "42"])  # a long s is an s to a case-insensitive pattern
@settings(max_examples=400, deadline=None)
def test_the_piece_heads_of_the_prefixes_a_text_holds_find_what_every_prefix_finds(parts):
    text = "".join(parts)
    held = set(secrets_scan._ALL.hints_in(text.lower()))
    assert _pieces(text, secrets_scan._piece_heads(text, held)) == _pieces(text, secrets_scan._PIECE_HEADS)


def test_a_key_split_over_two_tags_or_over_content_and_quote_and_a_development_agent_id_are_refused(agents):
    """The gate looked at each text alone, and not at development-mode agent ids at all."""
    a = agents("agent-a")
    key_id = next(c["text"].split()[-1] for c in SECRETS if c["case"] == "aws-access-key-id")
    head, tail = key_id[:9], key_id[9:]
    code, details = refused(lambda: a.append(_add(tags=[head, tail])))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "intake-no-secrets: tags (together)" in details
    code, details = refused(lambda: a.append(_add(content=f"the deploy key id is {head}", trust="principle",
                                                  quote=f"{tail} as Ana said")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "intake-no-secrets: content and quote (together)" in details
    assert key_id not in details and tail not in details
    sneaky = agents(f"ci-{key_id}")
    code, details = refused(lambda: sneaky.append(_add()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "intake-no-secrets: agent id" in details
    assert a.append(_add(tags=["deploy", "ops"], content="Deploys go through ops/deploy.sh")).results[0].seq


def test_a_key_split_over_content_and_quote_with_words_between_or_behind_html_entities_is_refused(agents):
    """Issue 37 item 11: the halves of an AWS key id in the content and the quote with words between them, and a
    credential with an HTML entity in its prefix, were stored."""
    a = agents("agent-a")
    key_id = next(c["text"].split()[-1] for c in SECRETS if c["case"] == "aws-access-key-id")
    head, tail = key_id[:12], key_id[12:]
    code, details = refused(lambda: a.append(_add(content=f"the deploy key id begins {head}", trust="principle",
                                                  quote=f"and, Ana said after a pause, it ends {tail}")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "intake-no-secrets: content and quote (together) contains what looks like an AWS access key id (in " \
           "pieces with words between)" in details and tail not in details
    code, details = refused(lambda: a.append(_add(content=f"deploy user key: &#65;{key_id[1:]}")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "intake-no-secrets: content contains what looks like an AWS access key id (with HTML entities)" in details
    assert a.sync(0) == []


def test_a_secret_is_found_every_time_however_many_clean_texts_were_scanned_before_and_between():
    """`find` remembers short texts it found clean (an Append's scope, type and tags repeat): a secret is never
    among them, whether it was scanned before or after its look-alike, and the memory stays bounded."""
    short = [c for c in CORPUS if len(c["text"]) <= 256]
    for _ in range(2):
        for case in short:
            assert (secrets_scan.find(case["text"]) is not None) == case["secret"], case["text"]
    for i in range(5000):
        assert secrets_scan.find(f"project:p{i}") is None
    assert len(secrets_scan._KNOWN_CLEAN._texts) <= secrets_scan._KNOWN_CLEAN.size
    assert all(secrets_scan.find(c["text"]) is not None for c in short if c["secret"])
