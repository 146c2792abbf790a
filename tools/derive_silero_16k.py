#!/usr/bin/env python3
"""Derive mcp-listen's vendored Silero VAD model: the 16 kHz half of the upstream ONNX file.

    pip download --no-deps silero-vad==6.2.3 -d /tmp/sv
    unzip -p /tmp/sv/silero_vad-6.2.3-py3-none-any.whl silero_vad/data/silero_vad.onnx > /tmp/sv/upstream.onnx
    pip install onnx   # only for this script; mcp-listen does not need it
    python tools/derive_silero_16k.py /tmp/sv/upstream.onnx models/silero_vad_16k.onnx

Upstream's graph is `If(sr == 16000, then=<16 kHz network>, else=<8 kHz network>)`. mcp-listen
always records at 16 kHz, so the vendored file is the `then` branch as a graph of its own
(inputs `input`, `state`; the `sr` input is gone). Same nodes, same weights: onnxruntime then
loads one network instead of two, which saves ~6 MB of resident memory per process.
The script refuses a file whose structure differs, and checks that both models give
bit-identical outputs on random audio before writing.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def derive(upstream: Path, out: Path) -> str:
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import helper, numpy_helper

    model = onnx.load(str(upstream))
    graph = model.graph
    branch = _sixteen_khz_branch(graph, numpy_helper)
    nodes = list(branch.node) + [
        helper.make_node("Identity", [branch.output[0].name], ["output"]),
        helper.make_node("Identity", [branch.output[1].name], ["stateN"]),
    ]
    inputs = [i for i in graph.input if i.name in ("input", "state")]
    derived = helper.make_model(
        helper.make_graph(nodes, "silero_vad_16k", inputs, list(graph.output), list(branch.initializer)),
        opset_imports=model.opset_import,
        ir_version=model.ir_version,
        producer_name="mcp-listen tools/derive_silero_16k.py",
        doc_string=f"The 16 kHz branch of Silero VAD (sha256 {_sha256(upstream.read_bytes())}), MIT licence.",
    )
    onnx.checker.check_model(derived)
    data = derived.SerializeToString()
    _check_identical(onnxruntime, np, upstream.read_bytes(), data)
    out.write_bytes(data)
    return _sha256(data)


def _sixteen_khz_branch(graph, numpy_helper):
    ifs = [n for n in graph.node if n.op_type == "If"]
    equal = [n for n in graph.node if n.op_type == "Equal"]
    consts = {n.output[0]: n for n in graph.node if n.op_type == "Constant"}
    if len(ifs) != 1 or len(equal) != 1 or equal[0].output[0] != ifs[0].input[0]:
        raise SystemExit("unexpected graph: expected one If on one Equal(sr, constant)")
    rate = [consts[i] for i in equal[0].input if i in consts]
    if "sr" not in equal[0].input or len(rate) != 1 or int(numpy_helper.to_array(rate[0].attribute[0].t)) != 16000:
        raise SystemExit("unexpected graph: the If does not test sr == 16000")
    return next(a.g for a in ifs[0].attribute if a.name == "then_branch")


def _check_identical(ort, np, upstream: bytes, derived: bytes, windows: int = 200) -> None:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    full = ort.InferenceSession(upstream, options, providers=["CPUExecutionProvider"])
    half = ort.InferenceSession(derived, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    state_a = state_b = np.zeros((2, 1, 128), np.float32)
    for i in range(windows):
        x = (rng.standard_normal((1, 576)) * (0.3 if i % 40 < 20 else 0.001)).astype(np.float32)
        out_a, state_a = full.run(None, {"input": x, "state": state_a, "sr": np.array(16000, np.int64)})
        out_b, state_b = half.run(None, {"input": x, "state": state_b})
        if not (np.array_equal(out_a, out_b) and np.array_equal(state_a, state_b)):
            raise SystemExit(f"the derived model differs from upstream at window {i}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(derive(Path(sys.argv[1]), Path(sys.argv[2])))
