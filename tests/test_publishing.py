"""WeightPublisher: a step publishes only once the weights before were handed out; the end
publishes the last weights; a non-chief host hands out [None] and never reads weights."""

from impala_rep.learner.publishing import WeightPublisher


class Agent:
    """Weights that name the step they are of, and a log of what was published."""

    def __init__(self):
        self.step, self.published = 0, []

    def read(self):
        return [self.step]

    def publish(self, weights):
        self.published.append(weights[0])
        return ("published", weights[0])


def test_publishes_at_once_then_only_after_a_hand_out():
    agent = Agent()
    publisher = WeightPublisher(read_weights=agent.read, publish=agent.publish, version=0)
    assert agent.published == [0] and publisher.version == 0
    for agent.step in (1, 2, 3):  # nobody asked: nothing published
        publisher.stepped(agent.step)
    assert agent.published == [0]
    assert publisher.hand_out() == (0, [("published", 0)])
    agent.step = 4
    publisher.stepped(4)
    publisher.stepped(4)  # not handed out since
    assert agent.published == [0, 4] and publisher.version == 4
    assert publisher.hand_out() == (4, [("published", 4)])
    assert publisher.hand_out() == (4, [("published", 4)])  # asking again publishes nothing
    assert agent.published == [0, 4]


def test_the_end_publishes_the_last_weights_once():
    agent = Agent()
    publisher = WeightPublisher(read_weights=agent.read, publish=agent.publish, version=0)
    agent.step = 2
    publisher.stepped(2)
    publisher.finish(2)
    publisher.finish(2)
    assert agent.published == [0, 2]
    publisher.hand_out()
    publisher.stepped(2)  # handed out, stepped: published again, so the end adds none
    publisher.finish(2)
    assert agent.published == [0, 2, 2]


def test_a_host_that_does_not_publish_hands_out_none():
    def read():
        raise AssertionError("a non-chief host reads no weights")

    publisher = WeightPublisher(read_weights=read, publish=None, version=3)
    assert publisher.hand_out() == (3, [None])
    publisher.stepped(4)
    publisher.finish(5)
    assert publisher.hand_out() == (5, [None])
