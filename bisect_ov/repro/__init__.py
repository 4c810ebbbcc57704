"""Reproducers: the smallest piece of the model that still shows a divergence, as a folder a runtime team can
run with OpenVINO alone (`Report.repro`, ``bisect-ov repro``). See `bisect_ov.repro.write`."""

from bisect_ov.repro.write import FACTOR, ReproSource, reproduces, write_repro

__all__ = ["FACTOR", "ReproSource", "reproduces", "write_repro"]
