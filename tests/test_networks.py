"""NetworkAgent (shallow / deep / minatar / MLP torso, optional LSTM), make_agent, and a learner
step on pixels and on vectors with memory."""

import pickle

import numpy as np
import pytest
import tensorflow as tf
from random_unrolls import random_unroll

from impala_rep import Replicator
from impala_rep.agent import AgentInputs, MLPAgent
from impala_rep.learner.learner import Learner
from impala_rep.networks import CNNAgent, NetworkAgent, make_agent
from impala_rep.unroll import Unroll

OBS = (36, 36, 4)
A = 3
LSTM = 8


def random_inputs(lead, seed=0, first_p=0.3):
    rng = np.random.default_rng(seed)
    return AgentInputs(
        observation=rng.integers(0, 256, (*lead, *OBS)).astype(np.uint8),
        prev_action=rng.integers(0, A, lead).astype(np.int32),
        prev_reward=(3 * rng.normal(size=lead)).astype(np.float32),
        first=rng.random(lead) < first_p,
    )


def built(torso="shallow", use_lstm=False):
    agent = CNNAgent(num_actions=A, torso=torso, use_lstm=use_lstm, lstm_size=LSTM)
    agent.build(OBS)
    return agent


def random_state(b, seed):
    rng = np.random.default_rng(seed)
    return tuple(tf.constant(rng.normal(size=(b, LSTM)).astype(np.float32)) for _ in range(2))


def test_every_torso_name_has_its_class_and_every_class_its_name():
    # The names are stated once, TensorFlow-free (`impala_rep.config.schema`); the classes
    # live here, keyed by them.
    from impala_rep import networks
    from impala_rep.config import NETWORKS
    from impala_rep.config.schema import TORSOS

    assert tuple(networks._TORSO_CLASSES) == TORSOS
    assert NETWORKS == ("auto", "mlp", *TORSOS)
    assert networks.TORSOS is TORSOS and networks.NETWORKS is NETWORKS
    for name in TORSOS:
        assert isinstance(CNNAgent(num_actions=A, torso=name)._torso, networks._TORSO_CLASSES[name])


@pytest.mark.parametrize("torso", ["shallow", "deep"])
@pytest.mark.parametrize("use_lstm", [False, True])
def test_output_shapes(torso, use_lstm):
    T, B = 3, 2
    agent = built(torso, use_lstm)
    out, state = agent.step(random_inputs([B]), agent.initial_state(B))
    assert out.policy_logits.shape == (B, A) and out.baseline.shape == (B,)
    out, final = agent.unroll(random_inputs([T, B]), agent.initial_state(B))
    assert out.policy_logits.shape == (T, B, A) and out.baseline.shape == (T, B)
    if use_lstm:
        assert [s.shape for s in state] == [(B, LSTM)] * 2
        assert [s.shape for s in final] == [(B, LSTM)] * 2
        assert all(s.dtype == tf.float32 for s in final)
    else:
        assert state == () and final == ()


@pytest.mark.parametrize("torso", ["shallow", "deep", "minatar"])
def test_a_new_agent_starts_near_the_uniform_policy(torso):
    # The policy head starts 100x smaller than Keras' default (networks.py says why):
    # every state's policy is then close to uniform, whatever the image.
    agent = CNNAgent(num_actions=6, torso=torso)
    agent.build(OBS)
    out, _ = agent.step(
        random_inputs([64], first_p=0.0)._replace(prev_action=np.zeros([64], np.int32)), ()
    )
    logits = out.policy_logits.numpy()
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    entropy = -(np.exp(log_p) * log_p).sum(-1)
    assert entropy.min() > np.log(6) - 1e-3
    # ... and the head is not zero: the states' logits still differ.
    assert np.ptp(logits, axis=0).max() > 1e-5


@pytest.mark.parametrize("torso, convs", [("shallow", 2), ("deep", 3 + 3 * 2 * 2)])
def test_conv_layer_count_and_build_idempotent(torso, convs):
    agent = built(torso, use_lstm=True)
    assert sum(isinstance(layer, tf.keras.layers.Conv2D) for layer in agent.layers) == convs
    n = len(agent.trainable_variables)
    agent.build(OBS)  # a second build creates nothing
    assert len(agent.trainable_variables) == n
    # conv kernels+biases, torso Dense, LSTM (kernel, recurrent, bias), 2 heads
    assert n == 2 * convs + 2 + 3 + 4


