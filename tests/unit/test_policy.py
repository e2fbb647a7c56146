"""`mnemosync.server.policy`: the policy file, its errors named by key, and its layer rules."""

from __future__ import annotations

import pytest

from mnemosync.kernel.errors import FailedPrecondition
from mnemosync.server.policy import load as load_policy


@pytest.mark.parametrize("text,message", [
    ("[agents.a]\nauthority = 9\n", "[agents.a] authority must be an integer from 1 (human) to 6"),
    ("[agents.a]\nrole = 'x'\n", "unknown key 'role' in [agents.a]"),
    ("[agents.a]\nscopes = ['has space']\n", "[agents.a] scopes: scope must be"),
    ("[conflicts]\nsemantic_threshold = 2\n", "semantic_threshold must be a number from 0 (off) to 1"),
    ("[layers.mythic]\ndecay_rate = 1\n", "unknown layer [layers.mythic]"),
    ("[layers.factual]\narchivable = 'yes'\n", "[layers.factual] archivable must be true or false"),
    ("[defaults\n", "is not valid TOML"),
])
def test_a_bad_policy_file_stops_the_server_naming_the_key(tmp_path, text, message):
    path = tmp_path / "policy.toml"
    path.write_text(text)
    with pytest.raises(FailedPrecondition) as err:
        load_policy(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_the_policy_file_sets_layer_rules_over_the_seeds_defaults(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text("[layers.factual]\narchive_after_days = 60\n")
    layers = load_policy(path).rules.layers
    assert layers[3].archive_after_days == 60 and layers[3].decay_rate == 0.10
    assert (layers[1].decay_rate, layers[1].archivable, layers[4].archive_importance_below) == (0.0, False, 0.15)
