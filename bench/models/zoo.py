"""The model suite: every torchvision classification model, torchvision's segmentation models,
a BERT-base-sized TransformerEncoder, two small transformers for --quick, torchaudio 0.13's
models (group audio, their standard configurations) and three message-passing GNNs in plain
torch (group gnn: bench/gnn's GCN, GraphSAGE-mean and GAT on power-law graphs of 10,000 x
batch nodes and 10x as many edges).

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


# torchaudio.models in their standard configurations: (constructor, example input shapes for
# batch b). Conformer, Emformer and Tacotron2 take lengths and read them into shapes.
def _audio():
    import torchaudio.models as M
    return {
        "wav2vec2_base": (lambda: M.wav2vec2_base(), lambda b: [(b, 16000)]),
        "hubert_base": (lambda: M.hubert_base(), lambda b: [(b, 16000)]),
        "conv_tasnet_base": (lambda: M.conv_tasnet_base(num_sources=2), lambda b: [(b, 1, 8000)]),
        "deepspeech": (lambda: M.DeepSpeech(n_feature=161, n_hidden=1024, n_class=40), lambda b: [(b, 1, 200, 161)]),
        "wav2letter": (lambda: M.Wav2Letter(num_classes=40, input_type="waveform"), lambda b: [(b, 1, 16000)]),
        "wavernn": (lambda: M.WaveRNN(upsample_scales=[5, 5, 11], n_classes=256, hop_length=275, n_freq=128),
                    lambda b: [(b, 1, 2 * 275), (b, 1, 128, 6)]),
        "conformer": (lambda: M.Conformer(input_dim=80, num_heads=4, ffn_dim=256, num_layers=4,
                                          depthwise_conv_kernel_size=31), lambda b: [(b, 100, 80), "lengths"]),
        "emformer": (lambda: M.Emformer(input_dim=80, num_heads=4, ffn_dim=256, num_layers=4, segment_length=4),
                     lambda b: [(b, 100, 80), "lengths"]),
        "hdemucs_low": (lambda: M.hdemucs_low(sources=["bass", "drums", "other", "vocals"]),
                        lambda b: [(b, 2, 44100)]),
    }


AUDIO = ["wav2vec2_base", "hubert_base", "conv_tasnet_base", "deepspeech", "wav2letter", "wavernn", "conformer",
         "emformer", "hdemucs_low"]
GNN = ["gcn", "sage", "gat"]


def dynamic_bench():
    """bench/dynamic/run.py as a module (its ONNX Runtime runner: Ort, ort_available)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("dynamic_run", os.path.join(ROOT, "bench", "dynamic", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
    out += [(n, "audio") for n in AUDIO] + [(n, "gnn") for n in GNN]
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
    if name in AUDIO:
        ctor, shapes = _audio()[name]
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed + 1)
        m = ctor()
        coil_export._randomize_bn_stats(m, gen)
        ins = []
        for sh in shapes(batch):
            if sh == "lengths":  # full length for the first, shorter for the others
                t = ins[0].shape[1]
                ins.append(torch.tensor([t - (i * 7) % (t // 2) for i in range(batch)]))
            else:
                ins.append(torch.randn(*sh, generator=gen))
        return m.eval(), tuple(ins)
    if name in GNN:
        import importlib.util
        spec = importlib.util.spec_from_file_location("coil_bench_gnn", os.path.join(ROOT, "bench", "gnn", "run.py"))
        gnn = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gnn)
        n = 10000 * batch
        src, dst = gnn.power_law_graph(n, 10 * n, seed=seed + n)
        torch.manual_seed(seed)
        x = torch.randn(n, gnn.F_IN, generator=torch.Generator().manual_seed(seed + 1))
        return gnn.MODELS[name]().eval(), (x, src, dst)
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
