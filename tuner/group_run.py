"""Tuning a group of models jointly: the one flow a model tuned alone, an ensemble's pipeline
and a traffic mix share. A `Group` says what differs (which models, what else the server loads,
how a trial is measured, how the joint space is composed); `tune_group` prepares the members,
composes their spaces, runs one study against one tuning server, re-measures where the group
asks for it, and writes the best configs back all or none."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from tuner.defaults import DEFAULT_PIPELINE_TRIALS
from tuner.duration import Duration
from tuner.group_evaluate import GroupEvaluator, Measure
from tuner.group_members import (
    add_variants,
    group_summary,
    members_fingerprint,
    prepare_member,
    usable_precisions,
    with_best,
)
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
from tuner.run_schema import PlatformInfo, RunSummary
from tuner.search import run_search
from tuner.server_control import tuning_server
from tuner.space import GPU, Platform, SearchSpace, Space
from tuner.target_platform import target_platform

# The group's joint space from its members' own spaces (in the members' order).
Compose = Callable[[tuple[SearchSpace, ...], Platform], Space]


@dataclass(frozen=True, slots=True)
class Group:
    """What one kind of group (a model alone, a pipeline, a traffic mix) is to the tuning
    core."""

    name: str
    models: tuple[str, ...]  # the members, searched jointly, in this order
    intro: str  # the console's first line about it ("": none)
    compose: Compose
    measure: Measure
    # One model tuned on its own: its candidates, changes, verdicts and fingerprint name no
    # model, and its summary is a model's (no table of members).
    alone: bool = False
    # What the server loads once besides the members (an ensemble's folder): the load goes
    # to it; None: the load goes to the members themselves (the first names the server).
    front: Path | None = None
    front_config: mc.ModelConfig | None = None
    fingerprint: dict[str, str] = field(default_factory=dict)
    min_batch_size: int = 0  # no member's max_batch_size below it
    remeasure: bool = False  # the top candidates measured again before the write
    default_trials: int = DEFAULT_PIPELINE_TRIALS  # when the run names no --trials
    summary_extra: Callable[[RunSummary], RunSummary] = lambda summary: summary


def tune_group(
    options: TuneOptions, group: Group, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune the members of `group` jointly and (unless dry-run) write their best configs
    back, all or none. `time_budget` bounds the whole of it."""
    started = time.monotonic()
    name = group.name
    if group.intro:
        hooks.note(group.intro)
    report_folder = options.report_dir / name
    report_folder.mkdir(parents=True, exist_ok=True)
    target = target_platform(options.server)
    for note in target.notes:
        hooks.note(f"{name}: {note}")
    platform = target.platform
    members = [prepare_member(options, model, hooks, group.alone) for model in group.models]
    member_options = options
    if group.min_batch_size:
        member_options = replace(
            options, space=replace(options.space, min_batch_size=group.min_batch_size)
        )
    fingerprint = members_fingerprint(options, group.fingerprint, members, group.alone)
    settings = search_settings(
        options, name, fingerprint, report_folder, time_budget, group.default_trials
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
            spaces = []
            for m in members:
                # A server that refuses GPU instances for one member refuses them for all.
                own, platform = space_on_target(
                    server,
                    member_options,
                    m.model,
                    m.base,
                    m.model_path,
                    platform,
                    usable_precisions(m),
                    hooks,
                )
                spaces.append(own)
            space = group.compose(tuple(spaces), platform)
            if options.search == "grid":
                space.grid_points()  # PipelineGridError (one line, exit 1) when too large
            # The load goes to the front (an ensemble) or to the model alone, shaped for its
            # inputs; a mix's measure shapes each model's own load.
            evaluation = options.evaluation
            if group.front_config is not None:
                evaluation = evaluation.for_model(group.front_config)
            elif group.alone:
                evaluation = evaluation.for_model(members[0].base)
            evaluator = GroupEvaluator(
                members, server, evaluation, group.measure, group.front_config, group.alone
            )
            where = "the search space"
            if not group.alone:
                where = f"the joint search space ({space.describe_sizes()})"
            hooks.note(f"{name}: {space.size} candidates in {where}")
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
    gpu = any(GPU in own.kinds for own in spaces)
    info = PlatformInfo(platform.cpu_count, gpu, platform.gpu_names)
    summary = group_summary(options, name, info, result, members, space.describe(), group.alone)
    summary = group.summary_extra(with_remeasure(summary, remeasured))
    summary = replace(summary, server=server_info)
    best = summary.best.candidate if summary.best is not None else None
    summary = with_best(options, summary, members, best, group.front, group.alone)
    write_model_report(summary, report_folder)
    return summary
