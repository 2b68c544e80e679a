"""`impala-rep tune`: a population or a sweep of training runs on Ray Tune.

Each trial is a whole `train()` run, with its own actors and learner, in a Ray Tune trial
process (the learner in that process, the actors Ray processes it starts, as a run on one
machine has them). A trial reports every metrics record to Tune (`train(on_record=...)`) and,
each time its learner has written a checkpoint, the run's directory with it, which is what
population-based training copies.

Schedulers, all Ray Tune's own:
- `pbt`, `ray.tune.schedulers.PopulationBasedTraining` (Jaderberg et al. 2017, as the IMPALA
  paper tunes its agents): every `perturb_every` trained frames after `burn_in`, a member in the
  bottom quarter of the population by the metric takes the checkpoint of one in the top quarter
  (weights, optimizer state, the normalisation statistics: the whole run directory) and its
  hyperparameters, each perturbed by x1.2 or /1.2 (or resampled from its space, one time in
  four). Tune restarts that member from the copied checkpoint with the new values: a resumed
  run (`impala_rep.run.resume`), so only settings a resume may change can be perturbed. The
  IMPALA paper's PBT copies a member that is 5% behind instead of a bottom quarter.
- `asha`, `ray.tune.schedulers.ASHAScheduler`: a sweep in which the worst trials at each rung of
  frames stop early.
- `none`: a plain sweep, every trial to its end.

The space is `KEY=KIND:VALUES` per searched setting (the keys of `impala-rep train`'s flags):
`grid:a,b,c` (every value, each with `population` trials), `choice:a,b,c`, `uniform:low,high`,
`loguniform:low,high`. Every trial gets its own seed: the run's seed plus its index.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import math
import pathlib
import shutil
import tempfile
import warnings
from typing import Any, TextIO

from impala_rep.config import TrainConfig, config_fields, field_for

__all__ = [
    "SCHEDULERS",
    "KINDS",
    "METRICS",
    "Dimension",
    "TuneSpec",
    "parse_dimension",
    "check_spec",
    "run_tune",
]

SCHEDULERS = ("pbt", "asha", "none")
KINDS = ("grid", "choice", "uniform", "loguniform")
METRICS = ("episode_return_mean", "eval_return_mean")

# Settings a trial cannot take from the space: where and how the trial runs, not what it
# learns (its logdir is Tune's trial directory; it joins Tune's Ray).
_NOT_SEARCHED = ("logdir", "ray_address", "launcher", "learner_process", "verbose")

# The experiment's own files in `--out`, beside Tune's.
SPEC_FILE = "tune.json"
RESULTS_FILE = "results.md"
FIGURE_FILE = "population.png"
BEST_FILE = "best-config.json"


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched setting: `key`, its `kind` (`KINDS`) and its values (grid, choice) or
    bounds (uniform, loguniform)."""

    key: str
    kind: str
    values: tuple

    def domain(self):
        """The Ray Tune search domain."""
        from ray import tune

        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        if self.kind == "choice":
            return tune.choice(list(self.values))
        return getattr(tune, self.kind)(*self.values)

    def mutation(self):
        """What PBT resamples from and perturbs (a choice: the neighbouring values)."""
        from ray import tune

        if self.kind in ("grid", "choice"):
            return list(self.values)
        return getattr(tune, self.kind)(*self.values)

    def text(self) -> str:
        """As `--space` takes it (`parse_dimension` reads it back)."""
        from impala_rep.run.flags import format_value

        values = [format_value(v) for v in self.values]
        separator = ";" if any(isinstance(v, tuple) for v in self.values) else ","
        return f"{self.key}={self.kind}:{separator.join(values)}"


