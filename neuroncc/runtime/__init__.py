"""Runtime: executables for each target, the host launcher, artifacts and cache, the NKI simulator."""
