"""The top-level model of a params file: :class:`ExperimentParams`, the sections together.

Each section is checked by its own model (:mod:`speclib.params.server`,
:mod:`speclib.params.workload`, :mod:`speclib.params.protocol`); the rules here
are those that span sections (one control, distinct series names, the A/A arm, the
run-until-decided and calibration bounds, what needs a loopback server or the local
executor), and the arms derived from the whole file (:attr:`ExperimentParams.arms`: the
series, the A/A arm, the draft-alone arms). Reading a file into this model, and the
checks against the file system and the installed vLLM, are in :mod:`speclib.params.loader`.

Import these names from :mod:`speclib.params.loader`, the public face of the params file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from speclib.core.fspaths import resolved
from speclib.params.limits import NAME_CHARS, bounded
from speclib.params.protocol import AnalysisParams, ProtocolParams
from speclib.params.server import (
    AA_ARM,
    DRAFT_ALONE_SUFFIX,
    SeriesParams,
    ServerParams,
    StrictModel,
    is_loopback,
)
from speclib.params.sweep import expand_sweeps
from speclib.params.workload import WorkloadParams

__all__ = [
    "AA_ARM",
    "DRAFT_ALONE_SUFFIX",
    "ExperimentParams",
]


class ExperimentParams(StrictModel):
    """A whole experiment file."""

    name: str = bounded(
        ...,
        NAME_CHARS,
        text=True,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        description="The experiment's name (the default run folder is runs/<name>-<time>).",
    )
    description: str = Field(
        "", description="Free text shown beside the answer at the top of the report."
    )
    output_dir: str | None = Field(None, description="Run folder (default runs/<name>-<time>).")
    server: ServerParams
    series: list[SeriesParams] = Field(
        min_length=1,
        description="The control and the experiments; a series with `sweep` stands for one "
        "series per value (expanded before validation, see speclib.params.sweep).",
    )
    workload: WorkloadParams
    analysis: AnalysisParams = Field(default_factory=AnalysisParams)
    protocol: ProtocolParams = Field(default_factory=ProtocolParams)
    source: str | None = Field(None, description="Set by load_params: the file's path.")

    @model_validator(mode="before")
    @classmethod
    def _expand_sweeps(cls, data: Any) -> Any:
        if isinstance(data, dict) and "series" in data:
            return {**data, "series": expand_sweeps(data["series"])}
        return data

    @model_validator(mode="after")
    def _check_series(self) -> ExperimentParams:
        names = [s.name for s in self.series]
        kit_set = [s.name for s in self.series if s.draft_alone_of is not None]
        if kit_set:
            raise ValueError(
                f"series {kit_set}: draft_alone_of is set by the kit "
                "(analysis.measure_draft_cost), not in a params file"
            )
        if self.analysis.measure_draft_cost and (
            self.server.base_url or any(s.base_url for s in self.series)
        ):
            raise ValueError(
                "analysis.measure_draft_cost serves the draft alone, which needs servers the "
                "kit starts (no server.base_url or series base_url)"
            )
        if len(names) < 2 and not self.protocol.aa:
            raise ValueError(
                "at least two series are needed (a control and an experiment), or one control "
                "with protocol.aa: true to measure this bench's noise floor"
            )
        reps = self.workload.replicates
        cap = self.protocol.max_replicates
        if isinstance(cap, int) and cap < reps:
            raise ValueError(
                f"protocol.max_replicates ({cap}) must be >= workload.replicates ({reps})"
            )
        if isinstance(cap, int) and cap > reps and reps < 2:
            raise ValueError(
                f"workload.replicates ({reps}) must be >= 2 with protocol.max_replicates: it is "
                "the first look of run-until-decided, and one block has no degrees of freedom "
                "for an arm's own variance (a look there could never decide)"
            )
        if self.protocol.target_resolution is not None:
            if not self.protocol.aa or len(names) != 1:
                raise ValueError(
                    "protocol.target_resolution is for a calibration run: protocol.aa: true "
                    f"and the control as the only series (got series {names}, aa: "
                    f"{self.protocol.aa})"
                )
            if reps < 2:
                raise ValueError(
                    f"workload.replicates ({reps}) must be >= 2 with protocol.target_resolution: "
                    "one block has no degrees of freedom, so no resolution"
                )
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate series names: {dupes}")
        controls = [s.name for s in self.series if s.is_control]
        if self.analysis.control is not None:
            if self.analysis.control not in names:
                raise ValueError(f"analysis.control {self.analysis.control!r} is not a series")
            if self.analysis.control not in controls:
                raise ValueError(
                    f"analysis.control {self.analysis.control!r} has a speculative_config"
                )
        elif len(controls) != 1:
            raise ValueError(
                f"exactly one series without speculative_config is needed as control "
                f"(found {controls or 'none'}); or name one in analysis.control"
            )
        return self

    @model_validator(mode="after")
    def _reset_only_on_loopback(self) -> ExperimentParams:
        if self.protocol.cache_policy == "reset" and not is_loopback(self.server.host):
            raise ValueError(
                "protocol.cache_policy 'reset' needs vLLM's dev-mode endpoints, allowed only on "
                f"a loopback server (server.host is {self.server.host!r}); use 'salt' instead"
            )
        return self

    @model_validator(mode="after")
    def _multi_turn_where_supported(self) -> ExperimentParams:
        if not self.workload.multi_turn:
            return self
        if self.protocol.executor == "ray":
            raise ValueError(
                "workload.multi_turn is not supported with protocol.executor 'ray' yet: the "
                "history must exist before blocks run in parallel (use executor: local)"
            )
        if self.protocol.crosscheck_vllm_bench:
            raise ValueError(
                "workload.multi_turn cannot be cross-checked with vllm bench "
                "(protocol.crosscheck_vllm_bench): its custom dataset carries one user "
                "message per prompt, not a conversation"
            )
        return self

    @property
    def control_name(self) -> str:
        if self.analysis.control:
            return self.analysis.control
        return next(s.name for s in self.series if s.is_control)

    @property
    def arms(self) -> list[SeriesParams]:
        """Every arm that gets a server: the series, the A/A arm when protocol.aa, and a
        draft-alone arm per draft_model series when analysis.measure_draft_cost."""
        control = next(s for s in self.series if s.name == self.control_name)
        arms = list(self.series)
        if self.protocol.aa:
            arms.append(control.model_copy(update={"name": AA_ARM, "gpus": self.aa_gpus}))
        for of, name in self.draft_alone_arms.items():
            update = {"name": name, "draft_alone_of": of, "per_request_metrics": None}
            arms.append(control.model_copy(update=update))
        return arms

    def gpus_of(self, series: SeriesParams) -> list[int] | None:
        """The GPUs a series' server is placed on (None: not placed, vLLM's default)."""
        return series.gpus if series.gpus is not None else self.server.gpus

    @property
    def aa_gpus(self) -> list[int] | None:
        """Where the A/A arm runs: on the first experiment's GPUs when they are not the
        control's (so the A/A ratio measures the hardware difference the verdicts carry),
        else beside the control."""
        control = next(s for s in self.series if s.name == self.control_name)
        for s in self.series:
            if s.name != control.name and self.gpus_of(s) != self.gpus_of(control):
                return self.gpus_of(s)
        return control.gpus

    @property
    def draft_alone_arms(self) -> dict[str, str]:
        """One draft-alone arm per distinct draft model: the first experiment drafting with
        it → the arm's name (a sweep over k shares one arm: c does not depend on k)."""
        out: dict[str, str] = {}
        for exp, arm in self.draft_cost_arms.items():
            if arm not in out.values():
                out[exp] = arm
        return out

    @property
    def draft_cost_arms(self) -> dict[str, str]:
        """Experiment → the arm that serves its draft alone (analysis.measure_draft_cost).

        Experiments drafting with the same model share one arm, named after the first one's
        sweep family (or name). Only ``draft_model`` series get one: an n-gram lookup has no
        model (c = 0), and an EAGLE/MTP head cannot be served on its own.
        """
        if not self.analysis.measure_draft_cost:
            return {}
        out: dict[str, str] = {}
        by_model: dict[str, str] = {}
        for s in self.series:
            spec = s.speculative_config or {}
            model = spec.get("model")
            if spec.get("method") != "draft_model" or not isinstance(model, str):
                continue
            first = by_model.setdefault(model, (s.sweep_family or s.name) + DRAFT_ALONE_SUFFIX)
            out[s.name] = first
        return out

    @property
    def sweep_families(self) -> dict[str, list[str]]:
        """Sweep family (the name written with ``sweep``) → its expanded series, in order."""
        out: dict[str, list[str]] = {}
        for s in self.series:
            if s.sweep_family is not None:
                out.setdefault(s.sweep_family, []).append(s.name)
        return out

    @property
    def experiments(self) -> list[str]:
        """Names of the arms compared against the control (the A/A arm included; the
        draft-alone arms are references, never compared)."""
        return [
            s.name for s in self.arms if s.name != self.control_name and s.draft_alone_of is None
        ]

    @property
    def block_bounds(self) -> tuple[int, int]:
        """Run until decided: the blocks at least (``workload.replicates``, always run) and
        at most (``protocol.max_replicates``; ``"auto"``: two more than planned). The planned
        blocks only when the cap is null or equal to them, when one block is planned (no look
        can decide on one) and when nothing is to be decided (the A/A arm alone, without
        ``protocol.target_resolution``: the A/A verdict never stops a run)."""
        least, cap = self.workload.replicates, self.protocol.max_replicates
        nothing = not [n for n in self.experiments if n != AA_ARM]
        if cap is None or (nothing and self.protocol.target_resolution is None):
            return least, least
        if cap == "auto":
            return (least, least) if least < 2 else (least, least + 2)
        return least, max(int(cap), least)

    @property
    def base_dir(self) -> Path:
        return resolved(self.source).parent if self.source else Path.cwd()

    def series_by_name(self, name: str) -> SeriesParams:
        for s in self.arms:
            if s.name == name:
                return s
        raise KeyError(f"no series named {name!r} (have {[s.name for s in self.series]})")

    def resolve_path(self, value: str) -> Path:
        """Resolve a path written in this params file (relative to the file's folder)."""
        path = Path(value).expanduser()
        return resolved(path if path.is_absolute() else self.base_dir / path)
