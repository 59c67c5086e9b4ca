"""`troupe simulate`: the scheduler's core driven from a YAML file, no cluster.

`loader` reads and checks the objects (and does what Priority admission would),
`runner` feeds them to the same `Scheduler` as `troupe run` and runs it to a
fixed point on a fake clock, `output` renders the result.
"""

from .loader import InputError, SimulationInput, load_text, read_input
from .output import render_json, render_table
from .runner import GroupResult, PodResult, SimulationResult, simulate

__all__ = [
    "GroupResult",
    "InputError",
    "PodResult",
    "SimulationInput",
    "SimulationResult",
    "load_text",
    "read_input",
    "render_json",
    "render_table",
    "simulate",
]
