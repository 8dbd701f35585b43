"""sketchql: summary-indexed approximate query processing for data streams.

Rooms (imports flow down only): summaries -> index -> operators -> planner ->
approx -> engine -> service / spark.  See DESIGN.md.
"""

__version__ = "0.1.0"