def test_initial_state():
    assert CNNAgent(num_actions=A).initial_state(5) == ()
    h, c = CNNAgent(num_actions=A, use_lstm=True, lstm_size=LSTM).initial_state(5)
    assert h.shape == c.shape == (5, LSTM)
    assert not np.any(h.numpy()) and not np.any(c.numpy())


def assert_unroll_equals_steps(agent, inputs, state0, unroll):
    """`unroll` over `[T, B]` inputs gives what stepping through them one by one gives, and
    the same final state; returns the unroll's outputs."""
    out, final = unroll(inputs, state0)
    state = state0
    for t in range(len(inputs.first)):
        step_out, state = agent.step(AgentInputs(*(x[t] for x in inputs)), state)
        np.testing.assert_allclose(out.policy_logits[t], step_out.policy_logits, atol=1e-5)
        np.testing.assert_allclose(out.baseline[t], step_out.baseline, atol=1e-5)
    for a, b in zip(final, state):
        np.testing.assert_allclose(a, b, atol=1e-5)
    return out


@pytest.mark.parametrize("torso", ["shallow", "deep"])
def test_unroll_equals_steps(torso):
    T, B = 5, 3
    agent = built(torso, use_lstm=True)
    inputs = random_inputs([T, B], seed=1)
    first = np.zeros((T, B), bool)
    first[2, 0] = first[3, 1] = first[3, 2] = True  # resets in the middle of the unroll
    inputs = inputs._replace(first=first)
    state0 = random_state(B, seed=2)

    assert_unroll_equals_steps(agent, inputs, state0, agent.unroll)


def test_unroll_equals_steps_in_a_graph():
    # The learner traces unroll with tf.function; tf.scan must work there too.
    T, B = 4, 2
    agent = built("shallow", use_lstm=True)
    inputs = random_inputs([T, B], seed=3)
    state0 = random_state(B, seed=4)
    graph_out, graph_final = tf.function(agent.unroll)(inputs, state0)
    eager_out, eager_final = agent.unroll(inputs, state0)
    np.testing.assert_allclose(graph_out.policy_logits, eager_out.policy_logits, atol=1e-5)
    for a, b in zip(graph_final, eager_final):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_lstm_reset_at_first():
    B = 3
    agent = built("shallow", use_lstm=True)
    inputs = random_inputs([B], seed=5)
    s1, s2 = random_state(B, seed=6), random_state(B, seed=7)

    reset = inputs._replace(first=np.ones(B, bool))
    (o1, n1), (o2, n2) = agent.step(reset, s1), agent.step(reset, s2)
    np.testing.assert_array_equal(o1.policy_logits, o2.policy_logits)
    np.testing.assert_array_equal(o1.baseline, o2.baseline)
    for a, b in zip(n1, n2):
        np.testing.assert_array_equal(a, b)
    # ... and equals starting from the initial (zero) state.
    o0, _ = agent.step(reset, agent.initial_state(B))
    np.testing.assert_array_equal(o0.policy_logits, o1.policy_logits)

    carry = inputs._replace(first=np.zeros(B, bool))
    (o1, _), (o2, _) = agent.step(carry, s1), agent.step(carry, s2)
    assert np.all(np.abs(o1.baseline.numpy() - o2.baseline.numpy()) > 0)


def test_uint8_is_scaled_like_prescaled_float():
    B = 2
    agent = built("deep")
    inputs = random_inputs([B], seed=8)
    as_float = inputs._replace(observation=inputs.observation.astype(np.float32) / 255.0)
    (u, _), (f, _) = agent.step(inputs, ()), agent.step(as_float, ())
    np.testing.assert_allclose(u.policy_logits, f.policy_logits, atol=1e-5)
    np.testing.assert_allclose(u.baseline, f.baseline, atol=1e-5)
    with pytest.raises(TypeError, match="uint8"):
        agent.step(inputs._replace(observation=inputs.observation.astype(np.int32)), ())


def test_set_weights_roundtrip_and_count_check():
    a, b = built("shallow", use_lstm=True), built("shallow", use_lstm=True)
    b.set_weights(a.get_weights())
    inputs = random_inputs([2], seed=9)
    (oa, _), (ob, _) = a.step(inputs, a.initial_state(2)), b.step(inputs, b.initial_state(2))
    np.testing.assert_array_equal(oa.policy_logits, ob.policy_logits)
    with pytest.raises(ValueError, match="expected"):
        b.set_weights(a.get_weights()[:-1])


