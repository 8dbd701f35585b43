"""Work-unit prices charged by every promising-tuple operator *and* every
baseline (so they compete on the same budget).

* ``insert``  -- put one arrival into the operator's state (summaries + tuple
  list for PT, hash table for SIMPLE-SHJ, nothing for SIMPLE-Selection which
  keeps no state);
* ``node``    -- one summary estimate (one value in one zone's sketch); read
  vectorized over a batch, so it is priced at a tenth of a comparison;
* ``probe``   -- open one cell / hash bucket;
* ``compare`` -- compare one stored tuple with the probe tuple / predicate.

Kept in the operators room (``sketchql.approx.UNIT_COSTS`` re-exports the same
numbers for the budget side).
"""
COSTS = {"insert": 1.0, "node": 0.1, "probe": 1.0, "compare": 1.0}
