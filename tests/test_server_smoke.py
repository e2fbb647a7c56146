from conftest import fake_vector


def test_an_added_memory_can_be_read_back_searched_and_synced(agents):
    a = agents("agent-a")
    result = a.add("The deploy script lives in ops/deploy.sh", tags=["ops"])
    assert result.seq == 1 and result.version == 1
    memory = a.get(result.memory_id)
    assert memory.content == "The deploy script lives in ops/deploy.sh"
    assert memory.author_agent == "agent-a"
    hits = a.search("deploy script", vector=fake_vector("The deploy script lives in ops/deploy.sh"))
    assert hits[0].memory.id == result.memory_id
    assert hits[0].score.vector_rank == 1 and hits[0].score.keyword_rank == 1
    entries = a.sync()
    assert [e.seq for e in entries] == [1]
