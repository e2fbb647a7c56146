"""`mnemosync.server.chain_walks`: one walk of the hash chain at a time, shared only with callers that asked before
it began;
and VerifyChain over the real server."""

from __future__ import annotations

import threading

from mnemosync.kernel import overview
from mnemosync.kernel.entry import ChainReport
from mnemosync.kernel.overview import ChainCheck
from mnemosync.server.chain_walks import SharedWalk
from mnemosync.v1 import memory_pb2 as pb

from helpers import wait_until


def test_callers_that_wait_share_the_walk_that_began_after_they_asked():
    release, walks = threading.Event(), []

    def walk() -> ChainReport:
        walks.append(len(walks) + 1)
        if len(walks) == 1:
            release.wait(10)
        return ChainReport(len(walks), len(walks), "h")

    shared = SharedWalk(walk, lambda: 0)
    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(shared.check().report.entries))
    first.start()
    wait_until(lambda: walks == [1], message="the first walk never began")
    waiting = [threading.Thread(target=lambda: results.append(shared.check().report.entries)) for _ in range(3)]
    for t in waiting:
        t.start()
    release.set()
    for t in (first, *waiting):
        t.join(10)
    assert walks == [1, 2]  # the three that asked during walk 1 share walk 2, which began after they asked
    assert sorted(results) == [1, 2, 2, 2]


def test_verify_chain_walks_the_servers_chain_now(agents):
    a = agents("agent-a")
    for text in ("one", "two"):
        a.add(text)
    answer = a.call("VerifyChain", pb.VerifyChainRequest())
    assert (answer.ok, answer.entries, answer.head_seq, answer.first_bad_seq) == (True, 2, 2, 0)
    a.add("three")
    assert a.call("VerifyChain", pb.VerifyChainRequest()).entries == 3


def test_a_broken_chain_received_over_the_wire_names_its_first_bad_entry():
    sent = ChainCheck(ChainReport(4, 4, "h", ((3, "entry 3 does not follow entry 2"),), 2, 1, 0, True), 99)
    received = overview.chain(overview.chain_proto(sent)).report
    assert (received.ok, received.first_bad_seq, received.problem) == (False, 3, "entry 3 does not follow entry 2")
    sound = overview.chain(overview.chain_proto(ChainCheck(ChainReport(4, 4, "h"), 99))).report
    assert (sound.ok, sound.first_bad_seq, sound.problem) == (True, None, "")
