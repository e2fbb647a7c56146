"""`mnemosync.agent.dashboard.word_diff`: the pieces put both texts back together, word by word."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mnemosync.agent.dashboard.word_diff import Piece, word_diff

texts = st.lists(st.sampled_from(["the", "cache", "TTL", "is", "30", "60", "seconds", " ", "  ", "\n", "é"]),
                 max_size=30).map("".join)


@given(texts, texts)
def test_kept_and_added_pieces_make_the_new_text_and_kept_and_removed_the_old(before, after):
    pieces = word_diff(before, after)
    assert "".join(p.text for p in pieces if p.kind != "removed") == after
    assert "".join(p.text for p in pieces if p.kind != "added") == before


def test_a_changed_word_shows_as_the_old_word_removed_and_the_new_one_added():
    assert word_diff("the TTL is 30 seconds", "the TTL is 60 seconds") == [
        Piece("same", "the TTL is "), Piece("removed", "30"), Piece("added", "60"), Piece("same", " seconds")]
