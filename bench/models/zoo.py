"""The model suite: every torchvision classification model, torchvision's segmentation models,
a BERT-base-sized TransformerEncoder, and two small transformers for --quick.

Weights are random (seeded, no downloads); BatchNorm running statistics and all-zero weight
matrices are randomized (coil_export.make_model's rules) so outputs are not trivial.
Images are 224 x 224 (inception_v3: 299); segmentation runs at 224 too (torchvision's
reference size is 520), which keeps the full suite within a night on a small machine."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

QUICK = ["resnet18", "mobilenet_v3_small", "vit_tiny", "bert_mini"]

# (name, layers, d_model, heads, feed-forward, sequence length)
_ENCODERS = {
    "bert_base": (12, 768, 12, 3072, 128),
    "bert_mini": (4, 256, 4, 1024, 128),
}
# (name, image, patch, layers, heads, hidden, mlp)
_VITS = {
    "vit_tiny": (224, 16, 12, 3, 192, 768),
}


def classification_models():
    import torchvision
    return list(torchvision.models.list_models(module=torchvision.models))


def segmentation_models():
    import torchvision
    return list(torchvision.models.list_models(module=torchvision.models.segmentation))


def all_models():
    """[(name, group)] in suite order."""
    out = [(n, "classification") for n in classification_models()]
    out += [(n, "segmentation") for n in segmentation_models()]
    out += [(n, "transformer") for n in list(_ENCODERS) + list(_VITS)]
    return out


def group_of(name):
    for n, g in all_models():
        if n == name:
            return g
    raise KeyError("unknown model %r (see bench/models/run.py --list)" % name)


def make(name, batch, seed=0):
    """(module in eval mode, example inputs) for a suite model at this batch size."""
    import torch
    import coil_export
    if name in _ENCODERS:
        layers, d, h, ff, seq = _ENCODERS[name]
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        layer = torch.nn.TransformerEncoderLayer(d, h, ff, activation="gelu", batch_first=True)
        m = torch.nn.TransformerEncoder(layer, layers)
        return m.eval(), (torch.randn(batch, seq, d, generator=gen),)
    if name in _VITS:
        import torchvision
        size, patch, layers, heads, hidden, mlp = _VITS[name]
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        m = torchvision.models.VisionTransformer(size, patch, layers, heads, hidden, mlp)
        coil_export._randomize_zero_weights(m, gen)
        return m.eval(), (torch.randn(batch, 3, size, size, generator=gen),)
    if name in segmentation_models():
        import torchvision
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        ctor = getattr(torchvision.models.segmentation, name)
        m = ctor(weights=None, weights_backbone=None)
        coil_export._randomize_bn_stats(m, gen)
        coil_export._randomize_zero_weights(m, gen)
        return m.eval(), (torch.randn(batch, 3, 224, 224, generator=gen),)
    size = 299 if name == "inception_v3" else 224
    return coil_export.make_model("torchvision:" + name, batch=batch, seed=seed, size=size)
