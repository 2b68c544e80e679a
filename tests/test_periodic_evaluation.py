"""Evaluation while training (`--eval-every`): when evaluations are asked for, what they play,
and what a run records of them, through the command."""

import json
import statistics

import numpy as np
import pytest
from in_process_cli import command_in_process

from impala_rep.config import EnvConfig
from impala_rep.run.periodic_evaluation import (
    EvaluationSchedule,
    Evaluator,
    ThreadEvaluations,
    evaluation_seed,
)


class AnsweringRunner:
    """An `EvaluationRunner` that plays nothing: it records the seeds asked for and, once the
    test sets `answer`, returns it as the running evaluation's result (a new request starts
    without one, or with `next_answer` when the test set that)."""

    def __init__(self):
        self.seeds, self.answer, self.next_answer = [], None, None

    def request(self, seed):
        self.seeds.append(seed)
        self.answer = self.next_answer

    def result(self, timeout_s):
        if isinstance(self.answer, str):
            raise RuntimeError(self.answer)
        return self.answer

    def close(self):
        pass


def test_an_evaluation_is_asked_for_past_each_multiple_and_never_two_at_once():
    runner = AnsweringRunner()
    schedule = EvaluationSchedule(runner, every=100, episodes=2, seed=3, frames_at_start=0)
    assert schedule.poll(60) is None and runner.seeds == []
    assert schedule.poll(130) is None and runner.seeds == [evaluation_seed(3, 130)]
    # 200 falls due while the one of 130 plays: asked for once that one has ended.
    assert schedule.poll(240) is None and len(runner.seeds) == 1
    runner.answer = ([1.0, 3.0], [5, 7])
    outcome = schedule.poll(250)
    assert outcome.fields() == {
        "eval_frames": 130,
        "eval_return_mean": 2.0,
        "eval_return_std": 1.0,
        "eval_episodes": 2,
    }
    assert outcome.complete and runner.seeds[-1] == evaluation_seed(3, 250)
    runner.answer = ([4.0, 4.0], [9, 9])
    assert schedule.poll(280).frames == 250
    assert schedule.poll(290) is None and len(runner.seeds) == 2  # the next is due at 300
    assert schedule.poll(300) is None and runner.seeds[-1] == evaluation_seed(3, 300)
    # Seeds differ per evaluation and from the run seed's actor seeds' stream.
    assert len({evaluation_seed(3, f) for f in (130, 250, 300)}) == 3
    assert evaluation_seed(3, 130) != evaluation_seed(4, 130)


def test_the_end_waits_for_the_running_evaluation_then_evaluates_the_final_weights():
    runner = AnsweringRunner()
    schedule = EvaluationSchedule(runner, every=100, episodes=1, seed=0, frames_at_start=0)
    schedule.poll(100)
    runner.answer, runner.next_answer = ([1.0], [3]), ([2.0], [4])
    assert schedule.evaluates_at_finish(160)
    outcomes = schedule.finish(160, timeout_s=0.0)
    assert [o.frames for o in outcomes] == [100, 160]
    assert runner.seeds == [evaluation_seed(0, 100), evaluation_seed(0, 160)]
    # The final weights evaluated already (the last due one was at the final frames): no more.
    assert not schedule.evaluates_at_finish(160) and schedule.finish(160) == []
    # One still playing when the wait runs out is given up, not reported as ended.
    runner.next_answer = None
    schedule = EvaluationSchedule(runner, every=100, episodes=1, seed=0, frames_at_start=0)
    schedule.poll(100)
    assert schedule.finish(150, timeout_s=0.0) == []


def test_an_evaluation_of_weights_the_run_has_not_trained_past_is_held_for_the_end():
    """Reports at the same frames (the learner's last step done, its stop not yet reported):
    the evaluation of those weights is the final weights', for the run's last record."""
    runner = AnsweringRunner()
    schedule = EvaluationSchedule(runner, every=100, episodes=1, seed=0, frames_at_start=0)
    runner.next_answer = ([1.0], [3])
    assert schedule.poll(300) is None and schedule.poll(300) is None
    assert schedule.evaluates_at_finish(300)  # it waits for the held one
    assert [o.frames for o in schedule.finish(300)] == [300]
    assert runner.seeds == [evaluation_seed(0, 300)]  # held, not evaluated twice
    # Trained on past them, the run gets it at its next report.
    schedule = EvaluationSchedule(runner, every=100, episodes=1, seed=0, frames_at_start=0)
    schedule.poll(300)
    assert schedule.poll(340).frames == 300


def test_a_resumed_run_evaluates_from_the_next_multiple_of_its_frames():
    runner = AnsweringRunner()
    schedule = EvaluationSchedule(runner, every=100, episodes=1, seed=0, frames_at_start=250)
    assert schedule.poll(260) is None and runner.seeds == []
    schedule.poll(300)
    assert runner.seeds == [evaluation_seed(0, 300)]


