"""Looking inside a built model: the summary table, MACs (flops) and the module-graph picture."""
