"""Graph -> Graph rewrites, each tested alone; `pipeline` runs them in order."""
