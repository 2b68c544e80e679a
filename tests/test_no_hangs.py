"""No hangs when joining or placing on Ray: what Ray would wait for forever is refused, or
given a bounded time and then named.

Through the `train` command's `main`, in this process: a cluster address where no cluster
answers (`auto` with none on this machine, RAY_ADDRESS naming a dead one, `ray://`) exits 2
at once with one line and writes nothing. On the session's Ray (conftest.py), with only the
time limits shortened: a learner Ray cannot place, a learner that does not finish starting,
and actors Ray cannot place each end with one line naming what did not answer. The per-node
GPU check needs GPUs this machine does not have, so it is tested on `ray.nodes()`-shaped data.
"""

import io
import socket
import time

import pytest
from in_process_cli import refused_in_process

from impala_rep.config import TrainConfig
from impala_rep.run.errors import SetupError
from impala_rep.run.ray_cluster import check_resources


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _recorded_cluster() -> str | None:
    from ray._private.utils import read_ray_address

    return read_ray_address()


# In this process (tests/in_process_cli.py): the address is refused before anything starts,
# so the command's `main` costs no new process. Exit 2 (an exception would be a traceback
# instead), one line, nothing written.
@pytest.mark.parametrize("case", ["auto", "auto via RAY_ADDRESS", "ray://"])
def test_a_cluster_that_is_not_there_is_refused_at_once(case, tmp_path, monkeypatch, capsys):
    port = _free_port()  # nothing listens here
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # it would decide where `auto` goes
    if case == "auto":
        if _recorded_cluster() is not None:
            pytest.skip("`ray start` recorded a cluster on this machine: auto would join it")
        address = "auto"
        message = (
            "bad ray_address 'auto': no Ray cluster to join on this machine (RAY_ADDRESS is "
            "not set and `ray start` has not started one here)"
        )
    elif case == "auto via RAY_ADDRESS":
        address = "auto"
        monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
        message = (
            f"bad ray_address 'auto' (RAY_ADDRESS: 127.0.0.1:{port}): no Ray cluster answers "
            "there (connection refused"
        )
    else:
        address = f"ray://127.0.0.1:{port}"
        message = f"bad ray_address '{address}': no Ray cluster answers there (connection refused"
    logdir = tmp_path / "run"
    start = time.monotonic()
    last = refused_in_process(["train", "--ray-address", address, "--logdir", str(logdir)], capsys)
    wall_s = time.monotonic() - start
    assert last.startswith("impala-rep") and message in last, last
    assert wall_s < 30, f"took {wall_s:.0f} s"
    assert not logdir.exists()


def _nodes(*gpus, dead=()):
    return [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": float(g)}} for g in gpus] + [
        {"Alive": False, "Resources": {"CPU": 8.0, "GPU": float(g)}} for g in dead
    ]


def _resources(nodes):
    alive = [node["Resources"] for node in nodes if node["Alive"]]
    return {"CPU": sum(r["CPU"] for r in alive), "GPU": sum(r.get("GPU", 0) for r in alive)}


@pytest.mark.parametrize(
    "devices, hosts, nodes, message",
    [
        (
            "gpu:2",
            1,
            _nodes(1, 1),
            "the learner asks for 2 GPUs on one node and on the Ray cluster no "
            "node has that many (GPUs per node: 1, 1); use --learner-devices gpu:1",
        ),
        (
            "gpu:4",
            1,
            _nodes(2, 2, 0, dead=[4]),
            "the learner asks for 4 GPUs on one node and on the Ray "
            "cluster no node has that many (GPUs per node: 2, 2, 0); "
            "use --learner-devices gpu:2",
        ),
        (
            "gpu:2",
            2,
            _nodes(2, 1, 1),
            "each of the 2 learner hosts asks for 2 GPUs on one node and on the "
            "Ray cluster the nodes hold only 1 of them (GPUs per node: 2, 1, 1); "
            "use --learner-devices gpu:1",
        ),
    ],
)
def test_gpus_that_no_single_node_has_are_refused_naming_them(devices, hosts, nodes, message):
    config = TrainConfig.from_keys(
        dict(learner_devices=devices, learner_hosts=hosts, batch_size=32)
    )
    with pytest.raises(SetupError) as err:
        check_resources(config, _resources(nodes), embedded=False, nodes=nodes)
    assert (
        str(err.value) == f"bad learner_devices {devices!r}: {message} (with more --learner-hosts "
        "to use more GPUs)"
    )


