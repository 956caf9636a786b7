"""The tuner's defaults and search-method names, in a module that imports nothing heavy: the
command line reads them to build its options, and `autotune serve` / `autotune perf` must not pay
for importing Optuna, onnxruntime or the tuner's machinery."""

from __future__ import annotations

# Model Analyzer's automatic sweep also tries max_batch_size up to 128.
DEFAULT_MAX_BATCH_SIZE_CAP = 128
# Trials when --trials is not given. A pipeline's trial loads and measures several models
# through the ensemble; fewer of them keep the README's run over the bundled repository (two
# pipelines and three models alone) near ten minutes on 2 cores.
DEFAULT_TRIALS = 8
DEFAULT_PIPELINE_TRIALS = 6

# The re-measure of the best candidates before the write: how many, and interleaved rounds.
DEFAULT_REMEASURE_TOP = 3
DEFAULT_REMEASURE_REPEATS = 3

# The trial's measurement window (ms); the re-measure's are twice as long.
DEFAULT_MEASUREMENT_INTERVAL_MS = 500

# name -> what it is; "climb" is the recommended method, "grid" the exhaustive one.
SEARCH_METHODS: dict[str, str] = {
    "climb": "the recommended method: best-first local search from the informed priors",
    "optuna": "an old name of climb (kept for scripts that pass it)",
    "tpe": "Optuna's TPE, multivariate over grouped conditional parameters",
    "tpe-flat": "Optuna's TPE, multivariate without grouping",
    "gp": "Optuna's GPSampler (needs torch and scipy)",
    "random": "Optuna's RandomSampler (a baseline)",
    "qmc": "Optuna's QMCSampler (a baseline: every parameter is categorical, so random)",
    "grid": "every candidate of the space, once",
}
RECOMMENDED_SEARCH = "climb"  # the default; "optuna" is its old name
