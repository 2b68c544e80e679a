"""HostGroup: a host's share of a checkpoint's totals, the group's totals from a host's, and
the agreement it steps and leaves through."""

import pytest

from impala_rep.learner.host_group import HostGroup


class Sync:
    """A stand-in for HostSync: records the calls; `total` adds the other hosts' counts."""

    def __init__(self, others=0, answer=(True, False)):
        self.others, self.answer, self.calls = others, answer, []

    def agree(self, *, ready, checkpoint):
        self.calls.append((ready, checkpoint))
        return self.answer

    def total(self, count):
        return count + self.others


def test_a_single_host_is_a_group_of_one():
    group = HostGroup()
    assert not group.lockstep and group.sync is None
    assert group.share(1000, 7) == (1000, 7)
    assert group.totals(1000, 7) == (1000, 7)


def test_each_host_resumes_from_an_equal_share_and_the_chief_takes_the_rest():
    sync = Sync()
    shares = [HostGroup(host, 3, sync).share(300, 11) for host in range(3)]
    assert shares == [(100, 5), (100, 3), (100, 3)]
    assert sum(episodes for _, episodes in shares) == 11


def test_totals_are_the_groups():
    group = HostGroup(1, 2, Sync(others=5))
    assert group.lockstep
    assert group.totals(120, 3) == (240, 8)
    # A resume onto the same hosts gives each its own frames back.
    assert group.share(*group.totals(120, 3))[0] == 120


def test_agreement_and_leaving_go_through_the_sync():
    sync = Sync(answer=(False, True))
    group = HostGroup(0, 2, sync)
    assert group.agree(ready=True, checkpoint=False) == (False, True)
    group.leave()
    assert sync.calls == [(True, False), (False, False)]


@pytest.mark.parametrize(
    "host, hosts, sync", [(0, 0, None), (2, 2, Sync()), (-1, 2, Sync()), (0, 2, None)]
)
def test_an_impossible_group_is_refused(host, hosts, sync):
    with pytest.raises(ValueError):
        HostGroup(host, hosts, sync)
