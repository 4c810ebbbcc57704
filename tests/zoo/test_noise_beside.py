"""The noise check's compile started beside the measurement (`bisect_ov.pipeline.measure._may_recompile`):
the same figures, verdict and counts as compiling it in the noise check, on the CPU's real bf16."""

from __future__ import annotations

import pytest

from bisect_ov import bisect
from bisect_ov.run.openvino_device import cpu_supports_bf16
from tests.zoo.conftest import zoo_inputs, zoo_model


@pytest.mark.skipif(not cpu_supports_bf16(), reason="needs a CPU that runs bf16 (AVX512_BF16 or AMX)")
@pytest.mark.parametrize("name", ["resnet50", "mobilenetv3"])
def test_the_noise_compile_started_beside_the_measurement_gives_what_compiling_it_after_gives(monkeypatch, name):
    from bisect_ov.engine.engine import Engine
    from bisect_ov.pipeline import measure

    args = (zoo_model(name), "CPU:f32", "CPU:bf16", zoo_inputs(name))
    started = []
    start = Engine.start_recompile
    monkeypatch.setattr(Engine, "start_recompile", lambda self: started.append(1) or start(self))
    beside = bisect(*args, progress=False)
    monkeypatch.setattr(measure, "RECOMPILE_BESIDE_BYTES", -1)
    after = bisect(*args, progress=False)

    def counts(report):
        return {stage: (c.ref_compiles, c.target_compiles, c.ref_infers, c.target_infers)
                for stage, c in report.costs.items()}

    # It starts exactly when the noise check compiles: no tapped compile reproduced the untouched outputs (the
    # bf16 taps of a ResNet change what the CPU fuses; a MobileNetV3's reproduce them on a CPU with AMX).
    assert len(started) == after.costs["score"].target_compiles, (started, after.costs)
    assert counts(beside) == counts(after), (beside.costs, after.costs)
    assert beside.noise == after.noise and beside.noise.compile_to_compile is not None
    assert beside.diverges == after.diverges and [n.name for n in beside.nodes] == [n.name for n in after.nodes]