@pytest.mark.parametrize(
    "devices, hosts, nodes",
    [
        ("gpu:2", 1, _nodes(1, 2)),
        ("gpu:2", 2, _nodes(2, 2, 1)),
        ("gpu", 2, _nodes(2)),  # SPREAD is a preference: both hosts may share the node
        ("cpu", 1, []),  # no GPU asked: the nodes are not looked at
    ],
)
def test_gpus_that_some_node_has_pass(devices, hosts, nodes):
    config = TrainConfig.from_keys(
        dict(learner_devices=devices, learner_hosts=hosts, batch_size=32)
    )
    check_resources(
        config, _resources(nodes) if nodes else {"CPU": 64.0}, embedded=False, nodes=nodes
    )


def test_a_cluster_needs_a_cpu_for_each_actor_learner_host_and_the_evaluator():
    """Each process asks Ray for one CPU: on a cluster with too few, Ray would leave some
    pending forever."""
    config = TrainConfig.from_keys(dict(num_actors=2))
    check_resources(config, {"CPU": 3.0}, embedded=False)
    with_eval = config.replace({"eval_every": 10_000})
    with pytest.raises(SetupError) as err:
        check_resources(with_eval, {"CPU": 3.0}, embedded=False)
    assert str(err.value) == (
        "bad num_actors 2: 2 actors, 1 learner host(s) and an evaluator need 4 CPUs and the "
        "Ray cluster has 3; start more nodes first or use fewer actors"
    )
    check_resources(with_eval, {"CPU": 4.0}, embedded=False)


@pytest.mark.parametrize("hosts, who", [(1, "the learner"), (2, "learner hosts 0, 1 of 2")])
def test_a_learner_ray_cannot_place_is_named_in_bounded_time(local_ray, monkeypatch, hosts, who):
    # No node of the session's Ray has a GPU: Ray would keep the learner pending forever.
    from impala_rep.learner import learner_group

    monkeypatch.setattr(learner_group, "PLACE_TIMEOUT_S", 3.0)
    config = TrainConfig.from_keys(dict(learner_devices="gpu", learner_hosts=hosts, batch_size=32))
    start = time.monotonic()
    with pytest.raises(learner_group.LearnerNotAnswering) as err:
        learner_group.create_learner_group(config, (4,), agent_factory=None)
    assert time.monotonic() - start < 30
    asks = "it asks" if hosts == 1 else "each host asks"
    assert str(err.value) == (
        f"Ray did not place {who} within 3 s: {asks} for 1 CPU and 1 GPU(s) "
        "on one node, and no node had them free"
    )


def test_a_learner_that_does_not_finish_starting_is_named(local_ray, monkeypatch):
    # A real learner, given 1 s to build: importing TensorFlow alone takes longer.
    from impala_rep.learner import learner_group
    from impala_rep.networks import make_agent

    monkeypatch.setattr(learner_group, "START_TIMEOUT_S", 1.0)
    config = TrainConfig.from_keys(dict(batch_size=16, envs_per_actor=16, num_actors=1))
    group = learner_group.create_learner_group(
        config, (4,), make_agent(observation_shape=(4,), num_actions=2)
    )
    try:
        with pytest.raises(
            learner_group.LearnerNotAnswering,
            match=r"^the learner did not finish starting within 1 s \(importing ",
        ):
            group.wait_started()
    finally:
        group.kill()


def test_actors_ray_cannot_place_on_a_cluster_end_the_run_naming_the_resource(
    local_ray, monkeypatch
):
    # Joins the session's Ray as a cluster; every CPU but the learner's is taken by other
    # work, so the one actor stays pending. Ray would wait for a CPU forever.
    from impala_rep.run import ray_cluster
    from impala_rep.run.errors import TrainingFailed
    from impala_rep.run.training import train

    ray = local_ray
    # Counted once the learner has started: any limit shows the bound.
    monkeypatch.setattr(ray_cluster, "ACTOR_START_TIMEOUT_S", 2.0)
    # All CPUs but one (earlier tests' processes may still be giving theirs back: the
    # blocker waits for them, so the learner gets the last one and the actor none).
    blocker = ray.remote(num_cpus=int(ray.cluster_resources()["CPU"]) - 1)(_Idle).remote()
    config = TrainConfig.from_keys(
        dict(
            ray_address=ray.get_runtime_context().gcs_address,
            num_actors=1,
            envs_per_actor=16,
            unroll_length=20,
            batch_size=16,
            total_frames=3200,
        )
    )
    try:
        ray.get(blocker.ready.remote(), timeout=120)
        with pytest.raises(TrainingFailed) as err:
            train(config, out=io.StringIO())
    finally:
        ray.kill(blocker)
    assert str(err.value).startswith(
        "Ray did not start 1 of 1 actors within 2 s: each asks for 1 CPU "
        "and the cluster's CPUs are taken; free some or use fewer actors"
    )


class _Idle:
    def ready(self) -> bool:
        return True
