"""Training: the loop, the recipe (optimizer, schedule, best epoch, patience), the run's state and folder, and
what happens at a step boundary (stop requests, periodic saves)."""