def parse_dimension(text: str) -> Dimension:
    """`KEY=KIND:VALUES` as `--space` takes it; ValueError naming the problem."""
    from impala_rep.run.flags import field_type

    key, sep, rest = text.partition("=")
    kind, colon, values = rest.partition(":")
    bad = f"bad --space {text!r}"
    if not sep or not colon or not values:
        example = "learning_rate=loguniform:1e-4,1e-2"
        raise ValueError(f"{bad}: expected KEY=KIND:VALUES, e.g. {example}")
    keys = {f.key for f in config_fields()}
    if key not in keys:
        raise ValueError(f"{bad}: no setting {key!r} (the keys are train's flags without --)")
    if key in _NOT_SEARCHED:
        raise ValueError(f"{bad}: {key} says where a trial runs, not what it learns")
    if kind not in KINDS:
        raise ValueError(f"{bad}: kind {kind!r} is not one of {', '.join(KINDS)}")
    field = field_for(key)
    parse = _value_parser(field)
    try:
        parsed = tuple(parse(v) for v in _split(values, field))
    except (ValueError, TypeError) as err:
        raise ValueError(f"{bad}: {err}") from None
    if kind in ("uniform", "loguniform"):
        if field_type(field)[0] is not float or len(parsed) != 2 or None in parsed:
            raise ValueError(f"{bad}: {kind} takes LOW,HIGH of a number setting")
        low, high = parsed
        if not low < high or (kind == "loguniform" and low <= 0):
            positive = ", LOW > 0" if kind == "loguniform" else ""
            raise ValueError(f"{bad}: needs LOW < HIGH{positive}")
    elif len(set(map(repr, parsed))) != len(parsed):
        raise ValueError(f"{bad}: a value is given twice")
    for value in parsed:  # each value as the config checks it
        try:
            TrainConfig.from_keys({key: value})
        except ValueError as err:
            raise ValueError(f"{bad}: {err}") from None
    return Dimension(key=key, kind=kind, values=parsed)


def _split(values: str, field) -> list[str]:
    """A tuple setting's values are separated by `;` (`hidden_sizes=grid:64,64;256,256`)."""
    from impala_rep.run.flags import field_type

    return (
        values.split(";")
        if field_type(field)[0] in (tuple[int, ...], tuple[str, ...])
        else (values.split(","))
    )


def _value_parser(field):
    """The flag's parser for one value (argparse's errors turned into ValueError)."""
    import argparse

    from impala_rep.run.flags import add_config_flags

    parser = argparse.ArgumentParser(add_help=False)
    action = add_config_flags(parser, TrainConfig())[field.key]
    if action.type is None:  # a switch
        words = {"on": True, "off": False, "true": True, "false": False}

        def switch(text: str) -> bool:
            if text.lower() not in words:
                raise ValueError(f"expected on or off, got {text!r}")
            return words[text.lower()]

        return switch

    def parse(text: str):
        try:
            return action.type(text)
        except argparse.ArgumentTypeError as err:
            raise ValueError(str(err)) from None

    return parse