def test_a_failed_evaluation_is_reported_once_and_no_more_are_asked_for():
    """The failure delivered for real: the evaluator's env cannot be made."""
    evaluations = ThreadEvaluations(
        lambda: Evaluator(
            env=EnvConfig(id="NoSuchEnv-v0"),
            agent_factory=_cartpole_agent(),
            episodes=2,
            frame_skip=1,
        ),
        latest_weights=lambda: (0, []),
    )
    schedule = EvaluationSchedule(evaluations, every=10, episodes=2, seed=0, frames_at_start=0)
    schedule.poll(10)
    outcome = schedule.finish(10)[0]
    assert "NoSuchEnv" in outcome.error and outcome.fields() == {} and not outcome.complete
    assert schedule.failed and not schedule.evaluates_at_finish(20)
    assert schedule.poll(50) is None and schedule.finish(60) == []
    evaluations.close()


def _cartpole_agent():
    """The built-in MLP as a CartPole run builds it (its actors act with its numpy twin)."""
    from impala_rep.config import TrainConfig
    from impala_rep.envs.factory import describe_env
    from impala_rep.run.agents import agent_factory_for

    config = TrainConfig.from_keys({"hidden_sizes": (8,)})
    return agent_factory_for(config, describe_env("CartPole-v1"))


def _cartpole_weights(seed):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    agent = _cartpole_agent()()
    agent.build((4,))
    return agent.get_weights()


def test_an_evaluator_plays_the_weights_it_is_given_greedily_on_envs_of_its_seed():
    """The same weights and seed play the same episodes, each env its share; other weights
    play others. (That they are the episodes `impala-rep evaluate` plays: the run below.)"""
    evaluator = Evaluator(
        env=EnvConfig(id="CartPole-v1"), agent_factory=_cartpole_agent(), episodes=12, frame_skip=1
    )
    weights = _cartpole_weights(0)
    returns, lengths = evaluator.evaluate(weights, 0, seed=5)
    assert len(returns) == 12 and returns == [float(n) for n in lengths]  # CartPole: +1 a step
    assert evaluator.evaluate(weights, 0, seed=5) == (returns, lengths)
    assert evaluator.evaluate(_cartpole_weights(1), 0, seed=5) != (returns, lengths)


@pytest.mark.launches
def test_a_run_records_its_evaluations_and_the_last_is_what_evaluate_scores(tmp_path):
    """Through the command (local launcher, in this process): evaluations land in
    metrics.jsonl and TensorBoard at the frames of their weights, the summary shows the last,
    which is of the final weights: `impala-rep evaluate` of the final checkpoint on the same
    seed scores the same episodes."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from impala_rep.run.evaluation import evaluate_run

    logdir = tmp_path / "run"
    flags = "--env CartPole-v1 --launcher local --num-actors 2 --envs-per-actor 16 --seed 2"
    # Evaluations are asked for at reports: the run must outlast its start-up by several of
    # them (at 24k frames a fast start could train every frame before the first report).
    proc = command_in_process(
        "train",
        *flags.split(),
        *"--total-frames 64000 --report-every 0.2 --eval-every 16000 --eval-episodes 4".split(),
        "--logdir",
        str(logdir),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if "eval_frames" in r]
    final = records[-1]
    assert final["eval_frames"] == final["frames"] >= 64000 and len(evaluated) >= 2
    frames = [r["eval_frames"] for r in evaluated]
    assert frames == sorted(set(frames)) and all(r["eval_frames"] <= r["frames"] for r in evaluated)
    assert all(r["eval_episodes"] == 4 for r in evaluated)
    assert (
        f"last evaluation (greedy)       {final['eval_return_mean']:.1f} ± "
        f"{final['eval_return_std']:.1f} over 4 episodes at {final['frames']:,} frames"
    ) in proc.stdout

    scored = evaluate_run(
        str(logdir), episodes=4, seed=evaluation_seed(2, final["frames"]), policy="greedy"
    )
    assert scored.frames == final["frames"]
    assert statistics.fmean(scored.returns) == final["eval_return_mean"]
    assert statistics.pstdev(scored.returns) == final["eval_return_std"]

    board = EventAccumulator(str(logdir / "tensorboard"))
    board.Reload()
    shown = [(e.step, e.value) for e in board.Scalars("eval_return_mean")]
    assert [step for step, _ in shown] == frames
    np.testing.assert_allclose([v for _, v in shown], [r["eval_return_mean"] for r in evaluated])
    assert "eval_frames" not in board.Tags()["scalars"]

    # Resumed with another --eval-every: evaluations go on from its next multiple.
    proc = command_in_process(
        "train", "--resume", str(logdir), *"--total-frames 80000 --eval-every 5000".split()
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    resumed = [r["eval_frames"] for r in records if r.get("eval_frames", 0) > final["frames"]]
    assert resumed and resumed[0] >= (final["frames"] // 5000 + 1) * 5000
    assert records[-1]["eval_frames"] == records[-1]["frames"] >= 80000
