"""Evaluating one candidate of a group (a model tuned alone, an ensemble's steps, a traffic
mix's models): load each member's part of it into the tuning server, then measure as the group
says. A server that died under a trial is started again, and the trial says so."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import Measurement, SearchStep
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate, apply
from tuner.evaluate import EvaluationSettings, TrialMeasurement, describe_steps, measure_loaded
from tuner.group_members import Member, member_part, members_refusal
from tuner.search_types import TrialContext, TrialOutcome
from tuner.server_control import ServerError, TuningServer

_log = logging.getLogger(__name__)

# How a trial of the group is measured once its members' configs are loaded.
Measure = Callable[
    [TuningServer, Sequence[Member], EvaluationSettings, TrialContext | None], TrialMeasurement
]


def measure_served_model(budget: LatencyBudget) -> Measure:
    """The highest load within `budget` on the model the server measures (a model tuned
    alone; a pipeline's ensemble, so that the budget is end to end)."""

    def measure(
        server: TuningServer,
        _members: Sequence[Member],
        settings: EvaluationSettings,
        context: TrialContext | None,
    ) -> TrialMeasurement:
        return measure_loaded(server, budget, settings, context)

    return measure


class GroupEvaluator:
    """Callable the search loop uses: a group's Candidate -> TrialOutcome. Loads each member's
    part of the candidate (only those that changed since the last load), then what the group
    loads once besides its members (`front`, an ensemble), then measures with `measure`.

    `alone`: one model tuned on its own, whose candidates name no model."""

    def __init__(
        self,
        members: Sequence[Member],
        server: TuningServer,
        settings: EvaluationSettings,
        measure: Measure,
        front: mc.ModelConfig | None = None,
        alone: bool = False,
    ) -> None:
        self._members = tuple(members)
        self._server = server
        self._settings = settings
        self._measure = measure
        self._front = front
        self._alone = alone
        self._loaded: dict[str, mc.ModelConfig] = {}
        self._front_loaded = False
        self.last_measurement: Measurement | None = None
        self.last_steps: list[SearchStep] = []  # the last load search's levels, timed

    def configs_for(self, candidate: Candidate) -> dict[str, mc.ModelConfig]:
        """Each member's config under `candidate` (as written where it has no part)."""
        return {
            m.model: apply(member_part(candidate, m.model, self._alone), m.base)
            for m in self._members
        }

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
                whose = "the config" if self._alone else f"{model}'s config"
                raise ServerError(f"the server refused {whose}: {exc}") from None
            self._loaded[model] = config
        if self._front is not None and not self._front_loaded:
            try:
                self._server.load(self._front)
            except ServerError as exc:
                raise ServerError(f"the server refused the ensemble: {exc}") from None
            self._front_loaded = True

    def __call__(self, candidate: Candidate, context: TrialContext | None = None) -> TrialOutcome:
        """Load `candidate` and measure it. The empty candidate loads every member as
        written."""
        refused = members_refusal(candidate, self._members, self._alone)
        if refused is not None:
            return refused
        try:
            self._restart_if_exited()  # between trials
        except ServerError as exc:
            return TrialOutcome.failed(str(exc))
        began = time.perf_counter()
        try:
            self.load(candidate)
        except ServerError as exc:
            return self._told_crash(TrialOutcome("pruned", message=str(exc)))
        loaded_s = time.perf_counter() - began
        outcome, self.last_measurement, self.last_steps = self._measure(
            self._server, self._members, self._settings, context
        )
        if outcome.status == "failed":
            outcome = self._told_crash(outcome)
        _log.debug(
            "trial %s (%s): load %.2f s, %s",
            context.number if context is not None else "-",
            candidate.key or "as written",
            loaded_s,
            describe_steps(self.last_steps),
        )
        return outcome

    def _told_crash(self, outcome: TrialOutcome) -> TrialOutcome:
        """A failed trial whose server died under it says so (and the server is started
        again for the next trial): the candidate failed, the search goes on."""
        try:
            crash = self._restart_if_exited()
        except ServerError as exc:
            return TrialOutcome.failed(f"{outcome.message}; {exc}")
        return outcome if crash is None else TrialOutcome.failed(f"{crash}: {outcome.message}")

    def _restart_if_exited(self) -> str | None:
        """What ended the tuning server (logged; it is started again with nothing of the
        group's loaded), None while it runs; ServerError when it cannot be started again."""
        crash = self._server.restart_if_exited()
        if crash is not None:
            _log.warning("%s", crash)
            self._loaded.clear()
            self._front_loaded = False
        return crash