@dataclasses.dataclass(frozen=True)
class TuneSpec:
    """An experiment: its space, scheduler and where it is kept (`out`)."""

    space: tuple[Dimension, ...]
    out: str
    scheduler: str = "pbt"
    population: int = 4
    metric: str = "episode_return_mean"
    perturb_every: int | None = None  # frames; None: a tenth of the run's frames
    burn_in: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"space": [d.text() for d in self.space]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TuneSpec:
        return cls(**(data | {"space": tuple(parse_dimension(t) for t in data["space"])}))

    def interval(self, base: TrainConfig) -> int:
        return self.perturb_every or max(1, base.run.total_frames // 10)


def check_spec(spec: TuneSpec, base: TrainConfig) -> None:
    """ValueError, one line, for an experiment that cannot run; nothing is written."""
    from impala_rep.run.resume import LOCKED_KEYS, RESUME_RULES
    from impala_rep.run.run_log import check_logdir

    if not spec.space:
        raise ValueError("tune needs at least one --space KEY=KIND:VALUES to search")
    keys = [d.key for d in spec.space]
    if len(set(keys)) != len(keys):
        raise ValueError(f"bad --space: {sorted(k for k in keys if keys.count(k) > 1)[0]} twice")
    if spec.scheduler == "pbt":
        for dimension in spec.space:
            if dimension.key in LOCKED_KEYS or dimension.key == "rnd_cost":
                rule = RESUME_RULES.get(dimension.key, "locked")
                raise ValueError(
                    f"bad --space {dimension.text()!r}: --scheduler pbt changes a member's "
                    f"settings as it resumes from a checkpoint, and {dimension.key} is "
                    f"{rule} on resume; search it with --scheduler asha or none"
                )
            if dimension.kind == "grid":
                raise ValueError(
                    f"bad --space {dimension.text()!r}: --scheduler pbt samples its population; "
                    "use choice instead of grid"
                )
    if spec.metric == "eval_return_mean" and base.run.eval_every is None:
        raise ValueError(
            "bad --metric eval_return_mean: the trials evaluate only with --eval-every FRAMES"
        )
    if spec.perturb_every is not None and spec.perturb_every >= base.run.total_frames:
        raise ValueError(
            f"bad --perturb-every {spec.perturb_every}: must be below --total-frames "
            f"{base.run.total_frames}, or no member is ever perturbed"
        )
    if base.run.launcher != "ray":
        raise ValueError("bad launcher 'local': tune runs its trials on Ray")
    check_logdir(spec.out)


def trials_of(spec: TuneSpec) -> int:
    grid = math.prod(len(d.values) for d in spec.space if d.kind == "grid")
    return spec.population * grid


def run_tune(spec: TuneSpec, base: TrainConfig, *, out: TextIO, resume: bool = False):
    """Runs the experiment (or, `resume`, the unfinished trials of the one in `spec.out`);
    writes its results table, figure and best config into `spec.out`; returns Tune's
    `ResultGrid`."""
    import ray
    from ray import tune

    from impala_rep.run.launch_ray import start_ray
    from impala_rep.run.ray_cluster import check_resources, processes_asking_for_cpus

    root = pathlib.Path(spec.out).absolute()
    per_trial = processes_asking_for_cpus(base)
    trials = trials_of(spec)
    started = start_ray(base, num_cpus=trials * per_trial)
    try:
        check_resources(base, ray.cluster_resources(), embedded=not base.run.ray_address)
        have = ray.cluster_resources().get("CPU", 0)
        concurrent = max(1, min(trials, int(have // per_trial)))
        if spec.scheduler == "pbt" and concurrent < trials:
            from impala_rep.run.errors import SetupError

            raise SetupError(
                f"bad --population {spec.population}: a PBT population trains together and its "
                f"{trials} members need {trials * per_trial} CPUs ({per_trial} each); the Ray "
                f"cluster has {have:g}; use a smaller population or fewer actors"
            )
        trainable = tune.with_parameters(_trial, base=base.to_json(), root=str(root))
        if resume:
            tuner = tune.Tuner.restore(str(root), trainable, resume_errored=True)
        else:
            root.mkdir(parents=True, exist_ok=True)
            (root / SPEC_FILE).write_text(
                json.dumps({"spec": spec.to_json(), "base": base.to_json()}, indent=2) + "\n"
            )
            tuner = tune.Tuner(
                trainable,
                param_space={d.key: d.domain() for d in spec.space},
                tune_config=tune.TuneConfig(
                    metric=spec.metric,
                    mode="max",
                    scheduler=_scheduler(spec, base),
                    num_samples=spec.population,
                    max_concurrent_trials=concurrent,
                    trial_dirname_creator=lambda trial: f"trial-{trial.trial_id}",
                ),
                run_config=tune.RunConfig(
                    name=root.name,
                    storage_path=str(root.parent),
                    # Every reported checkpoint is kept: a member that copied another's
                    # refers to it, and a limit would have the copier delete it under the
                    # other (Tune's num_to_keep with PBT). Each is a pointer of a few bytes
                    # (`_Reporter`).
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=None),
                    verbose=0,
                    callbacks=[tune_progress(out, spec.metric)],
                ),
            )
        # Tune's own console lines (where its files are, a TensorBoard hint into Ray's
        # session folder, advice on actor reuse) say nothing a user of this command needs:
        # the progress lines (`tune_progress`) and the results table do.
        with (
            contextlib.redirect_stdout(io.StringIO()),
            warnings.catch_warnings(),
            _unfinished_trials_unlogged(),
        ):
            warnings.simplefilter("ignore", UserWarning)
            results = tuner.fit()
    finally:
        if started:
            ray.shutdown()
    from impala_rep.run.tune_results import write_results

    write_results(root, results, spec, base, out=out)
    return results


@contextlib.contextmanager
def _unfinished_trials_unlogged():
    """Without Tune's ERROR log line listing the unfinished trials of a stopped experiment:
    the command says it in its own line, with how to continue (other errors still log)."""

    def keep(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Trials did not complete")

    logger = logging.getLogger("ray.tune.tune")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


def tune_progress(out: TextIO, metric: str, every_s: float = 10.0):
    """A Tune callback that writes one line at most every `every_s` seconds (the trials'
    states, the best metric so far), and one when a trial ends or fails: Tune's own reporter
    prints a table per result. (Made here, not at import: ray.tune loads only for `tune`.)"""
    from ray.tune import Callback

    class _Progress(Callback):
        def __init__(self):
            self._last, self._best = 0.0, {}

        def on_trial_result(self, iteration, trials, trial, result, **info):
            import time

            if metric in result:
                self._best[trial.trial_id] = (result[metric], result.get("frames", 0))
            if time.monotonic() - self._last >= every_s:
                self._last = time.monotonic()
                self._line(trials)

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._line(trials, f"trial {trial.trial_id} done; ")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._line(trials, f"trial {trial.trial_id} failed ({trial.error_file}); ")

        def _line(self, trials, event: str = "") -> None:
            states = {}
            for trial in trials:
                states[trial.status.lower()] = states.get(trial.status.lower(), 0) + 1
            counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            best = ""
            if self._best:
                trial_id, (value, frames) = max(self._best.items(), key=lambda i: i[1][0])
                best = f"; best {metric} {value:.1f} ({trial_id}, {int(frames):,} frames)"
            print(f"tune: {event}{counts}{best}", file=out, flush=True)

    return _Progress()


def _scheduler(spec: TuneSpec, base: TrainConfig):
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining

    if spec.scheduler == "pbt":
        return PopulationBasedTraining(
            time_attr="frames",
            perturbation_interval=spec.interval(base),
            burn_in_period=spec.burn_in,
            hyperparam_mutations={d.key: d.mutation() for d in spec.space},
            perturbation_factors=(1.2, 1 / 1.2),
            # Tune's bottom and top quarters: empty below 4 members, so one member each
            # (a half) there; a population of 2-4 is what a small machine holds.
            quantile_fraction=max(0.25, 1 / spec.population) if spec.population > 1 else 0.25,
        )
    if spec.scheduler == "asha":
        return ASHAScheduler(
            time_attr="frames",
            max_t=base.run.total_frames,
            grace_period=spec.interval(base),
            reduction_factor=2,
        )
    return None


def _trial(params: dict[str, Any], *, base: dict[str, Any], root: str) -> None:
    """One trial: a `train()` run in its directory of the experiment's (`root`), resumed from
    the checkpoint Tune gives it (PBT's exploit, or a restored experiment) with this trial's
    settings."""
    from ray import tune

    from impala_rep.run.resume import load_run_config, resumed_config
    from impala_rep.run.training import train

    context = tune.get_context()
    trial_dir = pathlib.Path(root) / f"trial-{context.get_trial_id()}"
    trial_dir.mkdir(parents=True, exist_ok=True)
    logdir = trial_dir / "run"
    config = TrainConfig.from_json(base)
    # PBT copies the newest checkpoint of a better member: checkpoints every few seconds keep
    # it recent (they are written by the clock, --checkpoint-every, here at most 5 s apart).
    config = config.replace({"checkpoint_every": min(config.learner.checkpoint_every_s, 5.0)})
    index = int(context.get_trial_id().rsplit("_", 1)[-1])
    changes = {"seed": (config.run.seed + index) % 2**32} | params | {"logdir": str(logdir)}
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        shutil.rmtree(logdir, ignore_errors=True)  # a trial restarted from scratch
        config, resume = config.replace(changes), False
    else:
        with checkpoint.as_directory() as reported:
            pointer = json.loads((pathlib.Path(reported) / _POINTER).read_text())
        source = pathlib.Path(pointer["run"])
        if source.resolve() != logdir.resolve():  # PBT's exploit: another member's run
            copying = trial_dir / "run.copying"
            shutil.rmtree(copying, ignore_errors=True)
            _copy_run(source, copying, pointer["checkpoint"])
            shutil.rmtree(logdir, ignore_errors=True)
            copying.rename(logdir)
        # else this member's own run, stopped (Ctrl-C, a paused trial): on from its newest
        changes.pop("seed")  # the run's own seed goes on (its actors' seeds mix in the step)
        config, resume = resumed_config(load_run_config(str(logdir)), changes), True
    with open(trial_dir / "console.log", "a") as console:
        train(config, resume=resume, out=console, on_record=_Reporter(logdir))


# What a trial reports to Tune as its checkpoint: the run and its checkpoint's name.
_POINTER = "run.json"


class _Reporter:
    """`train(on_record=...)` for a trial: each record with a return to Tune, with a
    checkpoint once the learner has written one.

    Tune's PBT copies the checkpoint a member reported with its result at a perturbation
    point, and none if that result had none: every result carries one. A copy of the run each
    time would fill the disk, so what is reported is a pointer to the run's newest checkpoint;
    a member taking it over copies the run then (`_copy_run`). So the experiment's directory
    must be one every node sees."""

    def __init__(self, logdir: pathlib.Path):
        self._logdir = logdir

    def __call__(self, record: dict[str, Any]) -> None:
        from ray import tune

        from impala_rep.learner.checkpoint_index import CHECKPOINT_SUBDIR, newest_checkpoint

        metrics = {
            k: v
            for k, v in record.items()
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
        }
        # Tune's schedulers compare the metric: a record without one (no episode ended yet)
        # is not reported.
        if not {"episode_return_mean", "eval_return_mean"} & set(metrics):
            return
        newest = newest_checkpoint(self._logdir / CHECKPOINT_SUBDIR)
        if newest is None:
            tune.report(metrics)
            return
        with tempfile.TemporaryDirectory() as reported:
            pointer = {"run": str(self._logdir), "checkpoint": pathlib.Path(newest[0]).name}
            (pathlib.Path(reported) / _POINTER).write_text(json.dumps(pointer))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(reported))


def _copy_run(source: pathlib.Path, target: pathlib.Path, checkpoint: str) -> None:
    """What a resume needs of the run in `source`: config.json, metrics.jsonl and the
    checkpoint named `checkpoint` (`ckpt-STEP`), or the newest if that one was deleted since
    (the run keeps its last few), named the newest in `target`."""
    from impala_rep.learner.checkpoint_index import CHECKPOINT_SUBDIR, newest_checkpoint

    (target / CHECKPOINT_SUBDIR).mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl"):
        if (source / name).is_file():
            shutil.copy2(source / name, target / name)
    for prefix in (checkpoint, pathlib.Path(newest_checkpoint(source / CHECKPOINT_SUBDIR)[0]).name):
        files = [
            p for p in (source / CHECKPOINT_SUBDIR).iterdir() if p.name.startswith(prefix + ".")
        ]
        try:
            for path in files:
                shutil.copy2(path, target / CHECKPOINT_SUBDIR / path.name)
        except FileNotFoundError:  # deleted by the run while being copied: its newest then
            continue
        if files:
            break
    # The index TensorFlow's CheckpointManager keeps, naming the one checkpoint copied.
    (target / CHECKPOINT_SUBDIR / "checkpoint").write_text(
        f'model_checkpoint_path: "{prefix}"\nall_model_checkpoint_paths: "{prefix}"\n'
    )


def best_config(results, spec: TuneSpec, base: TrainConfig) -> TrainConfig:
    """The settings of the trial whose last reported metric is the best: the base with its
    final values (a PBT member's as last perturbed), no logdir."""
    best = results.get_best_result(metric=spec.metric, mode="max", scope="last")
    return base.replace({d.key: best.config[d.key] for d in spec.space} | {"logdir": None})