def test_constructor_errors():
    with pytest.raises(ValueError, match="torso"):
        CNNAgent(num_actions=A, torso="resnet")
    with pytest.raises(ValueError, match="num_actions"):
        CNNAgent(num_actions=0)
    with pytest.raises(ValueError, match=r"\[H, W, C\]"):
        CNNAgent(num_actions=A).build((4,))


def test_make_agent_selection():
    cases = [
        (dict(observation_shape=(4,)), MLPAgent, {}),
        (dict(observation_shape=(4,), network="mlp", hidden_sizes=(8,)), MLPAgent, {}),
        (
            dict(observation_shape=(4,), use_lstm=True, hidden_sizes=(8, 6)),
            NetworkAgent,
            dict(torso_name="mlp", use_lstm=True, lstm_size=6),
        ),
        (
            dict(observation_shape=(4,), network="mlp", use_lstm=True),
            NetworkAgent,
            dict(torso_name="mlp", use_lstm=True, lstm_size=64),
        ),
        (dict(observation_shape=OBS), CNNAgent, dict(torso_name="shallow", use_lstm=False)),
        (
            dict(observation_shape=OBS, use_lstm=True),
            CNNAgent,
            dict(torso_name="shallow", use_lstm=True),
        ),
        (
            dict(observation_shape=OBS, network="deep"),
            CNNAgent,
            dict(torso_name="deep", use_lstm=False),
        ),
        (
            dict(observation_shape=OBS, network="shallow", use_lstm=True),
            CNNAgent,
            dict(torso_name="shallow", use_lstm=True),
        ),
    ]
    for kwargs, cls, attrs in cases:
        factory = make_agent(num_actions=A, **kwargs)
        factory = pickle.loads(pickle.dumps(factory))  # shipped to Ray actors
        agent = factory()
        assert type(agent) is cls and agent.num_actions == A
        for name, value in attrs.items():
            assert getattr(agent, name) == value


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(observation_shape=OBS, network="mlp"), "'mlp'.*rank-1"),
        (dict(observation_shape=(4,), network="shallow"), r"'shallow'.*\[H, W, C\]"),
        (dict(observation_shape=(4,), network="deep"), r"'deep'.*\[H, W, C\]"),
        (dict(observation_shape=(4, 4)), "'auto'.*rank 1.*3"),
        (
            dict(observation_shape=OBS, network="resnet"),
            "'auto', 'mlp', 'shallow', 'deep'.*'resnet'",
        ),
        (dict(observation_shape=OBS, num_actions=0), "num_actions"),
    ],
)
def test_make_agent_errors(kwargs, match):
    kwargs.setdefault("num_actions", A)
    with pytest.raises(ValueError, match=match):
        make_agent(**kwargs)


def test_learner_steps_with_cnn_lstm_agent():
    T, B = 4, 2
    agent = CNNAgent(num_actions=A, torso="shallow", use_lstm=True, lstm_size=LSTM)
    learner = Learner(
        agent=agent, replicator=Replicator("cpu"), observation_shape=OBS, total_steps=10
    )
    rng = np.random.default_rng(10)
    batch = random_unroll(
        T=T,
        B=B,
        obs_size=1,
        num_actions=A,
        seed=10,
        initial_state=lambda r: tuple(
            r.normal(size=(B, LSTM)).astype(np.float32) for _ in range(2)
        ),
    )
    batch = batch._replace(observations=rng.integers(0, 256, (T + 1, B, *OBS)).astype(np.uint8))
    assert isinstance(batch, Unroll)
    _, before = learner.get_weights()
    for _ in range(2):
        metrics = learner.step(batch)
        assert np.isfinite(metrics["loss"]) and np.isfinite(metrics["grad_norm"])
    version, after = learner.get_weights()
    assert version == 2
    assert len(after) == len(before)
    assert any(not np.allclose(a, b) for a, b in zip(before, after))


