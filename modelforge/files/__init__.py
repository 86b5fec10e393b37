"""Files the package writes: crash-safe (atomic) writes shared by training, export, predict and sweeps."""
