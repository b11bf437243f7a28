"""Vision's model helpers beyond the shared backbones (``recipe_zoo.recipes.backbones``): the layer groups of a
backbone, which fine-tuning uses for layer-wise LR decay and for unfreezing only its top; the trained model saved
for use (safetensors and its card), loaded back, and exported (ONNX, timm)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from recipe_zoo.core import artifact
from recipe_zoo.core.checkpoint import export_safetensors
from recipe_zoo.recipes import backbones, image_files
from recipe_zoo.recipes.image_splits import ImageSplits


def layer_groups(model: nn.Module, head: str) -> dict[str, int]:
    """Layer id per parameter name (0 = input side), from timm's grouping of the model's blocks."""
    from timm.optim import param_groups_layer_decay

    groups = param_groups_layer_decay(model, weight_decay=0.0, layer_decay=0.5)
    layer_of = {}
    for g in groups:
        names = [n for n, p in model.named_parameters() if any(p is q for q in g["params"])]
        scale = g["lr_scale"]
        for n in names:
            layer_of[n] = scale
    ranks = {s: i for i, s in enumerate(sorted(set(layer_of.values())))}
    return {n: ranks[s] for n, s in layer_of.items()}


def save_model(run, cfg, model: nn.Module, head: str, data: ImageSplits, mean, std,
               rows: list[dict]) -> None:
    """The scored weights (EMA when on) as safetensors, and the card: architecture, classes, input statistics."""
    export_safetensors(model, run.dir / "model.safetensors", metadata={"recipe": run.spec.name})
    artifact.write_card(run.dir, recipe=run.spec.name, task="classification", weights=["model.safetensors"],
                        selected="ema" if cfg.ema_decay else "final", classes=data.classes,
                        preprocess={"image_size": data.test_x.shape[-1], "channels": data.test_x.shape[1],
                                    "mean": mean.flatten().tolist(), "std": std.flatten().tolist(),
                                    "resize": "centre square, bilinear (antialiased)"},
                        evaluation={"tta": cfg.tta, "flip": cfg.flip == "on"},
                        architecture={"model": cfg.model, "width": cfg.width, "head": head,
                                      "pretrained": bool(cfg.weights)})
    artifact.write_predictions(run.dir, rows)


def load_model(card: dict, folder: Path, device="cpu") -> nn.Module:
    """The run's model as the card describes it, with its saved weights, in eval mode."""
    from safetensors.torch import load_model as load_into

    arch, pre = card["architecture"], card["preprocess"]
    weights = folder / "model.safetensors"
    # built as training built it: a fine-tuned model from pretrained weights (its own stem kept), else from scratch
    model, _ = backbones.build_model(arch["model"], arch["width"], str(weights) if arch["pretrained"] else "",
                                     pre["channels"], len(card["classes"]), pre["image_size"])
    load_into(model, str(weights))  # strict; tensors that safetensors de-duplicated, tied again
    return model.to(device).eval()


class Normalized(nn.Module):
    """The model on images in [0, 1] (N, C, H, W): the run's input statistics applied inside, so an exported graph
    needs nothing but the resized image."""

    def __init__(self, model: nn.Module, mean: list[float], std: list[float]):
        super().__init__()
        self.model = model
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model((images - self.mean) / self.std)


ONNX_OPSET = 18


def export_onnx(cfg, run, out: Path) -> list[Path]:
    """``model.onnx``: torch.onnx's dynamo exporter at opset 18; input ``images`` float32 (N, C, S, S) in [0, 1]
    (resized as ``preprocess.json`` says; normalisation inside), output ``logits`` of one view (no TTA); the batch
    dimension is free."""
    card = run.card
    pre = card["preprocess"]
    model = Normalized(load_model(card, run.dir), pre["mean"], pre["std"]).eval()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model.onnx"
    example = torch.rand(2, pre["channels"], pre["image_size"], pre["image_size"])
    torch.onnx.export(model, (example,), str(path), dynamo=True, opset_version=ONNX_OPSET, input_names=["images"],
                      output_names=["logits"], dynamic_shapes={"images": {0: torch.export.Dim("batch")}},
                      external_data=False, verbose=False)
    info = out / "preprocess.json"
    info.write_text(json.dumps({"input": "images: float32 (N, C, S, S), RGB (or grey) in [0, 1]", "exporter":
                                f"torch.onnx dynamo, opset {ONNX_OPSET}", "classes": card["classes"], **pre}, indent=1))
    return [path, info]


def export_timm(cfg, run, out: Path) -> list[Path]:
    """A timm model folder with the class names (``image_files.timm_folder``)."""
    return image_files.timm_folder(run.card, lambda: load_model(run.card, run.dir), out, "safetensors or onnx",
                                   label_names=run.card["classes"])