def test_observation_scaling_standardises_each_dimension():
    from impala_rep.agent import observation_scaling

    rng = np.random.default_rng(0)
    x = rng.normal([-0.5, 0.0, 3.0], [0.075, 0.0064, 0.0], size=(1000, 3))
    offset, scale = observation_scaling(x.mean(0), x.std(0))
    z = (x - offset) * scale
    np.testing.assert_allclose(z[:, :2].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(z[:, :2].std(0), 1, rtol=1e-4)
    np.testing.assert_allclose(z[:, 2], 0, atol=1e-6)  # constant: mean removed, not divided by 0
    with pytest.raises(ValueError, match="finite"):
        observation_scaling([0.0, np.nan], [1.0, 1.0])


def test_mlp_agent_with_normalization_is_the_agent_without_it_on_standardised_inputs():
    from impala_rep.agent import AgentInputs, MLPAgent, observation_scaling

    mean, std = (-0.524, 0.0), (0.0751, 0.0064)
    scaled = MLPAgent(num_actions=3, observation_normalization=(mean, std))
    plain = MLPAgent(num_actions=3)
    scaled.build((2,))
    plain.build((2,))
    plain.set_weights(scaled.get_weights())  # the normalization adds no variable
    obs = np.random.default_rng(0).normal(mean, std, size=(5, 2)).astype(np.float32)
    offset, scale = observation_scaling(mean, std)

    def inputs(o):
        return AgentInputs(o, np.zeros(5, np.int32), np.zeros(5, np.float32), np.zeros(5, bool))

    out, _ = scaled.step(inputs(obs), ())
    ref, _ = plain.step(inputs((obs - offset) * scale), ())
    np.testing.assert_allclose(out.policy_logits, ref.policy_logits, rtol=1e-5)
    np.testing.assert_allclose(out.baseline, ref.baseline, rtol=1e-5)


def test_bounds_normalization_maps_finite_bounds_onto_minus_one_to_one():
    from impala_rep.agent import bounds_normalization, observation_scaling

    big = float(np.finfo(np.float32).max)
    low, high = (-1.2, -0.07, -big, -np.inf, 2.0), (0.6, 0.07, big, np.inf, 2.0)
    offset, scale = observation_scaling(*bounds_normalization(low, high))
    x = np.array([[-1.2, -0.07, 5.0, -3.0, 2.0], [0.6, 0.07, -5.0, 3.0, 2.0]], np.float32)
    # MountainCar's position and velocity span [-1, 1]; unbounded (infinite, or float32's max,
    # which gymnasium envs write for "unbounded") and zero-width dimensions pass unchanged.
    np.testing.assert_allclose(
        (x - offset) * scale, [[-1, -1, 5, -3, 2], [1, 1, -5, 3, 2]], rtol=1e-6, atol=1e-6
    )


VEC = 5


def vector_inputs(lead, seed=0, first_p=0.3):
    rng = np.random.default_rng(seed)
    return AgentInputs(
        observation=rng.normal(size=(*lead, VEC)).astype(np.float32),
        prev_action=rng.integers(0, A, lead).astype(np.int32),
        prev_reward=(3 * rng.normal(size=lead)).astype(np.float32),
        first=rng.random(lead) < first_p,
    )


def mlp_lstm(normalization=None):
    agent = NetworkAgent(
        num_actions=A,
        torso="mlp",
        use_lstm=True,
        lstm_size=LSTM,
        hidden_sizes=(16, 12),
        observation_normalization=normalization,
    )
    agent.build((VEC,))
    return agent


def test_the_mlp_torso_takes_an_lstm_core_that_remembers_and_resets():
    """Vectors through the MLP torso into the core: unrolling equals stepping (resets in the
    middle included), the state changes the output, and `first` clears it."""
    T, B = 5, 3
    agent = mlp_lstm()
    assert [type(layer).__name__ for layer in agent.layers] == ["Dense", "Dense", "LSTMCell"] + [
        "Dense"
    ] * 2
    inputs = vector_inputs([T, B], seed=1)
    first = np.zeros((T, B), bool)
    first[2, 0] = first[3, 1] = True
    inputs = inputs._replace(first=first)
    state0 = random_state(B, seed=2)
    out = assert_unroll_equals_steps(agent, inputs, state0, tf.function(agent.unroll))
    assert out.policy_logits.shape == (T, B, A) and out.baseline.shape == (T, B)
    step = vector_inputs([B], seed=3)
    carry, reset = step._replace(first=np.zeros(B, bool)), step._replace(first=np.ones(B, bool))
    (o1, _), (o2, _) = agent.step(carry, random_state(B, 4)), agent.step(carry, random_state(B, 5))
    assert np.all(np.abs(o1.baseline.numpy() - o2.baseline.numpy()) > 0)  # it remembers
    (r1, _), (r2, _) = agent.step(reset, random_state(B, 4)), agent.step(reset, random_state(B, 5))
    np.testing.assert_array_equal(r1.baseline, r2.baseline)  # ... until an episode starts


def test_the_mlp_torso_standardises_its_inputs_as_the_mlp_agent_does():
    mean, std = [1.0, -2.0, 0.5, 3.0, 0.0], [2.0, 0.5, 1.0, 4.0, 1.0]
    plain, scaled = mlp_lstm(), mlp_lstm((mean, std))
    scaled.set_weights(plain.get_weights())
    inputs = vector_inputs([4], seed=6)
    state = plain.initial_state(4)
    standardised = (inputs.observation - np.float32(mean)) / np.float32(std)
    expected, _ = plain.step(inputs._replace(observation=standardised), state)
    got, _ = scaled.step(inputs, state)
    np.testing.assert_allclose(got.policy_logits, expected.policy_logits, atol=1e-5)
    np.testing.assert_allclose(got.baseline, expected.baseline, atol=1e-5)


def test_each_torso_refuses_observations_of_the_other_rank():
    with pytest.raises(ValueError, match=r"torso 'mlp' needs \[D\], got shape \(36, 36, 4\)"):
        NetworkAgent(num_actions=A, torso="mlp", use_lstm=True).build(OBS)
    with pytest.raises(ValueError, match=r"torso 'shallow' needs image observations"):
        NetworkAgent(num_actions=A, torso="shallow").build((VEC,))
    assert CNNAgent is NetworkAgent  # the former name still builds the pixel agent


def test_learner_steps_with_an_mlp_lstm_agent():
    """A learner trains the MLP torso's core on vector unrolls whose state it carries."""
    T, B = 4, 4
    agent = NetworkAgent(num_actions=A, torso="mlp", use_lstm=True, lstm_size=LSTM)
    learner = Learner(
        agent=agent,
        replicator=Replicator("cpu"),
        observation_shape=(VEC,),
        total_steps=10,
        autograph=False,
    )
    before = [w.copy() for w in agent.get_weights()]
    rng = np.random.default_rng(8)
    state = tuple(rng.normal(size=(B, LSTM)).astype(np.float32) for _ in range(2))
    batch = random_unroll(T=T, B=B, obs_size=VEC, num_actions=A, initial_state=lambda r: state)
    metrics = learner.step(batch)
    assert np.isfinite(metrics["loss"])
    moved = [not np.allclose(a, b) for a, b in zip(before, agent.get_weights())]
    assert all(moved), moved  # the LSTM's and the torso's weights among them


@pytest.mark.parametrize("kind", ["gaussian", "multi"])
def test_an_lstm_over_the_mlp_acts_with_any_distribution_and_its_unroll_is_its_steps(kind):
    from impala_rep.distributions import DiagGaussian, MultiCategorical

    distribution = (
        DiagGaussian([-1.0, -2.0], [1.0, 2.0]) if kind == "gaussian" else MultiCategorical([2, 3])
    )
    T, B = 4, 3
    agent = NetworkAgent(
        num_actions=distribution.num_params,
        torso="mlp",
        use_lstm=True,
        lstm_size=6,
        hidden_sizes=(8,),
        action_distribution=distribution,
    )
    agent.build((VEC,))
    rng = np.random.default_rng(0)
    if kind == "gaussian":
        prev_actions = rng.normal(size=(T, B, 2)).astype(np.float32)
    else:
        prev_actions = np.stack([rng.integers(0, n, size=(T, B)) for n in (2, 3)], -1)
        prev_actions = prev_actions.astype(np.int32)
    inputs = vector_inputs([T, B], seed=1)._replace(prev_action=prev_actions)
    state = tuple(tf.constant(rng.normal(size=(B, 6)).astype(np.float32)) for _ in range(2))
    out = assert_unroll_equals_steps(agent, inputs, state, agent.unroll)
    assert out.policy_logits.shape == (T, B, distribution.num_params)
    if kind == "gaussian":  # the log-stds: one free variable, the same in every state
        assert agent.trainable_variables[-1].shape == (2,)
        # Starting at 0 relative to each dimension's half range (1 and 2): log 1 and log 2.
        log_stds = np.broadcast_to(np.log([1.0, 2.0], dtype=np.float32), (T, B, 2))
        np.testing.assert_allclose(out.policy_logits[..., 2:], log_stds, rtol=1e-6)
    # The previous action reaches the core: another one changes the outputs.
    other = inputs._replace(prev_action=np.roll(prev_actions, 1, axis=1))
    changed, _ = agent.unroll(other, state)
    assert not np.allclose(changed.baseline, out.baseline)
