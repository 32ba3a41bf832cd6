"""torchaudio's models (Debian's python3-torchaudio 0.13) through coil.compile against eager.

Small configurations of the real model classes, random weights, one input each: what a user
leaving torchvision meets first (group norm and PReLU in ConvTasNet, stack/unbind in
DeepSpeech, (tensor, None) outputs and weight norm in wav2vec2 and HuBERT, index_select and an
unrolled GRU in WaveRNN, a size read from a lengths tensor in Conformer, under a guard, stft and
istft in HDemucs and a spectral gate: complex values as view_as_real pairs). Max abs
error <= 1e-4 relative to the output's scale.
"""
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

import torch  # noqa: E402

COIL = os.environ.get("COIL", "build/coil")
TOL = 1e-4
warnings.filterwarnings("ignore")


def rel_err(want, got):
    want, got = want.double(), got.double()
    return float((want - got).abs().max()) / max(float(want.abs().max()), 1e-12)


def models(M):
    w2v = dict(extractor_mode="group_norm", extractor_conv_layer_config=[(32, 10, 5), (32, 3, 2), (32, 2, 2)],
               extractor_conv_bias=False, encoder_embed_dim=48, encoder_projection_dropout=0.0,
               encoder_pos_conv_kernel=16, encoder_pos_conv_groups=4, encoder_num_layers=2, encoder_num_heads=4,
               encoder_attention_dropout=0.0, encoder_ff_interm_features=96, encoder_ff_interm_dropout=0.0,
               encoder_dropout=0.0, encoder_layer_norm_first=False, encoder_layer_drop=0.0)
    return [
        ("ConvTasNet", lambda: M.ConvTasNet(num_sources=2, enc_kernel_size=16, enc_num_feats=32, msk_kernel_size=3,
                                            msk_num_feats=16, msk_num_hidden_feats=32, msk_num_layers=3,
                                            msk_num_stacks=2), (torch.randn(1, 1, 1600),)),
        ("DeepSpeech", lambda: M.DeepSpeech(n_feature=40, n_hidden=48, n_class=10), (torch.randn(2, 1, 30, 40),)),
        ("Wav2Letter", lambda: M.Wav2Letter(num_classes=10, input_type="mfcc", num_features=13),
         (torch.randn(1, 13, 60),)),
        ("wav2vec2", lambda: M.wav2vec2_model(aux_num_out=None, **w2v), (torch.randn(1, 1600),)),
        ("wav2vec2 with an aux head, batch 2 (HuBERT fine-tuned form)", lambda: M.wav2vec2_model(aux_num_out=12, **w2v), (torch.randn(2, 1200),)),
        ("WaveRNN", lambda: M.WaveRNN(upsample_scales=[2, 2], n_classes=32, hop_length=4, n_res_block=1, n_rnn=16,
                                      n_fc=16, kernel_size=3, n_freq=12, n_hidden=8, n_output=8),
         (torch.randn(1, 1, 4 * 10), torch.randn(1, 1, 12, 12))),
        # stft and istft (complex values as view_as_real pairs, coil.fft_r2c / fft_c2r, as_strided
        # frames, reflection padding, col2im's overlap-add)
        ("HDemucs", lambda: M.HDemucs(["bass", "drums"], channels=16, nfft=256, depth=3), (torch.randn(1, 2, 4000),)),
        ("a spectral gate (stft, magnitude and phase arithmetic, istft)", Spectral, (torch.randn(2, 3000),)),
    ]


class Spectral(torch.nn.Module):
    """What speech enhancement does around its network: stft, a mask from the magnitude applied
    to the complex spectrum, istft back (plus torch.fft on the way)."""

    def __init__(self):
        super().__init__()
        self.gain = torch.nn.Linear(129, 129)

    def forward(self, x):
        w = torch.hann_window(256)
        z = torch.stft(x, 256, 64, window=w, return_complex=True)
        mag = z.abs()
        mask = torch.sigmoid(self.gain(mag.transpose(1, 2))).transpose(1, 2)
        y = torch.istft(z * mask, 256, 64, window=w, length=x.shape[-1])
        lp = torch.fft.irfft(torch.fft.rfft(x) * (torch.arange(1501) < 400), n=x.shape[-1])
        return y + 0.1 * lp


