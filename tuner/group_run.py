"""Tuning a group of models jointly: the one flow an ensemble's pipeline and a traffic mix
share. A `Group` says what differs (which models, what else the server loads, how a trial is
measured, how the joint space is composed); `tune_group` prepares the members, composes their
spaces, runs one study against one tuning server, re-measures where the group asks for it,
and writes the best configs back all or none."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import Measurement
from tuner.candidate import Candidate, apply, step_candidate
from tuner.defaults import DEFAULT_PIPELINE_TRIALS
from tuner.duration import Duration
from tuner.evaluate import EvaluationSettings
from tuner.group_members import (
    StepSetup,
    add_variants,
    joint_summary,
    members_fingerprint,
    prepare_step,
    steps_refusal,
    usable_precisions,
    with_best,
)
from tuner.pipeline_space import PipelineSpace
from tuner.remeasure import server_measurer, with_remeasure
from tuner.results import write_model_report
from tuner.run import (
    Hooks,
    TuneOptions,
    remeasure_search,
    remove_tree,
    search_settings,
    search_time_left,
    space_on_target,
    time_left,
)
from tuner.run_schema import RunSummary
from tuner.search import run_search
from tuner.search_types import TrialContext, TrialOutcome
from tuner.server_control import ServerError, TuningServer, tuning_server
from tuner.space import Platform, SearchSpace
from tuner.target_platform import target_platform

# How a trial of the group is measured, once its members' configs are loaded: the outcome and
# the measurement it is judged by.
Measure = Callable[
    [TuningServer, Sequence[StepSetup], EvaluationSettings, TrialContext | None],
    tuple[TrialOutcome, Measurement | None],
]
# The group's joint space from its members' own spaces (in the members' order).
Compose = Callable[[tuple[SearchSpace, ...], Platform], PipelineSpace]


@dataclass(frozen=True, slots=True)
class Group:
    """What one kind of group (a pipeline, a traffic mix) is to the tuning core."""

    name: str
    models: tuple[str, ...]  # the members, searched jointly, in this order
    intro: str  # the console's first line about it
    compose: Compose
    measure: Measure
    # What the server loads once besides the members (an ensemble's folder): the load goes
    # to it; None: the load goes to the members themselves (the first names the server).
    front: Path | None = None
    front_config: mc.ModelConfig | None = None
    fingerprint: dict[str, str] = field(default_factory=dict)
    min_batch_size: int = 0  # no member's max_batch_size below it
    remeasure: bool = False  # the top candidates measured again before the write
    # What the settings of a trial are derived from (the config the load is sent to).
    settings_for: mc.ModelConfig | None = None
    summary_extra: Callable[[RunSummary], RunSummary] = lambda summary: summary


class GroupEvaluator:
    """Callable the search loop uses: a joint Candidate -> TrialOutcome. Loads each member's
    part of the candidate (only those that changed since the last trial), then what the group
    loads once (an ensemble), then measures as the group says."""

    def __init__(
        self,
        group: Group,
        members: Sequence[StepSetup],
        server: TuningServer,
        settings: EvaluationSettings,
    ) -> None:
        self._group = group
        self._members = tuple(members)
        self._server = server
        self._settings = settings
        self._loaded: dict[str, mc.ModelConfig] = {}
        self._front_loaded = False
        self.last_measurement: Measurement | None = None

    def configs_for(self, candidate: Candidate) -> dict[str, mc.ModelConfig]:
        """Each member's config under `candidate` (as written where it has no part)."""
        return {m.model: apply(step_candidate(candidate, m.model), m.base) for m in self._members}

    def load(self, candidate: Candidate) -> None:
        """Load each member whose config under `candidate` differs from the one loaded, then
        the group's front (once); ServerError naming the model refused."""
        for model, config in self.configs_for(candidate).items():
            if self._loaded.get(model) == config:
                continue
            self._loaded.pop(model, None)
            try:
                self._server.load(config, model)
            except ServerError as exc:
                raise ServerError(f"the server refused {model}'s config: {exc}") from None
            self._loaded[model] = config
        front = self._group.front_config
        if front is not None and not self._front_loaded:
            try:
                self._server.load(front)
            except ServerError as exc:
                raise ServerError(f"the server refused the ensemble: {exc}") from None
            self._front_loaded = True

    def __call__(self, candidate: Candidate, context: TrialContext | None = None) -> TrialOutcome:
        refused = steps_refusal(candidate, self._members)
        if refused is not None:
            return refused
        try:
            self.load(candidate)
        except ServerError as exc:
            return TrialOutcome("pruned", message=str(exc))
        outcome, self.last_measurement = self._group.measure(
            self._server, self._members, self._settings, context
        )
        return outcome


def tune_group(
    options: TuneOptions, group: Group, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune the members of `group` jointly and (unless dry-run) write their best configs
    back, all or none. `time_budget` bounds the whole of it."""
    started = time.monotonic()
    name = group.name
    hooks.note(group.intro)
    report_folder = options.report_dir / name
    report_folder.mkdir(parents=True, exist_ok=True)
    target = target_platform(options.server)
    for note in target.notes:
        hooks.note(f"{name}: {note}")
    platform = target.platform
    members = [prepare_step(options, model, hooks) for model in group.models]
    member_options = options
    if group.min_batch_size:
        member_options = replace(
            options, space=replace(options.space, min_batch_size=group.min_batch_size)
        )
    fingerprint = members_fingerprint(options, group.fingerprint, members)
    settings = search_settings(
        options, name, fingerprint, report_folder, time_budget, DEFAULT_PIPELINE_TRIALS
    )
    work_dir = Path(tempfile.mkdtemp(prefix="autotune-", dir=report_folder))
    remeasured = None
    try:
        folders = [m.opened.path for m in members]
        first, others = (group.front, folders) if group.front else (folders[0], folders[1:])
        failure_log = report_folder / "server-start.log"
        with tuning_server(first, work_dir, failure_log, others, options.server) as server:
            server_info = server.describe()
            add_variants(server, members)
            space = group.compose(
                tuple(
                    space_on_target(
                        server,
                        member_options,
                        m.model,
                        m.base,
                        m.model_path,
                        platform,
                        usable_precisions(m),
                        hooks,
                    )[0]
                    for m in members
                ),
                platform,
            )
            if options.search == "grid":
                space.grid_points()  # PipelineGridError (one line, exit 1) when too large
            evaluation = options.evaluation
            if group.settings_for is not None:
                evaluation = evaluation.for_model(group.settings_for)
            evaluator = GroupEvaluator(group, members, server, evaluation)
            hooks.note(
                f"{name}: {space.size} candidates in the joint search space "
                f"({space.describe_sizes()})"
            )
            left = (
                search_time_left(options, time_budget, started)
                if group.remeasure
                else time_left(time_budget, started)
            )
            settings = replace(settings, time_budget=left)
            result = run_search(space, evaluator, settings, lambda e: hooks.progress(name, e))
            if group.remeasure:
                measure = server_measurer(server, evaluation, options.remeasure)
                remeasured = remeasure_search(
                    options, name, result, evaluator.load, measure, time_budget, started, hooks
                )
    finally:
        remove_tree(work_dir)
    gpu = any("KIND_GPU" in step.kinds for step in space.steps)
    summary = joint_summary(options, name, platform, result, members, space.describe(), gpu)
    summary = group.summary_extra(with_remeasure(summary, remeasured))
    summary = replace(summary, server=server_info)
    best = summary.best.candidate if summary.best is not None else None
    summary = with_best(options, summary, members, best, group.front)
    write_model_report(summary, report_folder)
    return summary
