"""The function that draws each figure the bench kinds list (bench_kind.Plot, by its stem): the report's side of
the kinds' plots. Each takes the LoadedRuns of the kinds that list the figure and returns (figure, None) or
(None, why it was skipped). Imported only when a report is drawn: it loads matplotlib."""

from collections.abc import Callable

from commbench.report import cluster_plots, collective_plots, replay_plots, training_plots
from commbench.report.figure_layout import Drawn
from commbench.runs import LoadedRun

DRAW: dict[str, Callable[[list[LoadedRun]], Drawn]] = {
    "replay_traced_vs_replayed": replay_plots.traced_vs_replayed,
    "busbw_vs_size": collective_plots.busbw_vs_size,
    "latency_fit": collective_plots.latency_with_fit,
    "ring_vs_builtin": collective_plots.ring_vs_builtin,
    "ddp_buckets": training_plots.ddp_buckets,
    "model_state": training_plots.model_state_vs_prediction,
    "strategy_steps_memory": training_plots.strategy_steps_and_memory,
    "hunt_node_matrix": cluster_plots.hunt_node_matrix,
    "p2p_matrix": cluster_plots.p2p_matrix,
}