def main():
    t = Tap()
    try:
        import torchaudio
        import coil
    except Exception as e:  # noqa: BLE001
        t.ok(False, "import torchaudio and coil (deploy/install-deps.sh installs python3-torchaudio)", repr(e))
        t.done()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for name, make, ins in models(torchaudio.models):
            m = make().eval()
            t0 = time.time()
            try:
                f = coil.compile(m, ins, cache_dir=os.path.join(tmp, "cache"), threads=2, coil=COIL)
                got = f(*ins)
            except coil.CoilError as e:
                t.ok(False, "%s compiles and runs" % name, str(e)[:2000])
                continue
            with torch.no_grad():
                want = m(*ins)
            w = want if isinstance(want, tuple) else (want,)
            g = got if isinstance(got, tuple) else (got,)
            same = len(w) == len(g) and all((a is None) == (b is None) for a, b in zip(w, g))
            errs = [rel_err(a, b) for a, b in zip(w, g) if a is not None and b is not None] if same else [float("inf")]
            t.ok(same and max(errs) <= TOL, "%s matches eager (rel err %.2e; outputs %s; %.1f s)" % (
                name, max(errs), ["None" if a is None else tuple(a.shape) for a in w], time.time() - t0))
        # a spectrogram over any batch and length: one artifact (stft's frames become an unfold
        # of a symbolic length, the FFT's length stays static)
        class Spectrogram(torch.nn.Module):
            def forward(self, x):
                z = torch.stft(x, 64, 16, window=torch.hann_window(64), return_complex=True)
                return z.abs().log1p()
        m = Spectrogram()
        f = coil.compile(m, (torch.randn(2, 500),), dynamic=True, cache_dir=os.path.join(tmp, "cache"), coil=COIL)
        errs = []
        for b, n in ((2, 500), (1, 333), (3, 1001), (2, 64)):
            x = torch.randn(b, n)
            errs.append(rel_err(m(x), f(x)))
        t.ok(max(errs) <= TOL and f.stats()["compiles"] == 1, "stft at batch 1..3 and lengths 64..1001 from one "
             "artifact (rel err %.2e, %d compiles)" % (max(errs), f.stats()["compiles"]))

        class Strided(torch.nn.Module):
            def forward(self, x):
                return torch.as_strided(x.t(), (4, 3), (1, 4)) * 2
        try:
            coil.compile(Strided(), (torch.randn(4, 5),), cache_dir=os.path.join(tmp, "cache"), coil=COIL)
            t.ok(False, "as_strided of a non-contiguous tensor is refused")
        except coil.CoilError as e:
            t.ok("non-contiguous" in str(e) and "as_strided" in str(e),
                 "as_strided of a non-contiguous tensor is refused, saying why: %s" % str(e)[-150:])

        # recurrent layers over padded batches (pack_padded_sequence / pad_packed_sequence: the
        # lengths an input, the steps past them padding) and LSTM's projection
        class Packed(torch.nn.Module):
            def __init__(self, total):
                super().__init__()
                self.total = total
                self.lstm = torch.nn.LSTM(12, 16, num_layers=2, bidirectional=True, batch_first=True, proj_size=6)
                self.gru = torch.nn.GRU(12, 8, batch_first=True)

            def forward(self, x, lengths):
                rnn = torch.nn.utils.rnn
                p = rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
                o, (h, c) = self.lstm(p)
                o, _ = rnn.pad_packed_sequence(o, batch_first=True, total_length=x.shape[1] if self.total else None)
                g, hg = self.gru(rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
                g, _ = rnn.pad_packed_sequence(g, batch_first=True, padding_value=-1.0,
                                               total_length=x.shape[1] if self.total else None)
                return o, h, c, g, hg
        x = torch.randn(3, 11, 12)
        for total in (True, False):
            m = Packed(total).eval()
            f = coil.compile(m, (x, torch.tensor([11, 4, 7])), cache_dir=os.path.join(tmp, "cache"), coil=COIL)
            errs = []
            for lens in ([11, 4, 7], [3, 11, 1], [11, 11, 11]) if not total else ([11, 4, 7], [3, 9, 1], [2, 2, 2]):
                with torch.no_grad():
                    want = m(x, torch.tensor(lens))
                errs.append(max(rel_err(a, b) for a, b in zip(want, f(x, torch.tensor(lens)))))
            t.ok(max(errs) <= TOL, "packed LSTM (2 layers, bidirectional, proj_size) and GRU, %s, match eager at "
                 "several lengths (rel err %.2e)" % ("total_length given" if total else "padded to the longest",
                                                     max(errs)))
            try:
                f(x, torch.tensor([0, 4, 7]) if total else torch.tensor([9, 4, 7]))
                t.ok(False, "a length outside the sequence fails the run")
            except coil.CoilError as e:
                t.ok(("lengths[0] is 0" in str(e)) if total else ("exported for 11" in str(e)),
                     "%s fails the run, saying so: %s" % ("a length of 0" if total else "another longest length",
                                                          str(e)[-150:]))

        # Conformer's padding mask takes int(max(lengths).item()): specialised to the traced value
        # with a guard; another max fails the run, saying so
        m = torchaudio.models.Conformer(input_dim=16, num_heads=2, ffn_dim=32, num_layers=1,
                                        depthwise_conv_kernel_size=3).eval()
        x = torch.randn(2, 9, 16)
        f = coil.compile(m, (x, torch.tensor([9, 7])), cache_dir=os.path.join(tmp, "cache"), coil=COIL)
        errs = []
        for lens in ([9, 7], [4, 9], [9, 9]):
            with torch.no_grad():
                want = m(x, torch.tensor(lens))
            got = f(x, torch.tensor(lens))
            errs.append(max(rel_err(a, b) for a, b in zip(want, got)))
        t.ok(max(errs) <= TOL, "Conformer (a size read from its lengths) matches eager for lengths whose max is "
             "the traced one (rel err %.2e)" % max(errs))
        try:
            f(x, torch.tensor([8, 7]))
            t.ok(False, "Conformer with another max length fails its guard")
        except coil.CoilError as e:
            t.ok("guard_eq" in str(e) and "this run has 8" in str(e) and "exported for 9" in str(e),
                 "Conformer with another max length fails its guard, naming both values: %s" % str(e)[-200:])

        # a branch on a float value cannot be specialised: refused, naming the source line
        class Branch(torch.nn.Module):
            def forward(self, x):
                return x * 2 if float(x.sum()) > 0 else x
        try:
            coil.compile(Branch(), (x,), cache_dir=os.path.join(tmp, "cache"), coil=COIL)
            t.ok(False, "a branch on a float value is refused naming the source line")
        except coil.CoilError as e:
            t.ok(isinstance(e, coil.UnsupportedError) and "test_torchaudio.py:" in str(e)
                 and "depends on a tensor's values" in str(e),
                 "a branch on a float value is refused naming the source line: %s" % str(e)[-200:])

        # a value read out of the trace's own constants (istft's window checks) is the same at
        # every run: read at export, the branch taken; one from a parameter or torch.rand is not
        class Window(torch.nn.Module):
            def forward(self, x):
                w = torch.hann_window(8)
                return x * w.sum() if float(w.max()) > 0.5 else x
        cm = coil.compile(Window(), (x,), cache_dir=os.path.join(tmp, "cache"), coil=COIL)
        t.ok(torch.allclose(cm(x), Window()(x)), "a branch on a value made of constants alone is taken at export")

        class Param(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.p = torch.nn.Parameter(torch.ones(3))

            def forward(self, x):
                return x * 2 if float(self.p.sum()) > 0 else x

        class Rand(torch.nn.Module):
            def forward(self, x):
                return x * 2 if float(torch.rand(1)) > 0.5 else x
        for m in (Param(), Rand()):
            try:
                coil.compile(m, (x,), cache_dir=os.path.join(tmp, "cache"), coil=COIL)
                t.ok(False, "a branch on %s is refused" % type(m).__name__)
            except coil.CoilError as e:
                t.ok(isinstance(e, coil.UnsupportedError) and "depends on a tensor's values" in str(e),
                     "a branch on a %s's value is refused: %s" % (type(m).__name__, str(e)[-120:]))
    t.done()


if __name__ == "__main__":
    main()
