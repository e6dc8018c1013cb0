"""`reconciler demo`: the product's origin cases played end to end against the sandbox provider.

Scenarios are data (`scenarios.SCENARIOS`); one runner (`play.play_all`) plays them all.
"""

from reconciler.demo.play import Played, closing_line, play_all, table_rows
from reconciler.demo.scenarios import SCENARIOS, Scenario

__all__ = ["SCENARIOS", "Played", "Scenario", "closing_line", "play_all", "table_rows"]
